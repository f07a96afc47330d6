// Package install is the kustomize tree that `kubectl apply -k
// install/overlays/...` applies, as a Go module so that `gcp-t4 install`
// embeds the same files rather than a copy.
//
// A go:embed pattern cannot reach outside the module of its file,
// and the gcp-t4 module lives in gcp-t4/. Of the ways to give it one
// definition of the YAML, this one keeps install/ where kustomize users
// and the docs expect it: the tree stays plain kustomize (kustomize reads
// only the files a kustomization names, so go.mod and this file are
// invisible to `kustomize build`), and gcp-t4/go.mod requires this module
// with a local replace, so a build with or without go.work embeds the
// files in this directory. Moving the YAML into gcp-t4/ would move the
// paths users apply; a generated copy (what this replaced) can drift.
package install

import (
	"embed"
	"io/fs"
)

// The directories `gcp-t4 install` renders from: every kustomization
// under base, overlays and components, so a new component is embedded
// without a change here. examples/ (workloads, applied by the user) and
// helm/ (values for upstream's chart) are not part of the install and
// stay out of the binary. Patterns without `all:` leave out names
// starting with "." or "_" (editor and OS droppings), which no
// kustomization here names.
//
//go:embed base overlays components
var tree embed.FS

// Tree returns the kustomize tree, read-only, rooted at this directory:
// paths are "base/kustomization.yaml", "components/reaper/...". The
// embed.FS stays unexported so no importer can swap it for another tree.
func Tree() fs.FS {
	return tree
}
