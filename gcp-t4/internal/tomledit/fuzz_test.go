package tomledit

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzApply: for input the real parser rejects, the kata edit refuses and
// leaves the input byte-identical; for any document it accepts, the edit
// either refuses (leaving the input alone) or produces a document that
// parses, holds the wanted values, keeps every other key, and is a fixed
// point.
func FuzzApply(f *testing.F) {
	gke, err := os.ReadFile("testdata/gke-v2.toml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(gke),
		"",
		"version = 2\n",
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndiscard_unpacked_layers = true",
		"[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd.discard_unpacked_layers = true\n",
		"a = [\n 1, # c\n 2 ]\n[proxy_plugins.nydus]\ntype='x' # t\n",
		"[plugins]\n'io.containerd.grpc.v1.cri' = {}\n",
		"s = '''\n[x]\n'''\n[[y]]\nz = 1979-05-27 07:32:00Z\n",
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata-remote]\nruntime_type = \"old\"\ncri_handler = \"cc\"\n",
		// Not TOML: each must be refused.
		"[a", "x = ", "a = 1\na = 2\n", "\x00", "[plugins]\n[plugins]\n",
	} {
		f.Add([]byte(seed))
	}
	for _, seed := range validSamples {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		orig := bytes.Clone(src)
		before, decErr := Decode(src)
		out, err := Apply(src, kataChanges(), Render)
		if !bytes.Equal(src, orig) {
			t.Fatal("Apply modified its input")
		}
		if decErr != nil {
			// Not TOML: the edit must refuse and return nothing to write,
			// so the caller leaves the file byte-identical.
			if err == nil {
				t.Fatalf("Apply accepted input the parser rejects (%v):\n%q", decErr, src)
			}
			if out != nil {
				t.Fatalf("Apply refused (%v) but returned %d bytes to write", err, len(out))
			}
			return
		}
		if err != nil {
			if out != nil {
				t.Fatalf("Apply refused (%v) but returned %d bytes to write", err, len(out))
			}
			var se *scanError
			if !errors.Is(err, ErrUnsupported) && !errors.As(err, &se) {
				t.Fatalf("Apply refused with an unexpected error: %v", err)
			}
			return
		}
		after, err := Decode(out)
		if err != nil {
			t.Fatalf("output does not parse: %v\n%s", err, out)
		}
		al := Leaves(after)
		for _, c := range kataChanges() {
			if !sameValue(al[c.Path()], c.Value) {
				t.Fatalf("%s = %v, want %v", c.Path(), al[c.Path()], c.Value)
			}
		}
		for p := range Leaves(before) {
			if _, ok := al[p]; !ok && !hasPrefixKey(al, p+".") {
				t.Fatalf("key %s lost:\n%s", p, out)
			}
		}
		again, err := Apply(out, kataChanges(), Render)
		if err != nil {
			t.Fatalf("second Apply: %v", err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n%s\n---\n%s", out, again)
		}
	})
}

func TestApplyRefusesNonTOML(t *testing.T) {
	for _, src := range []string{"[a", "x = ", "a = 1\na = 2\n", "\x00"} {
		if _, err := Apply([]byte(src), kataChanges(), Render); err == nil {
			t.Errorf("Apply(%q) succeeded, want refusal", src)
		}
	}
}
