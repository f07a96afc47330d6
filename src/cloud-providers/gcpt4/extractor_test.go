// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// extractorDefault reads a flag default as upstream's config-extractor
// does (src/cloud-providers/cmd/config-extractor/main.go at CAA v0.22.0,
// 38d0fcf7: exprToString, with constants from exprToLiteral): a literal as
// written, a package constant whose value is such a literal, a negated
// one, or a one-argument call (a conversion) of one; anything else, 3 *
// time.Minute for one, is "". An unresolved identifier comes out as its
// name.
func extractorDefault(e ast.Expr, consts map[string]string) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		return strings.Trim(e.Value, `"`)
	case *ast.Ident:
		if v, ok := consts[e.Name]; ok {
			return v
		}
		return e.Name
	case *ast.UnaryExpr:
		if e.Op == token.SUB {
			return "-" + extractorDefault(e.X, consts)
		}
	case *ast.CallExpr:
		if len(e.Args) == 1 {
			return extractorDefault(e.Args[0], consts)
		}
	}
	return ""
}

// extractorConst is the constant rule: only literals (possibly negated or
// converted) count.
func extractorConst(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		return strings.Trim(e.Value, `"`), true
	case *ast.UnaryExpr:
		if e.Op == token.SUB {
			v, ok := extractorConst(e.X)
			return "-" + v, ok
		}
	case *ast.CallExpr:
		if len(e.Args) == 1 {
			return extractorConst(e.Args[0])
		}
	}
	return "", false
}

// TestConfigExtractorReadsEveryDefault: upstream generates the chart's
// values and its docs from what config-extractor reads in manager.go, so
// every default it reads must be the one the provider uses.
func TestConfigExtractorReadsEveryDefault(t *testing.T) {
	fset := token.NewFileSet()
	// The extractor reads the constants of every file in the directory.
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	var manager *ast.File
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if name == "manager.go" {
			manager = f
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := extractorConst(vs.Values[i]); ok {
								consts[id.Name] = v
							}
						}
					}
				}
			}
			return true
		})
	}
	if manager == nil {
		t.Fatal("no manager.go")
	}
	read := map[string]string{} // env var -> default as extracted
	ast.Inspect(manager, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 5 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "WithEnv") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "reg" {
			return true
		}
		env, err := strconv.Unquote(call.Args[3].(*ast.BasicLit).Value)
		if err != nil {
			t.Fatal(err)
		}
		read[env] = extractorDefault(call.Args[2], consts)
		return true
	})
	keys := Keys()
	if len(read) != len(keys) {
		t.Fatalf("config-extractor reads %d reg.XxxWithEnv calls in manager.go, the provider registers %d keys", len(read), len(keys))
	}
	for _, k := range keys {
		got, ok := read[k.Env]
		if !ok {
			t.Errorf("%s: config-extractor does not see it (register it as reg.XxxWithEnv in manager.go)", k.Env)
			continue
		}
		same := got == k.Default
		if k.Kind == setting.KindDuration {
			d, err := time.ParseDuration(got)
			want, _ := time.ParseDuration(k.Default)
			same = err == nil && d == want
		}
		if !same {
			t.Errorf("%s: config-extractor reads the default %q, the provider uses %q: write it as a literal, a literal constant or a one-argument call of one", k.Env, got, k.Default)
		}
	}
}
