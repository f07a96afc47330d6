// Command gcp-t4-node is the node sidecar: it runs on every peer-pod node
// with access to the host's containerd configuration and systemd, so it
// links only what that job needs (no GCE client, emulator or kustomize).
package main

import (
	"os"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(program().Run(os.Args[1:], os.Stdout, os.Stderr))
}

func program() cli.Program {
	return cli.Program{Name: "gcp-t4-node", Version: version, About: []string{"caa-gcp-t4's node sidecar: it runs on every peer-pods node with the host's containerd configuration and systemd."}, Commands: map[string]cli.Command{
		"remediate": {Summary: "keep kata-deploy's kata-remote runtime handler in this node's containerd config, every change checked with the node's containerd (sidecar; --once, --dry-run, --cleanup)", Run: remediate.Main},
	}}
}
