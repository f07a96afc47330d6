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
	Name    string
	Version string
	// About says what the binary is for, one paragraph per string, under
	// its usage line.
	About    []string
	Commands map[string]Command
}

func (p Program) usage(w io.Writer) {
	Usage{Synopsis: []string{p.Name + " COMMAND [flags] [ARGS]"}, About: p.About}.Header(w)
	commandList(w, p.Commands, [][2]string{{"version", "print the version (also --version)"}})
	fmt.Fprintf(w, "\n%s COMMAND -h describes each.\n", p.Name)
}

// Run dispatches args[0] to its command with a context cancelled by SIGINT
// or SIGTERM. Unknown or missing commands are usage errors (exit 2). A
// command's -h goes to the command itself: each prints its own usage
// (Usage, Parse), on stdout.
func (p Program) Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "%s: no command given: name one (%s COMMAND -h describes each)\n", p.Name, p.Name)
		p.usage(stderr)
		return 2
	}
	switch args[0] {
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, p.Version)
		return 0
	case "help", "-h", "-help", "--help":
		p.usage(stdout)
		return 0
	}
	cmd, ok := p.Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q: name one of those below\n", p.Name, args[0])
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
