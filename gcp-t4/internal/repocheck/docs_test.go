package repocheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goPackages lists the directories under dir holding Go files, relative
// to dir, testdata excluded.
func goPackages(t *testing.T, dir string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			rel, err := filepath.Rel(dir, filepath.Dir(p))
			if err != nil {
				return err
			}
			if !seen[rel] {
				seen[rel] = true
				out = append(out, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArchitectureNamesEveryPackage: docs/architecture.md is where a
// maintainer finds what each package is for, so a package it does not
// name fails here.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	internal := goPackages(t, filepath.Join(r, "gcp-t4", "internal"))
	if len(internal) < 20 {
		t.Fatalf("found only %d packages under gcp-t4/internal: %v", len(internal), internal)
	}
	for _, p := range internal {
		if !strings.Contains(string(doc), "`"+p+"`") && !strings.Contains(string(doc), "`gcp-t4/internal/"+p+"`") {
			t.Errorf("docs/architecture.md does not name gcp-t4/internal/%s (write `%s` where it says what the package is for)", p, p)
		}
	}
	// Each module of go.work has its bullet under "## Modules".
	for _, m := range goWorkModules(t) {
		if !strings.Contains(string(doc), "- **`"+m+"`**") {
			t.Errorf("docs/architecture.md has no bullet for the go.work module %s (write - **`%s`** under Modules)", m, m)
		}
	}
	for _, p := range goPackages(t, filepath.Join(r, "src", "cloud-providers")) {
		name := "src/cloud-providers"
		if p != "." {
			name += "/" + p
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/architecture.md does not name %s", name)
		}
	}
}

// TestArchitectureGivesTheForksGoDirective: the go directive the doc
// states for the fork is the one in its go.mod.
func TestArchitectureGivesTheForksGoDirective(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(r, "src", "cloud-providers", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("src/cloud-providers/go.mod has no go directive")
	}
	d := regexp.MustCompile("`go` directive is ([0-9.]+)").FindSubmatch(doc)
	if d == nil || string(d[1]) != string(m[1]) {
		t.Fatalf("docs/architecture.md states the fork's go directive as %q; go.mod says %s", d, m[1])
	}
}

// repoPath is a backticked path into this repository's own trees (paths
// into upstream's trees, such as src/cloud-api-adaptor/..., are not ours).
var repoPath = regexp.MustCompile("`((?:gcp-t4/|src/cloud-providers/gcpt4|install/|test/|podvm/|docs/|scripts/)[A-Za-z0-9_./-]*)(?::[0-9]+)?`")

// TestDocsNameFilesThatExist: every file or directory of ours a doc names
// exists (preflight.md once named a prices file that did not).
func TestDocsNameFilesThatExist(t *testing.T) {
	r := root(t)
	docs, err := filepath.Glob(filepath.Join(r, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(r, "README.md"))
	n := 0
	for _, d := range docs {
		data, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range repoPath.FindAllStringSubmatch(string(data), -1) {
			n++
			if _, err := os.Stat(filepath.Join(r, m[1])); err != nil {
				t.Errorf("%s names %s, which does not exist", filepath.Base(d), m[1])
			}
		}
	}
	if n < 50 {
		t.Fatalf("found only %d repository paths in the docs", n)
	}
}
