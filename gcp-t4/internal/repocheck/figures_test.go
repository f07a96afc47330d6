package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// firstRunRow is a row of docs/benchmarks.md's first-run table:
// | `make demo` | about 5 min (…) | about 3 s (…) | …
var firstRunRow = regexp.MustCompile("(?m)^\\| `make (demo|test-short)` \\| about ([0-9]+ (?:s|min))\\b[^|]*\\| about ([0-9]+ (?:s|min))\\b[^|]*\\|")

// TestFirstRunFiguresAgree: the first-run times README and `make help`
// give for make demo and make test-short are those docs/benchmarks.md
// measured, next to the commands that measured them. README once said
// "a few seconds" for a make demo that took 677 s on a fresh clone, and
// make help "about a minute" for a test-short that took 457 s.
func TestFirstRunFiguresAgree(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	r := root(t)
	bench, err := os.ReadFile(filepath.Join(r, "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"GOCACHE=$(mktemp -d) GOMODCACHE=$(mktemp -d)", "make demo", "make test-short", "uptime"} {
		if !strings.Contains(string(bench), cmd) {
			t.Errorf("docs/benchmarks.md does not give the command that measured the first-run figures (%q)", cmd)
		}
	}
	want := map[string]string{}
	for _, m := range firstRunRow.FindAllStringSubmatch(string(bench), -1) {
		want[m[1]] = "first run about " + m[2] + ", then about " + m[3]
	}
	if len(want) != 2 {
		t.Fatalf("docs/benchmarks.md: want one first-run row each for make demo and make test-short (| `make demo` | about N min … | about N s … |), found %v", want)
	}
	help, err := exec.Command("make", "-s", "-C", r, "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, help)
	}
	readme, err := os.ReadFile(filepath.Join(r, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for target, figures := range want {
		if !hasLine(string(help), "  "+target+" ", figures) {
			t.Errorf("make help's %s line does not say %q (docs/benchmarks.md):\n%s", target, figures, help)
		}
		if !hasLine(string(readme), "make "+target+" ", figures) {
			t.Errorf("README.md has no `make %s` line saying %q (docs/benchmarks.md)", target, figures)
		}
	}
}

// hasLine: some line of text starts with prefix and contains s.
func hasLine(text, prefix, s string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, s) {
			return true
		}
	}
	return false
}
