package install

import "embed"

// The kustomize tree, copied from the repository's install/ directory by
// `go generate` (go:embed cannot reach outside the module); the copy is
// tested to equal install/ byte for byte.
//
//go:generate go run ./gen -from ../../../install -to manifests
//go:embed all:manifests
var manifests embed.FS

// manifestsRoot is the embedded tree's top directory.
const manifestsRoot = "manifests"
