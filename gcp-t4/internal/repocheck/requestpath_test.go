package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestArchitectureRequestPathNamesTheCode: docs/architecture.md's request
// path table is a reader's map of the create, so each stop it names must be
// declared in the file it names (a function, or a method of the named
// receiver), and its summary's "N stops in M files" must be the table's
// own count. A rename or a move fails here until the map follows.
func TestArchitectureRequestPathNamesTheCode(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "## The request path")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "## The request path" section`)
	}
	section := text[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| ([0-9]+)(?:–([0-9]+))? \\| (.+?) \\| `([^`]+)` \\|")
	ident := regexp.MustCompile("`([A-Za-z_.]+)`")
	dir := filepath.Join(r, "src", "cloud-providers", "gcpt4")
	decls := map[string]map[string]bool{} // file → "Recv.Name" and "Name"
	files, stops := map[string]bool{}, 0
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		last := m[1]
		if m[2] != "" {
			last = m[2]
		}
		n, _ := strconv.Atoi(last)
		stops = max(stops, n)
		file := m[4]
		files[file] = true
		if decls[file] == nil {
			decls[file] = declared(t, filepath.Join(dir, file))
		}
		for _, id := range ident.FindAllStringSubmatch(m[3], -1) {
			name := id[1]
			if pkg, fn, ok := strings.Cut(name, "."); ok && strings.ToLower(pkg[:1]) == pkg[:1] && strings.HasSuffix(filepath.Dir(file), pkg) {
				name = fn // catalog.Synthesize: a function of that package
			}
			if !decls[file][name] {
				t.Errorf("docs/architecture.md's request path names %s in %s, which does not declare it", id[1], file)
			}
		}
	}
	if stops == 0 {
		t.Fatal("docs/architecture.md's request path table has no rows")
	}
	want := "**" + strconv.Itoa(stops) + " stops in " + strconv.Itoa(len(files)) + " files**"
	if !strings.Contains(section, want) {
		t.Errorf("docs/architecture.md's request path: its table has %d stops in %d files; its summary should say %s", stops, len(files), want)
	}
}

// declared is the functions of a Go file, by name and as Recv.Name for
// methods.
func declared(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		out[fn.Name.Name] = true
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			typ := fn.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				out[id.Name+"."+fn.Name.Name] = true
			}
		}
	}
	return out
}
