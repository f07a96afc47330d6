// Package apicheck compares the part of upstream CAA's provider API that the
// gcpt4 provider uses with the same declarations in another tree (our fork,
// or an upstream checkout), from source alone: no type checking, so it needs
// none of either tree's dependencies.
//
// A declaration's signature is normalised so that only what a caller can
// observe counts: parameter names are dropped, an interface is its sorted
// method names plus one entry per method, a struct is one entry per field.
package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Decl is one exported declaration, keyed like "provider.Instance.IPs" or
// "provider.(*FlagRegistrar).StringWithEnv".
type Decl struct {
	Key string
	Sig string
	// refs are the keys of package-level declarations the signature names,
	// so that a used function pulls in the types of its parameters.
	refs []string
}

// API is the exported surface of a module's packages, by key.
type API map[string]Decl

// Extract reads the exported declarations of every package under root
// (a module root whose go.mod names modulePath), skipping the directories
// for which skip returns true (relative, slash-separated paths).
func Extract(root string, skip func(rel string) bool) (API, error) {
	modPath, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	pkgs, err := parseTree(root, skip)
	if err != nil {
		return nil, err
	}
	names, pkgNames := prefixes(modPath, pkgs)
	api := API{}
	for rel, p := range pkgs {
		for _, f := range p.files {
			extractFile(api, names[joinImport(modPath, rel)], f, importNames(f, names, pkgNames))
		}
	}
	return api, nil
}

// prefixes names each package in keys: the module root by its package name
// ("provider"), the others by their directory ("util/cloudinit"), which,
// unlike package names, cannot collide.
func prefixes(modPath string, pkgs map[string]*pkg) (names, pkgNames map[string]string) {
	names = make(map[string]string, len(pkgs))    // import path -> key prefix
	pkgNames = make(map[string]string, len(pkgs)) // import path -> package name
	for rel, p := range pkgs {
		pkgNames[joinImport(modPath, rel)] = p.name
		if rel == "." {
			names[modPath] = p.name
		} else {
			names[joinImport(modPath, rel)] = rel
		}
	}
	return names, pkgNames
}

type pkg struct {
	name  string
	files []*ast.File
}

func joinImport(modPath, rel string) string {
	if rel == "." {
		return modPath
	}
	return modPath + "/" + rel
}

func modulePath(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("reading the module of %s: %w (point at the src/cloud-providers directory of the tree)", root, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", root)
}

// parseTree parses the non-test Go files of each package directory.
func parseTree(root string, skip func(rel string) bool) (map[string]*pkg, error) {
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (skip != nil && skip(rel) || base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", p, err)
		}
		dir := path.Dir(rel)
		if pkgs[dir] == nil {
			pkgs[dir] = &pkg{name: f.Name.Name}
		}
		if pkgs[dir].name != f.Name.Name {
			return nil // a package main or an ignored file beside the package
		}
		pkgs[dir].files = append(pkgs[dir].files, f)
		return nil
	})
	return pkgs, err
}

// importNames maps the local name of each import of f that is one of the
// module's packages to that package's key prefix.
func importNames(f *ast.File, names map[string]string, pkgNames map[string]string) map[string]string {
	out := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		prefix, ok := names[p]
		if !ok {
			continue
		}
		local := pkgNames[p]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		out[local] = prefix
	}
	return out
}

func extractFile(api API, pkgName string, f *ast.File, imports map[string]string) {
	add := func(key, sig string, exprs ...ast.Expr) {
		api[key] = Decl{Key: key, Sig: sig, refs: refsOf(pkgName, imports, exprs...)}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				add(pkgName+"."+d.Name.Name, funcSig(d.Type), d.Type)
				continue
			}
			recv := types.ExprString(d.Recv.List[0].Type)
			if !ast.IsExported(strings.TrimPrefix(recv, "*")) {
				continue
			}
			add(pkgName+".("+recv+")."+d.Name.Name, funcSig(d.Type), d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						typeDecl(pkgName, s, add)
					}
				case *ast.ValueSpec:
					for i, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						sig := strings.ToLower(d.Tok.String())
						if s.Type != nil {
							sig += " " + types.ExprString(s.Type)
						}
						// A constant's value is part of what callers see.
						if d.Tok == token.CONST && i < len(s.Values) {
							sig += " = " + types.ExprString(s.Values[i])
						}
						add(pkgName+"."+n.Name, sig, s.Type)
					}
				}
			}
		}
	}
}

func typeDecl(pkgName string, s *ast.TypeSpec, add func(key, sig string, exprs ...ast.Expr)) {
	key := pkgName + "." + s.Name.Name
	switch t := s.Type.(type) {
	case *ast.StructType:
		add(key, "struct")
		for _, f := range t.Fields.List {
			for _, n := range fieldNames(f) {
				if ast.IsExported(n) {
					add(key+"."+n, types.ExprString(f.Type), f.Type)
				}
			}
		}
	case *ast.InterfaceType:
		var methods []string
		for _, m := range t.Methods.List {
			ft, ok := m.Type.(*ast.FuncType)
			if !ok {
				// An embedded interface: its name stands for its methods.
				methods = append(methods, types.ExprString(m.Type))
				continue
			}
			for _, n := range m.Names {
				methods = append(methods, n.Name)
				add(key+"."+n.Name, funcSig(ft), ft)
			}
		}
		sort.Strings(methods)
		add(key, "interface{"+strings.Join(methods, "; ")+"}")
	default:
		sig := types.ExprString(s.Type)
		if s.Assign.IsValid() {
			sig = "= " + sig
		}
		add(key, sig, s.Type)
	}
}

