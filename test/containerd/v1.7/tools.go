//go:build tools

// Package tools pins containerd 1.7 for the real-containerd tests of
// `gcp-t4-node remediate` and the node harness (test/node); build.sh
// builds its daemon, and for the harness ctr and the runc shim, from this
// module.
package tools

import (
	_ "github.com/containerd/containerd/cmd/containerd"
	_ "github.com/containerd/containerd/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/cmd/ctr"
)
