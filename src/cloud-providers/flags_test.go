package provider

import (
	"flag"
	"testing"
	"time"
)

func TestWithEnvDefaultsAndFlagPrecedence(t *testing.T) {
	t.Setenv("T_STR", "from-env")
	t.Setenv("T_INT", "7")
	t.Setenv("T_BOOL", "TRUE")
	t.Setenv("T_DUR", "3s")
	t.Setenv("T_BADINT", "seven")
	t.Setenv("T_KV", "a=1, b = 2")
	t.Setenv("T_EMPTY", "")
	var (
		s, empty   string
		i, bad     int
		b          bool
		d          time.Duration
		u          uint
		f          float64
		kv         KeyValueFlag
		defaultStr string
	)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	r := NewFlagRegistrar(fs)
	r.StringWithEnv(&s, "str", "hard", "T_STR", "", Required())
	r.StringWithEnv(&empty, "empty", "hard", "T_EMPTY", "")
	r.StringWithEnv(&defaultStr, "dflt", "hard", "", "")
	r.IntWithEnv(&i, "int", 1, "T_INT", "")
	r.IntWithEnv(&bad, "bad", 5, "T_BADINT", "")
	r.BoolWithEnv(&b, "bool", false, "T_BOOL", "")
	r.DurationWithEnv(&d, "dur", time.Second, "T_DUR", "")
	r.UintWithEnv(&u, "uint", 9, "T_UNSET", "")
	r.Float64WithEnv(&f, "f", 1.5, "T_UNSET", "", Secret())
	r.CustomTypeWithEnv(&kv, "kv", "", "T_KV", "")
	if err := fs.Parse([]string{"-int", "42"}); err != nil {
		t.Fatal(err)
	}
	if s != "from-env" || empty != "hard" || defaultStr != "hard" {
		t.Errorf("strings: %q %q %q", s, empty, defaultStr)
	}
	if i != 42 {
		t.Errorf("an explicit flag must win over env: %d", i)
	}
	if bad != 5 {
		t.Errorf("an unparsable env value must leave the default: %d", bad)
	}
	if !b || d != 3*time.Second || u != 9 || f != 1.5 {
		t.Errorf("bool %v dur %v uint %v float %v", b, d, u, f)
	}
	if kv["a"] != "1" || kv["b"] != "2" || kv.String() != "a=1, b=2" {
		t.Errorf("kv = %v (%s)", kv, kv.String())
	}
}

func TestKeyValueFlagRejectsPairWithoutEquals(t *testing.T) {
	var kv KeyValueFlag
	if err := kv.Set("a=1,b"); err == nil {
		t.Fatal("want an error for a pair without '='")
	}
}

func TestDefaultToEnv(t *testing.T) {
	t.Setenv("T_D", "env")
	a, b, c := "", "set", ""
	DefaultToEnv(&a, "T_D", "fb")
	DefaultToEnv(&b, "T_D", "fb")
	DefaultToEnv(&c, "T_NONE", "fb")
	if a != "env" || b != "set" || c != "fb" {
		t.Fatalf("%q %q %q", a, b, c)
	}
}
