package containerdversions

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Makefile and the tests must agree: make prints the variables it
// includes from versions.mk, and Releases must read the same.
func TestPinnedIsWhatTheMakefileUses(t *testing.T) {
	t.Setenv(Env17, "")
	t.Setenv(Env2, "")
	all, err := Releases()
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
	var fromMake []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		_, val, _ := strings.Cut(line, "=")
		fromMake = append(fromMake, strings.Fields(val)...)
	}
	if strings.Join(fromMake, " ") != strings.Join(all, " ") {
		t.Fatalf("the Makefile uses\n%s\nReleases reads %v", out, all)
	}
}

func TestEnvWins(t *testing.T) {
	t.Setenv(Env17, "v1.7.1")
	t.Setenv(Env2, "v2.0.1 v2.3.9")
	all, err := Releases()
	if err != nil || strings.Join(all, " ") != "v1.7.1 v2.0.1 v2.3.9" {
		t.Fatalf("Releases() = %v %v, want the env's", all, err)
	}
}

// Any release whose line the table has a row for is accepted, in either
// variable: the tests choose releases by their rows' facts, not by the
// variable they came in.
func TestAcceptsWhatTheTableKnows(t *testing.T) {
	t.Setenv(Env17, "v2.2.1")
	t.Setenv(Env2, "v1.7.29 v2.1.5 v2.4.2")
	if all, err := Releases(); err != nil || len(all) != 4 {
		t.Fatalf("Releases() = %v %v, want the four releases", all, err)
	}
	for _, bad := range []string{"v1.6.9", "v2.99.0", "2.0.14", "v2.0", "main"} {
		t.Setenv(Env2, bad)
		if all, err := Releases(); err == nil {
			t.Errorf("Releases() with %s = %v, want an error", bad, all)
		}
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
	for _, bad := range []string{
		"CONTAINERD17 ?= v1.7.29\n",
		"CONTAINERD17 = v1.7.29\nCONTAINERD2 ?= v2.0.14\n",
		"CONTAINERD17 ?= v1.6.9\nCONTAINERD2 ?= v2.0.14\n",
		"CONTAINERD17 ?= v1.7.29\nCONTAINERD2 ?= v2.0.14 v3.0.0\n",
		"CONTAINERDX ?= v1\n",
	} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Chdir(dir)
		if all, err := Releases(); err == nil {
			t.Errorf("Releases() on %q = %v, want an error", bad, all)
		}
	}
}
