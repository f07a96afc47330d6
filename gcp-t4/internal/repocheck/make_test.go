package repocheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository root, three levels above this package.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.work")); err != nil {
		t.Fatalf("no go.work at %s: %v", r, err)
	}
	return r
}

var targetLine = regexp.MustCompile(`^([a-z][a-z0-9_.-]*):([^=]|$)`)

// makeTargets reads the Makefile's rules: every line `name:` that is not
// a variable assignment.
func makeTargets(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := targetLine.FindStringSubmatch(sc.Text()); m != nil {
			targets = append(targets, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return targets
}

// TestMakeHelpListsEveryTarget runs `make help` as a user would and checks
// that each target of the Makefile (but `all`, the default) is listed with
// a description, so a target added without its `## ` comment fails here.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	r := root(t)
	out, err := exec.Command("make", "-s", "-C", r, "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
			listed[f[0]] = strings.Join(f[1:], " ")
		}
	}
	targets := makeTargets(t, filepath.Join(r, "Makefile"))
	if len(targets) < 30 {
		t.Fatalf("read only %d targets from the Makefile: %v", len(targets), targets)
	}
	for _, target := range targets {
		if target == "all" {
			continue
		}
		if listed[target] == "" {
			t.Errorf("make help does not list %q: give it a `## %s: what it does` comment above its rule", target, target)
		}
	}
	for _, want := range []string{"help", "test", "unit", "test-short", "lint", "containerd", "controlplane"} {
		if listed[want] == "" {
			t.Errorf("make help lacks %s", want)
		}
	}
}

// TestUnitBuildsItsNeighboursFirst: `make unit` on a fresh clone must build
// containerd and the control plane before go test needs them; make -n
// prints the recipes in the order make would run them.
func TestUnitBuildsItsNeighboursFirst(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-n", "-C", root(t), "unit").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n unit: %v\n%s", err, out)
	}
	s := string(out)
	test := strings.Index(s, "go test")
	for _, dep := range []string{"test/containerd/build.sh", "test/controlplane/build.sh kube-apiserver", "test/controlplane/build.sh etcd", "test/controlplane/build.sh kustomize"} {
		i := strings.Index(s, dep)
		if i < 0 || test < 0 || i > test {
			t.Errorf("make unit does not run %s before go test:\n%s", dep, s)
		}
	}
}

// TestTestRunsFastChecksFirst: make test runs the unit tests before the
// slow lint (staticcheck from cold) and the podVM build.
func TestTestRunsFastChecksFirst(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-n", "-C", root(t), "test").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	s := string(out)
	order := []string{"gofmt -l", "go vet", "go test -count=1 -skip", "scripts/lint/setup.sh", "test/podvm/run.sh"}
	last, prev := -1, ""
	for _, step := range order {
		i := strings.Index(s, step)
		if i < 0 {
			t.Fatalf("make -n test does not run %q:\n%s", step, s)
		}
		if i < last {
			t.Errorf("make test runs %q before %q; want the order %q", step, prev, order)
		}
		last, prev = i, step
	}
}
