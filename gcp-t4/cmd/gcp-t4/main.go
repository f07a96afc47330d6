// Command gcp-t4 is caa-gcp-t4's operator tool: the demo on the embedded GCE
// emulator, install, plan, preflight, gc, status and cache, and the adaptor for testing
// without CAA. It runs on an operator's machine or in the CAA pod, never on
// a node's host namespaces (that is gcp-t4-node) or in a podVM (gpu-init).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
	"github.com/caa-gcp-t4/gcp-t4/internal/cachebuild"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/preflight"
	"github.com/caa-gcp-t4/gcp-t4/internal/status"
	"github.com/caa-gcp-t4/gcp-t4/internal/uninstall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(program().Run(os.Args[1:], os.Stdout, os.Stderr))
}

// about is the top-level help's paragraph.
var about = []string{"caa-gcp-t4's operator tool: plan and check a deployment, install CAA with the gcp-t4 provider, " +
	"see how podVMs started, collect orphans, build image caches; the demo needs no cloud account."}

func program() cli.Program {
	return cli.Program{Name: "gcp-t4", Version: version, About: about, Commands: map[string]cli.Command{
		"adaptor":   {Summary: "serve the kata remote-hypervisor protocol (ttrpc) on a unix socket in front of the gcp-t4 provider", Run: runAdaptor},
		"gc":        {Summary: "list this cluster's podVMs whose sandbox is gone (by CAA's PeerPods and their pods); -delete removes them, -interval loops", Run: gc.Main},
		"reaper":    {Summary: "the reaper Deployment's command: gc -delete every REAPER_INTERVAL, Prometheus metrics on :9103, Events", Run: gc.MainReaper},
		"demo":      {Summary: "provision two single-T4 podVMs on the embedded GCE emulator, show them, delete them", Run: runDemo},
		"emulator":  {Summary: "serve the demo's GCE project (and, with make controlplane's binaries, its cluster) on loopback until Ctrl-C, and print the preflight, status, gc, install and uninstall commands to try against it", Run: demo.MainEmulator},
		"preflight": {Summary: "check the project (quota, zones, NAT, firewall, image, permissions) and with -kubeconfig the cluster before deploying; -o json", Run: preflight.Main},
		"plan":      {Summary: "show the podVM a pod, Deployment or RayService would get (profile, zones, insert request, $/h); `plan serve` sizes a model over T4s; no cloud account needed", Run: plan.Main},
		"install":   {Summary: "install CAA with gcp-t4 (embedded kustomize overlays; detects GKE; server-side apply; --render prints the YAML, --dry-run has the API server check it)", Run: install.Main},
		"uninstall": {Summary: "remove exactly what `gcp-t4 install` created", Run: uninstall.Main},
		"cache":     {Summary: "cache build|initdata|check: a workload's images, pinned by digest, on a podVM cache disk; the pods' initdata for its mirror; which images it serves (docs/cache.md)", Run: cachebuild.Main},
		"status":    {Summary: "how each peer pod's podVM started, from its start-up Events: phases, times, zones out of stock, shape, $/h, cost so far; -o json", Run: status.Main},
	}}
}

// demoUsage is demo's help: it needs no flags (any are the adaptor's, and
// override the demo's emulator settings), so listing the provider's ~35
// flags would only hide that.
const demoUsage = `usage: gcp-t4 demo [adaptor flags]

Provisions the podVMs of two single-T4 pods on the embedded GCE emulator through the
kata remote-hypervisor protocol, prints them (machine type, accelerator, zone, internal
IP, no external IP), stops the sandboxes and shows that no instance is left. No cloud
account is needed. Flags, if any, are gcp-t4 adaptor's (gcp-t4 adaptor -h) and override
the demo's settings.
`

// runDemo ignores the JSON logger every command gets: the demo holds its
// log back and prints it in text form after its tables (demo.Run).
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, demoUsage)
			return 0
		}
	}
	if err := adaptor.CheckFlags(args); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 demo: %v: the demo takes only gcp-t4 adaptor's flags (gcp-t4 adaptor -h)\n", err)
		fmt.Fprint(stderr, demoUsage)
		return 2
	}
	if err := demo.Run(ctx, args, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 demo: %v\n", err)
		return 1
	}
	return 0
}

func runAdaptor(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	err := adaptor.Run(ctx, args, version, stdout, stderr, logger)
	var reported cli.ExitStatus
	if errors.As(err, &reported) {
		return int(reported)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 adaptor: %v\n", err)
		return 1
	}
	return 0
}
