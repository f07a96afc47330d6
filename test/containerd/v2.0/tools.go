//go:build tools

// Package tools pins containerd 2.0, the release GKE 1.33 nodes run, for the
// real-containerd tests of `gcp-t4-node remediate`; its go.mod has exclude
// directives, so `go install pkg@version` refuses it and build.sh builds
// it from this module.
package tools

import _ "github.com/containerd/containerd/v2/cmd/containerd"
