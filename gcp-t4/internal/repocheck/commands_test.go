package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeListsEveryCommand: the README's command table is where a
// user first learns what `gcp-t4` does, so each command in the binary's
// table (cmd/gcp-t4/main.go, what `gcp-t4 help` prints) has a row there,
// named `gcp-t4 NAME` (with its arguments, as `gcp-t4 plan -f <manifest>`,
// or `NAME` after a slash, as `gc` / `reaper`).
func TestReadmeListsEveryCommand(t *testing.T) {
	r := root(t)
	src, err := os.ReadFile(filepath.Join(r, "gcp-t4", "cmd", "gcp-t4", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	commands := regexp.MustCompile(`(?m)^\s+"([a-z-]+)":\s+\{Summary:`).FindAllStringSubmatch(string(src), -1)
	if len(commands) < 8 {
		t.Fatalf("read only %d commands from cmd/gcp-t4/main.go", len(commands))
	}
	readme, err := os.ReadFile(filepath.Join(r, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cells []string
	for line := range strings.SplitSeq(string(readme), "\n") {
		if first, ok := strings.CutPrefix(line, "| `gcp-t4 "); ok {
			first, _, _ = strings.Cut(first, " |")
			cells = append(cells, "`gcp-t4 "+first)
		}
	}
	for _, c := range commands {
		name := c[1]
		found := false
		for _, cell := range cells {
			if strings.Contains(cell, "`gcp-t4 "+name+"`") || strings.Contains(cell, "`gcp-t4 "+name+" ") || strings.Contains(cell, "/ `"+name+"`") {
				found = true
			}
		}
		if !found {
			t.Errorf("README.md's command table has no row for gcp-t4 %s (a row | `gcp-t4 %s` | what it does |)", name, name)
		}
	}
}
