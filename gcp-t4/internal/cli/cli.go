// Package cli is the subcommand dispatch shared by the binaries under cmd/:
// each binary owns its table, so it links only the packages of the commands
// that run where it runs.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Command is one subcommand. Run gets the arguments after the command name
// and returns the process exit status.
type Command struct {
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int
}

// Program is a binary's name, version and subcommand table.
type Program struct {
	Name     string
	Version  string
	Commands map[string]Command
}

func (p Program) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", p.Name)
	names := make([]string, 0, len(p.Commands))
	for name := range p.Commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-12s %s\n", name, p.Commands[name].Summary)
	}
	fmt.Fprintf(w, "  %-12s %s\n", "version", "print the version")
}

// Run dispatches args[0] to its command with a context cancelled by SIGINT
// or SIGTERM. Unknown or missing commands are usage errors (exit 2).
func (p Program) Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		p.usage(stderr)
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Fprintln(stdout, p.Version)
		return 0
	case "help", "-h", "--help":
		p.usage(stdout)
		return 0
	}
	cmd, ok := p.Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", p.Name, args[0])
		p.usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The provider logs through the default logger, as it does inside CAA.
	slog.SetDefault(logger)
	return cmd.Run(ctx, args[1:], stdout, stderr, logger)
}
