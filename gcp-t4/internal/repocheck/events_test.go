package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNodeEventReasonsAreDocumented: an operator greps `kubectl describe
// node` for the reasons docs/remediation.md lists, so each reason
// nodeevents defines must be there under its current name; renaming one
// fails until the doc says the new name.
func TestNodeEventReasonsAreDocumented(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs", "remediation.md"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(r, "gcp-t4/internal/nodeevents/nodeevents.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok {
				t.Errorf("nodeevents.%s is not a string literal", name.Name)
				continue
			}
			reason, _ := strconv.Unquote(lit.Value)
			n++
			if !strings.Contains(string(doc), reason) {
				t.Errorf("docs/remediation.md does not name the Event reason %s (nodeevents.%s)", reason, name.Name)
			}
		}
		return true
	})
	if n < 5 {
		t.Fatalf("read %d reasons from nodeevents, want at least 5", n)
	}
}
