// Command gcp-t4 is caa-gcp-t4's operator tool: it runs the demo on the
// embedded GCE emulator and, as the project grows, remediates containerd,
// installs, checks and cleans up.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
)

const usage = `usage: gcp-t4 <command> [flags]

commands:
  demo     provision two single-T4 podVMs on the embedded GCE emulator,
           print them, delete them and show nothing is left
  version  print the version
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The provider logs through the default logger, as it does inside CAA.
	slog.SetDefault(logger)
	switch args[0] {
	case "demo":
		if err := demo.Run(ctx, args[1:], stdout, logger); err != nil {
			fmt.Fprintf(stderr, "gcp-t4 demo: %v\n", err)
			return 1
		}
		return 0
	case "version":
		fmt.Fprintln(stdout, version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "gcp-t4: unknown command %q\n%s", args[0], usage)
	return 2
}
