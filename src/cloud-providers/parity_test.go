package provider

import (
	"flag"
	"math"
	"testing"
	"time"
)

// The fork must read every env value exactly as upstream's module does, or a
// DaemonSet that works with upstream's CAA image configures ours differently.
// Every expectation below is what upstream's own code returns at v0.22.0
// (commit 38d0fcf7, src/cloud-providers/util.go: StringWithEnv line 207,
// IntWithEnv 223 (fmt.Sscanf "%d": a leading integer is taken, the rest
// ignored), UintWithEnv 242 and Uint64WithEnv 260 (strconv.ParseUint base
// 10), Float64WithEnv 278 (strconv.ParseFloat), BoolWithEnv 297 ("1" or
// "true", any case), DurationWithEnv 314 (time.ParseDuration),
// CustomTypeWithEnv 333, DefaultToEnv 152; types.go: KeyValueFlag.Set line
// 36), measured by running that code on these inputs. An unset or empty
// variable keeps the hard-coded default; so does a value the parser refuses.

const parityEnv = "PARITY_T"

func registrar() (*flag.FlagSet, *FlagRegistrar) {
	fs := flag.NewFlagSet("parity", flag.ContinueOnError)
	return fs, NewFlagRegistrar(fs)
}

func TestIntWithEnvParsesAsUpstream(t *testing.T) {
	const def = 41
	for _, tc := range []struct {
		env  string
		want int
	}{
		{"", def}, {" ", def}, {"7", 7}, {"12abc", 12}, {" 12", 12}, {"12 ", 12},
		{"+5", 5}, {"-3", -3}, {"0x1F", 0}, {"1_000", 1}, {"abc", def},
		{"9223372036854775807", math.MaxInt64}, {"9223372036854775808", def},
		{"1e3", 1}, {"3.9", 3}, {"007", 7}, {"\t8\n", 8}, {"--1", def}, {"- 1", def},
	} {
		t.Setenv(parityEnv, tc.env)
		var got int
		_, r := registrar()
		r.IntWithEnv(&got, "i", def, parityEnv, "")
		if got != tc.want {
			t.Errorf("IntWithEnv with %s=%q gives %d; upstream gives %d", parityEnv, tc.env, got, tc.want)
		}
	}
}

func TestUintWithEnvParsesAsUpstream(t *testing.T) {
	const def = 41
	for _, tc := range []struct {
		env    string
		want32 uint
		want64 uint64
	}{
		{"", def, def}, {"9", 9, 9}, {" 9", def, def}, {"9 ", def, def}, {"-1", def, def},
		{"+9", def, def}, {"4294967295", 4294967295, 4294967295}, {"4294967296", def, 4294967296},
		{"0x10", def, def}, {"9x", def, def},
	} {
		t.Setenv(parityEnv, tc.env)
		var u uint
		var u64 uint64
		_, r := registrar()
		r.UintWithEnv(&u, "u", def, parityEnv, "")
		r.Uint64WithEnv(&u64, "u64", def, parityEnv, "")
		if u != tc.want32 || u64 != tc.want64 {
			t.Errorf("Uint/Uint64WithEnv with %q give %d, %d; upstream gives %d, %d", tc.env, u, u64, tc.want32, tc.want64)
		}
	}
}

func TestFloat64WithEnvParsesAsUpstream(t *testing.T) {
	const def = 4.5
	for _, tc := range []struct {
		env  string
		want float64
	}{
		{"", def}, {"2.5", 2.5}, {" 2.5", def}, {"1e3", 1000}, {"inf", math.Inf(1)},
		{"0x1p-2", 0.25}, {"2.5x", def}, {"1_0.5", 10.5},
	} {
		t.Setenv(parityEnv, tc.env)
		var got float64
		_, r := registrar()
		r.Float64WithEnv(&got, "f", def, parityEnv, "")
		if got != tc.want {
			t.Errorf("Float64WithEnv with %q gives %v; upstream gives %v", tc.env, got, tc.want)
		}
	}
	t.Setenv(parityEnv, "NaN")
	var got float64
	_, r := registrar()
	r.Float64WithEnv(&got, "f", def, parityEnv, "")
	if !math.IsNaN(got) {
		t.Errorf("Float64WithEnv with NaN gives %v; upstream gives NaN", got)
	}
}

