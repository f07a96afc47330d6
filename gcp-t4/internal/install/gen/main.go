// Command gen copies the canonical kustomize tree (the repository's
// install/ directory, what `kubectl apply -k` users apply) into the
// install package's manifests/ directory, which go:embed can reach: embed
// patterns cannot leave the module. TestEmbeddedMatchesInstallDir fails
// when the two differ.
//
//	go generate ./gcp-t4/internal/install
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// trees are the parts of install/ that are kustomizations.
var trees = []string{"base", "overlays", "components"}

func main() {
	from := flag.String("from", "../../../install", "the install/ directory")
	to := flag.String("to", "manifests", "the embedded copy")
	flag.Parse()
	if err := sync(*from, *to); err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(1)
	}
}

// sync builds the copy next to the destination and swaps it in, so an
// interrupted run leaves the old copy intact.
func sync(from, to string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(to)), ".manifests-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, tree := range trees {
		root := filepath.Join(from, tree)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(from, path)
			if err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") && path != root {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(tmp, rel), 0o755)
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s: not a regular file; install/ holds only manifests", path)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(tmp, rel), data, 0o644)
		})
		if err != nil {
			return fmt.Errorf("copy %s: %w (run from gcp-t4/internal/install, or pass -from)", root, err)
		}
	}
	old := to + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(to, old); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Rename(tmp, to); err != nil {
		return err
	}
	return os.RemoveAll(old)
}
