// Command gcp-t4 is caa-gcp-t4's operator tool: the demo on the embedded
// GCE emulator, and the node and cluster tasks around the provider.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/caa-gcp-t4/gcp-t4/internal/gpuinit"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/preflight"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate"
)

// command is one subcommand. Each lives in its own package under internal/
// and gets its arguments after the command name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int
}

// commands is the subcommand table; add one line per subcommand.
var commands = map[string]command{
	"adaptor":   {"serve the kata remote-hypervisor protocol (ttrpc) on a unix socket in front of the gcp-t4 provider", runAdaptor},
	"gc":        {"list podVMs labelled as ours whose pod is gone; -delete removes them, -interval loops (sidecar)", gc.Main},
	"demo":      {"provision two single-T4 podVMs on the embedded GCE emulator, show them, delete them", runDemo},
	"preflight": {"check the project (quota, zones, NAT, firewall, image, permissions) and with -kubeconfig the cluster before deploying; -o json", preflight.Main},
	"plan":      {"show the podVM a pod, Deployment or RayService would get (profile, zones, insert request, $/h); `plan serve` sizes a model over T4s; no cloud account needed", plan.Main},
	"gpu-init":  {"inside a podVM: load the NVIDIA driver, write the CDI spec, print the readiness line", gpuinit.Main},
	"remediate": {"keep the kata-remote runtime handler in this GKE node's containerd config (sidecar; --once, --dry-run)", remediate.Main},
	"install":   {"install CAA with gcp-t4 (embedded kustomize overlays; detects GKE; server-side apply; --dry-run prints the YAML)", install.Main},
	"uninstall": {"remove exactly what `gcp-t4 install` created", install.MainUninstall},
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	if err := demo.Run(ctx, args, stdout, logger); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 demo: %v\n", err)
		return 1
	}
	return 0
}

func runAdaptor(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	if err := adaptor.Run(ctx, args, version, stdout, stderr, logger); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 adaptor: %v\n", err)
		return 1
	}
	return 0
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gcp-t4 <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].summary)
	}
	fmt.Fprintf(w, "  %-12s %s\n", "version", "print the version")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The provider logs through the default logger, as it does inside CAA.
	slog.SetDefault(logger)
	switch args[0] {
	case "version":
		fmt.Fprintln(stdout, version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gcp-t4: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr, logger)
}
