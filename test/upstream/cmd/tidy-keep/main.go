// Command tidy-keep finishes a `go mod tidy -e` run on a network that does
// not serve every module. tidy -e drops what it could not load, so its go.mod
// and go.sum cannot be taken as they are; instead this applies to the
// original files only what adding a package to a tidy module can change:
// new requirements, raised versions, an indirect requirement becoming direct,
// and new go.sum lines. Nothing is removed. On a tidy upstream module the
// result is what a full `go mod tidy` gives.
//
//	tidy-keep -orig go.mod.orig -orig-sum go.sum.orig MODULE_DIR
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tidy-keep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	origMod := fs.String("orig", "", "go.mod before tidy -e")
	origSum := fs.String("orig-sum", "", "go.sum before tidy -e")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *origMod == "" || *origSum == "" || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: tidy-keep -orig go.mod.orig -orig-sum go.sum.orig MODULE_DIR")
		return 2
	}
	changes, err := keep(*origMod, *origSum, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "tidy-keep: %v\n", err)
		return 1
	}
	for _, c := range changes {
		fmt.Fprintf(stdout, "tidy-keep: %s\n", c)
	}
	return 0
}

func keep(origMod, origSum, dir string) ([]string, error) {
	modPath := filepath.Join(dir, "go.mod")
	base, err := parse(origMod)
	if err != nil {
		return nil, err
	}
	tidied, err := parse(modPath)
	if err != nil {
		return nil, err
	}
	orig := map[string]*modfile.Require{}
	for _, r := range base.Require {
		orig[r.Mod.Path] = r
	}
	var changes []string
	for _, r := range tidied.Require {
		o, ok := orig[r.Mod.Path]
		switch {
		case !ok:
			base.AddNewRequire(r.Mod.Path, r.Mod.Version, r.Indirect)
			changes = append(changes, "require "+r.Mod.String())
		case semver.Compare(r.Mod.Version, o.Mod.Version) > 0:
			if err := base.AddRequire(r.Mod.Path, r.Mod.Version); err != nil {
				return nil, err
			}
			changes = append(changes, "raise "+r.Mod.String())
		case o.Indirect && !r.Indirect:
			setDirect(o)
			changes = append(changes, "direct "+r.Mod.Path)
		}
	}
	base.SortBlocks()
	base.Cleanup()
	out, err := base.Format()
	if err != nil {
		return nil, fmt.Errorf("formatting %s: %w", modPath, err)
	}
	if err := writeAtomic(modPath, out); err != nil {
		return nil, err
	}
	if err := mergeSum(origSum, filepath.Join(dir, "go.sum")); err != nil {
		return nil, err
	}
	return changes, nil
}

// setDirect drops the "// indirect" comment, the only thing that marks it.
func setDirect(r *modfile.Require) {
	r.Indirect = false
	if r.Syntax == nil {
		return
	}
	var kept []modfile.Comment
	for _, c := range r.Syntax.Suffix {
		if strings.TrimSpace(strings.TrimPrefix(c.Token, "//")) != "indirect" {
			kept = append(kept, c)
		}
	}
	r.Syntax.Suffix = kept
}

func parse(path string) (*modfile.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return f, nil
}

// mergeSum writes the union of the original and the tidied go.sum.
func mergeSum(origSum, sumPath string) error {
	lines := map[string]bool{}
	for _, p := range []string{origSum, sumPath} {
		data, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" {
				lines[l] = true
			}
		}
	}
	all := make([]string, 0, len(lines))
	for l := range lines {
		all = append(all, l)
	}
	// go.sum's order: module path, then semantic version, the module's
	// own hash before its go.mod hash.
	sort.Slice(all, func(i, j int) bool {
		a, b := strings.Fields(all[i]), strings.Fields(all[j])
		if len(a) < 2 || len(b) < 2 {
			return all[i] < all[j]
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		va, vb := strings.TrimSuffix(a[1], "/go.mod"), strings.TrimSuffix(b[1], "/go.mod")
		if c := semver.Compare(va, vb); c != 0 {
			return c < 0
		}
		return all[i] < all[j]
	})
	var buf bytes.Buffer
	for _, l := range all {
		buf.WriteString(l + "\n")
	}
	return writeAtomic(sumPath, buf.Bytes())
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tidy-keep-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
