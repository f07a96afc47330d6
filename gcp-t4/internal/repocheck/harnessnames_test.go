package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// test/node is a module of its own that imports neither the provider nor
// gcp-t4 (it builds them as binaries and drives them), so the names it
// shares with them are written there again; this holds each copy equal to
// the name it stands for, so a rename fails here rather than in a hand-run
// kata stage.
func TestNodeHarnessNamesMatchTheProduct(t *testing.T) {
	consts := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range []string{"podvm.go", "kata_test.go"} {
		file, err := parser.ParseFile(fset, filepath.Join(root(t), "test", "node", f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	for name, want := range map[string]string{
		"CacheImage":      demo.CacheDemoImage,
		"cacheDevice":     gcpt4.CacheDeviceName,
		"cacheVerityKey":  gcpt4.CacheVerityMetadata,
		"reasonRequested": podevent.ReasonRequested,
		"reasonCreated":   podevent.ReasonCreated,
	} {
		if got, ok := consts[name]; !ok || got != want {
			t.Errorf("test/node's %s is %q, the product's %q", name, got, want)
		}
	}
}
