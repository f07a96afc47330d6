// Package cli is the subcommand dispatch shared by the binaries under cmd/:
// each binary owns its table, so it links only the packages of the commands
// that run where it runs.
package cli

import (
	"bytes"
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
	if !helpRequested(args[1:]) {
		return cmd.Run(ctx, args[1:], stdout, stderr, logger)
	}
	// A command's -h lists its flags; some say no more. The line the
	// top-level help gives it comes first, on the stream the command's
	// help went to, so every `CMD -h` says what CMD does.
	var out, errb bytes.Buffer
	code := cmd.Run(ctx, args[1:], &out, &errb, logger)
	w := stdout
	if out.Len() == 0 {
		w = stderr
	}
	fmt.Fprintf(w, "%s %s: %s\n\n", p.Name, args[0], cmd.Summary)
	_, _ = stdout.Write(out.Bytes())
	_, _ = stderr.Write(errb.Bytes())
	return code
}

// helpRequested: args ask for help as Go's flag package reads them, -h,
// -help or --help before a lone "--".
func helpRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}
