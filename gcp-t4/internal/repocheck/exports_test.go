package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// gcpt4Exports is every exported name of the drop-in provider's package
// (tests excluded): top-level names, and Type.Method for the exported
// methods of exported types.
func gcpt4Exports(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var names []string
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					names = append(names, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() {
							names = append(names, spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

var backticked = regexp.MustCompile("`([A-Z][A-Za-z0-9]*(?:\\.[A-Z][A-Za-z0-9]*)?)`")

// listedExports reads the names docs/upstream.md's export section lists
// in its numbered groups.
func listedExports(t *testing.T, doc string) []string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "## What `gcpt4` exports, and for whom\n")
	if !ok {
		t.Fatal("docs/upstream.md has no section \"What `gcpt4` exports, and for whom\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, groups, ok := strings.Cut(section, "\n1. ")
	if !ok {
		t.Fatal("the export section has no numbered groups")
	}
	var names []string
	for _, m := range backticked.FindAllStringSubmatch(groups, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// TestGcpt4ExportsAreListed: the drop-in's package surface is a decision
// recorded in docs/upstream.md, group by group; an export added without
// saying whom it serves, or one the doc still names after it went, fails.
func TestGcpt4ExportsAreListed(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs", "upstream.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := gcpt4Exports(t, filepath.Join(r, "src", "cloud-providers", "gcpt4"))
	listed := listedExports(t, string(doc))
	if len(got) == 0 {
		t.Fatal("found no exported names in gcpt4")
	}
	for _, n := range got {
		if _, found := slices.BinarySearch(listed, n); !found {
			t.Errorf("gcpt4 exports %s, which docs/upstream.md's export section does not list: add it to its group or unexport it", n)
		}
	}
	seen := map[string]bool{}
	for _, n := range listed {
		if seen[n] {
			t.Errorf("docs/upstream.md lists %s twice", n)
		}
		seen[n] = true
		if _, found := slices.BinarySearch(got, n); !found {
			t.Errorf("docs/upstream.md lists %s, which gcpt4 does not export", n)
		}
	}
}

// exportsByFile is gcpt4Exports per file name.
func exportsByFile(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		tmp := t.TempDir()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(path)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(path)] = gcpt4Exports(t, tmp)
	}
	return out
}

var goFile = regexp.MustCompile("`([a-z0-9_]+\\.go)`")

// TestCAAFilesExportOnlyCAAsSurface: the files docs/upstream.md names as
// CAA's surface export only groups 1 and 2 and the names it says both
// sides call, so that what CAA depends on reads apart from what our tools
// reuse.
func TestCAAFilesExportOnlyCAAsSurface(t *testing.T) {
	r := root(t)
	data, err := os.ReadFile(filepath.Join(r, "docs", "upstream.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	_, para, ok := strings.Cut(doc, "**Where each side lives.**")
	if !ok {
		t.Fatal("docs/upstream.md has no \"Where each side lives\" paragraph")
	}
	para, _, _ = strings.Cut(para, "What serves only our tools")
	var caaFiles, shared []string
	for _, m := range goFile.FindAllStringSubmatch(para, -1) {
		caaFiles = append(caaFiles, m[1])
	}
	for _, m := range backticked.FindAllStringSubmatch(para, -1) {
		shared = append(shared, m[1])
	}
	_, section, _ := strings.Cut(doc, "## What `gcpt4` exports, and for whom\n")
	_, groups, _ := strings.Cut(section, "\n1. ")
	caaGroups, _, _ := strings.Cut(groups, "\n3. ")
	var allowed []string
	for _, m := range backticked.FindAllStringSubmatch(caaGroups, -1) {
		allowed = append(allowed, m[1])
	}
	allowed = append(allowed, shared...)
	if len(caaFiles) < 5 || len(shared) != 3 {
		t.Fatalf("read CAA's files %v and shared names %v from the paragraph", caaFiles, shared)
	}
	byFile := exportsByFile(t, filepath.Join(r, "src", "cloud-providers", "gcpt4"))
	for _, f := range caaFiles {
		names, ok := byFile[f]
		if !ok {
			t.Errorf("docs/upstream.md names %s as CAA's, which gcpt4 does not have", f)
		}
		for _, n := range names {
			if !slices.Contains(allowed, n) {
				t.Errorf("%s exports %s, which is not CAA's (groups 1 and 2) nor shared: move it to tools.go or another tools file", f, n)
			}
		}
	}
}

// gcpt4ExportCeiling is how many names the drop-in package may export:
// where the count stands, lowered as groups move into leaf packages
// beside it (docs/upstream.md), and never above 60 (issue 53: what CAA
// calls, its own tests and the tools' entry points need). 173 before the
// Event schema moved to gcpt4/podevent and the settings' description to
// gcpt4/setting; 105 before the catalogue (GPU families, shapes,
// profiles, prices, offerings) moved to gcpt4/catalog; 72 before the
// credential check, the listing's VMs and a lost podVM's interruption
// moved to gcpt4/credential, gcpt4/managed and gcpt4/podevent.
const gcpt4ExportCeiling = 60

// TestGcpt4ExportCeiling: the surface only shrinks. An export added
// beyond the ceiling fails here even when docs/upstream.md lists it; put
// it in a leaf package, or lower another first.
func TestGcpt4ExportCeiling(t *testing.T) {
	got := gcpt4Exports(t, filepath.Join(root(t), "src", "cloud-providers", "gcpt4"))
	if len(got) > gcpt4ExportCeiling {
		t.Errorf("gcpt4 exports %d names, over its ceiling of %d: move what only our tools read into a leaf package beside it (docs/upstream.md)", len(got), gcpt4ExportCeiling)
	}
}