func TestBoolWithEnvParsesAsUpstream(t *testing.T) {
	for _, tc := range []struct {
		env                 string
		fromFalse, fromTrue bool
	}{
		{"", false, true}, {"1", true, true}, {"true", true, true}, {"TRUE", true, true},
		{"True", true, true}, {"yes", false, false}, {"0", false, false}, {"false", false, false},
		{" true", false, false}, {"t", false, false}, {"on", false, false},
	} {
		t.Setenv(parityEnv, tc.env)
		var a, b bool
		_, r := registrar()
		r.BoolWithEnv(&a, "a", false, parityEnv, "")
		r.BoolWithEnv(&b, "b", true, parityEnv, "")
		if a != tc.fromFalse || b != tc.fromTrue {
			t.Errorf("BoolWithEnv with %q gives %v, %v (defaults false, true); upstream gives %v, %v", tc.env, a, b, tc.fromFalse, tc.fromTrue)
		}
	}
}

func TestDurationAndStringWithEnvParseAsUpstream(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{
		{"", time.Minute}, {"3s", 3 * time.Second}, {" 3s", time.Minute}, {"3", time.Minute},
		{"1h2m", time.Hour + 2*time.Minute}, {"3s ", time.Minute}, {"-2m", -2 * time.Minute}, {"abc", time.Minute},
	} {
		t.Setenv(parityEnv, tc.env)
		var got time.Duration
		_, r := registrar()
		r.DurationWithEnv(&got, "d", time.Minute, parityEnv, "")
		if got != tc.want {
			t.Errorf("DurationWithEnv with %q gives %v; upstream gives %v", tc.env, got, tc.want)
		}
	}
	for _, tc := range []struct{ env, want string }{{"", "hard"}, {" ", " "}, {"x", "x"}, {" x ", " x "}} {
		t.Setenv(parityEnv, tc.env)
		var got string
		_, r := registrar()
		r.StringWithEnv(&got, "s", "hard", parityEnv, "")
		if got != tc.want {
			t.Errorf("StringWithEnv with %q gives %q; upstream gives %q", tc.env, got, tc.want)
		}
	}
}

func TestKeyValueFlagAndCustomTypeAsUpstream(t *testing.T) {
	for _, tc := range []struct {
		env        string
		viaEnv     map[string]string // CustomTypeWithEnv, hard-coded default "d=0"
		viaSet     map[string]string // KeyValueFlag.Set on an empty flag
		setErrText string
	}{
		{"", map[string]string{"d": "0"}, map[string]string{}, "invalid key-value pair: "},
		{"a=1", map[string]string{"a": "1"}, map[string]string{"a": "1"}, ""},
		{" a = 1 , b=2", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1", "b": "2"}, ""},
		{"a=1,b", map[string]string{"a": "1"}, map[string]string{"a": "1"}, "invalid key-value pair: b"},
		{"a==1", map[string]string{"a": "=1"}, map[string]string{"a": "=1"}, ""},
		{"=1", map[string]string{"": "1"}, map[string]string{"": "1"}, ""},
		{"a=", map[string]string{"a": ""}, map[string]string{"a": ""}, ""},
		{",", map[string]string{}, map[string]string{}, "invalid key-value pair: "},
		{"a=1,,b=2", map[string]string{"a": "1"}, map[string]string{"a": "1"}, "invalid key-value pair: "},
	} {
		t.Setenv(parityEnv, tc.env)
		var kv KeyValueFlag
		_, r := registrar()
		r.CustomTypeWithEnv(&kv, "kv", "d=0", parityEnv, "")
		if !sameMap(kv, tc.viaEnv) {
			t.Errorf("CustomTypeWithEnv with %q gives %v; upstream gives %v", tc.env, kv, tc.viaEnv)
		}
		var set KeyValueFlag
		err := set.Set(tc.env)
		errText := ""
		if err != nil {
			errText = err.Error()
		}
		if !sameMap(set, tc.viaSet) || errText != tc.setErrText {
			t.Errorf("KeyValueFlag.Set(%q) gives %v, %q; upstream gives %v, %q", tc.env, set, errText, tc.viaSet, tc.setErrText)
		}
	}
}

func TestDefaultToEnvAsUpstream(t *testing.T) {
	t.Setenv(parityEnv, "env")
	t.Setenv(parityEnv+"_EMPTY", "")
	a, b, c := "", "set", ""
	DefaultToEnv(&a, parityEnv, "fb")
	DefaultToEnv(&b, parityEnv, "fb")
	DefaultToEnv(&c, parityEnv+"_EMPTY", "fb")
	if a != "env" || b != "set" || c != "fb" {
		t.Fatalf("DefaultToEnv gives %q %q %q; upstream gives \"env\" \"set\" \"fb\"", a, b, c)
	}
}

func sameMap(got KeyValueFlag, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}