func fieldNames(f *ast.Field) []string {
	if len(f.Names) == 0 {
		// An embedded field is named after its type.
		name := types.ExprString(f.Type)
		name = strings.TrimPrefix(name, "*")
		if i := strings.LastIndex(name, "."); i >= 0 {
			name = name[i+1:]
		}
		return []string{name}
	}
	out := make([]string, len(f.Names))
	for i, n := range f.Names {
		out[i] = n.Name
	}
	return out
}

// funcSig renders a function type without parameter names.
func funcSig(t *ast.FuncType) string {
	sig := "func(" + strings.Join(fieldTypes(t.Params), ", ") + ")"
	res := fieldTypes(t.Results)
	switch {
	case len(res) == 1:
		sig += " " + res[0]
	case len(res) > 1:
		sig += " (" + strings.Join(res, ", ") + ")"
	}
	return sig
}

func fieldTypes(l *ast.FieldList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, f := range l.List {
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for range n {
			out = append(out, types.ExprString(f.Type))
		}
	}
	return out
}

// refsOf lists the module's package-level names the expressions mention:
// bare exported identifiers (same package) and pkg.Name selectors on the
// module's own packages.
func refsOf(pkgName string, imports map[string]string, exprs ...ast.Expr) []string {
	var out []string
	for _, e := range exprs {
		if e == nil {
			continue
		}
		ast.Inspect(e, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok {
					if p, ok := imports[x.Name]; ok {
						out = append(out, p+"."+n.Sel.Name)
					}
					return false
				}
			case *ast.Ident:
				if n.IsExported() {
					out = append(out, pkgName+"."+n.Name)
				}
			}
			return true
		})
	}
	return out
}

// Uses is what a provider package uses of the module: qualified names it
// refers to (package.Name) and every selector name it writes (x.Name), the
// latter standing in for method calls, which need types to resolve.
type Uses struct {
	Qualified map[string]bool
	Selectors map[string]bool
}

// ScanUses reads every Go file (tests too: they build in upstream's tree as
// well) under dir, a provider package of the module at root.
func ScanUses(root, dir string) (Uses, error) {
	u := Uses{Qualified: map[string]bool{}, Selectors: map[string]bool{}}
	modPath, err := modulePath(root)
	if err != nil {
		return u, err
	}
	pkgs, err := parseTree(root, func(rel string) bool { return false })
	if err != nil {
		return u, err
	}
	names, pkgNames := prefixes(modPath, pkgs)
	fset := token.NewFileSet()
	n := 0
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", p, err)
		}
		n++
		imports := importNames(f, names, pkgNames)
		ast.Inspect(f, func(node ast.Node) bool {
			if s, ok := node.(*ast.SelectorExpr); ok {
				u.Selectors[s.Sel.Name] = true
				if x, ok := s.X.(*ast.Ident); ok {
					if p, ok := imports[x.Name]; ok {
						u.Qualified[p+"."+s.Sel.Name] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("no Go files under %s", dir)
	}
	return u, err
}

// Used returns the keys of the declarations in api that the provider
// relies on: what it names, the types those signatures name, every field
// and interface method of a used type, and the methods of used types whose
// names it selects.
func (api API) Used(u Uses) []string {
	seen := map[string]bool{}
	var queue []string
	push := func(k string) {
		if _, ok := api[k]; ok && !seen[k] {
			seen[k] = true
			queue = append(queue, k)
		}
	}
	for k := range u.Qualified {
		push(k)
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		for _, r := range api[k].refs {
			push(r)
		}
		pkgName, typeName, ok := strings.Cut(k, ".")
		if !ok || strings.Contains(typeName, ".") {
			continue
		}
		for other := range api {
			rest, ok := strings.CutPrefix(other, k+".")
			if ok && !strings.Contains(rest, ".") {
				push(other) // field or interface method
			}
			for _, recv := range []string{"(" + typeName + ").", "(*" + typeName + ")."} {
				if m, ok := strings.CutPrefix(other, pkgName+"."+recv); ok && u.Selectors[m] {
					push(other)
				}
			}
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Difference is one way in which got differs from want.
type Difference struct {
	Key       string
	Want, Got string // Got is empty when the declaration is missing
}

func (d Difference) String() string {
	if d.Got == "" {
		return fmt.Sprintf("missing  %s\n    want %s", d.Key, d.Want)
	}
	return fmt.Sprintf("changed  %s\n    want %s\n    got  %s", d.Key, d.Want, d.Got)
}

// Compare checks the keys of want in got. Additions lists struct fields got
// has on a compared struct that want lacks: they break nothing, but the fork
// should mirror them.
func Compare(keys []string, want, got API) (diffs []Difference, additions []string) {
	compared := map[string]bool{}
	for _, k := range keys {
		compared[k] = true
		w := want[k]
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, Difference{Key: k, Want: w.Sig})
		case g.Sig != w.Sig:
			diffs = append(diffs, Difference{Key: k, Want: w.Sig, Got: g.Sig})
		}
	}
	for k := range got {
		parent := k[:strings.LastIndex(k, ".")]
		if compared[parent] && want[parent].Sig == "struct" && !compared[k] {
			if _, inWant := want[k]; !inWant {
				additions = append(additions, k+" "+got[k].Sig)
			}
		}
	}
	sort.Strings(additions)
	return diffs, additions
}
