package repocheck

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// TestTestRunsFastChecksFirst: make test runs two lanes at once
// (scripts/lanes.sh): the podVM build and boot beside the Go checks, whose
// lane runs the unit tests before the slow lint (staticcheck from cold).
// make -n runs a recipe that calls $(MAKE), so the lanes script runs here
// with both sub-makes printing what they would do.
func TestTestRunsFastChecksFirst(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-n", "-C", root(t), "test").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "podvm-test | test/podvm/run.sh") || !strings.Contains(s, "lanes: main lane and podvm-test passed") {
		t.Errorf("make test does not run podvm-test in its own lane beside the Go checks:\n%s", s)
	}
	var main strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "podvm-test | ") {
			main.WriteString(line + "\n")
		}
	}
	order := []string{"gofmt -l", "go vet", "go test -count=1 -timeout 30m -skip", "scripts/lint/setup.sh"}
	last, prev := -1, ""
	for _, step := range order {
		i := strings.Index(main.String(), step)
		if i < 0 {
			t.Fatalf("make -n test's main lane does not run %q:\n%s", step, s)
		}
		if i < last {
			t.Errorf("make test runs %q before %q; want the order %q", step, prev, order)
		}
		last, prev = i, step
	}
	if strings.Contains(main.String(), "test/podvm/run.sh") {
		t.Errorf("make test's main lane runs the podVM test too:\n%s", s)
	}
}

// goWorkModules is the directories go.work uses, as `go work edit -json`
// reads them ("gcp-t4", "install", ...).
func goWorkModules(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var w struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var dirs []string
	for _, u := range w.Use {
		dirs = append(dirs, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	if len(dirs) < 3 {
		t.Fatalf("go.work uses only %v", dirs)
	}
	return dirs
}

// TestMakeChecksEveryGoWorkModule: MODULES (vet, staticcheck, the unit
// tests) and fmt-check cover each module go.work uses, so a module added
// there (install/, the embedded kustomize tree, was one) is not left
// unchecked.
func TestMakeChecksEveryGoWorkModule(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	vet, err := exec.Command("make", "-n", "-C", root(t), "vet").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n vet: %v\n%s", err, vet)
	}
	fmtCheck, err := exec.Command("make", "-n", "-C", root(t), "fmt-check").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n fmt-check: %v\n%s", err, fmtCheck)
	}
	gofmt := regexp.MustCompile(`gofmt -l ((?:[\w./-]+ )+)`).FindSubmatch(fmtCheck)
	if gofmt == nil {
		t.Fatalf("make -n fmt-check runs no gofmt -l:\n%s", fmtCheck)
	}
	for _, dir := range goWorkModules(t) {
		if !slices.Contains(strings.Fields(string(vet)), "./"+dir+"/...") {
			t.Errorf("make vet does not vet ./%s/... (go.work uses it; add it to MODULES):\n%s", dir, vet)
		}
		top, _, _ := strings.Cut(dir, "/")
		if !slices.Contains(strings.Fields(string(gofmt[1])), top) {
			t.Errorf("make fmt-check does not gofmt %s (go.work uses %s):\n%s", top, dir, fmtCheck)
		}
	}
}
