package containerdversions

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Makefile and the tests must agree: make prints the variables it
// includes from versions.mk, and Pinned must read the same.
func TestPinnedIsWhatTheMakefileUses(t *testing.T) {
	t.Setenv(Env17, "")
	t.Setenv(Env2, "")
	v17, v2s, err := Pinned()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-s", "-C", "../../..", "print-containerd-versions").CombinedOutput()
	if err != nil {
		t.Fatalf("make print-containerd-versions: %v\n%s", err, out)
	}
	want := "CONTAINERD17=" + v17 + "\nCONTAINERD2=" + strings.Join(v2s, " ") + "\n"
	if string(out) != want {
		t.Fatalf("the Makefile uses\n%s\nPinned reads\n%s", out, want)
	}
	if !strings.HasPrefix(v2s[0], "v2.0.") {
		t.Errorf("the first 2.x release is %s; the tests of GKE 1.33's containerd want a 2.0 first", v2s[0])
	}
}

func TestEnvWins(t *testing.T) {
	t.Setenv(Env17, "v1.7.1")
	t.Setenv(Env2, "v2.0.1 v2.9.9")
	v17, v2s, err := Pinned()
	if err != nil || v17 != "v1.7.1" || strings.Join(v2s, " ") != "v2.0.1 v2.9.9" {
		t.Fatalf("Pinned() = %s %v %v, want the env's", v17, v2s, err)
	}
}

func TestRefusesWhatIsNotAVersionFile(t *testing.T) {
	t.Setenv(Env17, "")
	t.Setenv(Env2, "")
	dir := t.TempDir()
	p := filepath.Join(dir, File)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"CONTAINERD17 ?= v1.7.29\n", "CONTAINERD17 = v1.7.29\nCONTAINERD2 ?= v2.0.14\n", "CONTAINERD17 ?= v2.0.1\nCONTAINERD2 ?= v2.0.14\n", "CONTAINERDX ?= v1\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Chdir(dir)
		if v17, v2s, err := Pinned(); err == nil {
			t.Errorf("Pinned() on %q = %s %v, want an error", bad, v17, v2s)
		}
	}
}
