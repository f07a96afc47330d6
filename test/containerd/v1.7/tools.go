//go:build tools

// Package tools pins containerd 1.7 for the real-containerd tests of
// `gcp-t4-node remediate`; build.sh builds its daemon from this module.
package tools

import _ "github.com/containerd/containerd/cmd/containerd"
