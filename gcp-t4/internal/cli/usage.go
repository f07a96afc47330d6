package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// Usage is a command's help in the one layout every command of ours
// prints:
//
//	usage: gcp-t4 CMD [flags] ARGS
//	       (another form, if any)
//
//	What the command does, one paragraph per About string.
//
//	flags:
//	  -x string
//	    	(flag.PrintDefaults)
//
// The first line names the command's whole path, so `gcp-t4 cache build
// -h` says it is cache build's help and not cache's.
type Usage struct {
	// Synopsis holds the forms that follow "usage: ", first one first.
	Synopsis []string
	// About says what the command does, one paragraph per string.
	About []string
	// More, if set, writes sections after the flags (each starting
	// with a blank line).
	More func(w io.Writer)
}

// Header writes the usage lines and the About paragraphs.
func (u Usage) Header(w io.Writer) {
	for i, s := range u.Synopsis {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintf(w, "%s%s\n", lead, s)
	}
	for _, p := range u.About {
		fmt.Fprintf(w, "\n%s\n", strings.Join(termout.Wrap(p, "", "", 100), "\n"))
	}
}

// Write writes the whole help for fs's flags to w.
func (u Usage) Write(w io.Writer, fs *flag.FlagSet) {
	u.Header(w)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	if u.More != nil {
		u.More(w)
	}
}

// NewFlagSet is a flag set for the command at path ("gcp-t4 cache
// build") whose -h is u; parse it with Parse.
func NewFlagSet(path string, u Usage) *flag.FlagSet {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.Usage = func() { u.Write(fs.Output(), fs) }
	return fs
}

// Parse parses args into fs, whose Usage writes the command's help to
// fs.Output() (NewFlagSet's and providerflags.Help's do). On -h the help
// goes to stdout and the command exits 0; on a flag error the error line,
// then the help, go to stderr and it exits 2. ok is false when the
// command must return code now.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return 0, false
	}
	return Misuse(fs, stderr, "%v (the flags it takes are below)", err), false
}

// NoArgs is Misuse for a command that takes no arguments but was given
// some.
func NoArgs(fs *flag.FlagSet, stderr io.Writer) (code int, ok bool) {
	if fs.NArg() == 0 {
		return 0, true
	}
	return Misuse(fs, stderr, "unexpected argument %q: it takes flags only (below)", fs.Arg(0)), false
}

// Misuse reports a usage error: "PATH: problem" on one line, which should
// name the fix, then the help, on stderr; it returns 2, the exit status
// of misuse.
func Misuse(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	out := fs.Output()
	fs.SetOutput(stderr)
	fs.Usage()
	fs.SetOutput(out)
	return 2
}

// Group is a command made of subcommands (gcp-t4 cache build, initdata,
// check): `PATH -h` lists them, `PATH SUB -h` is SUB's own help.
type Group struct {
	// Path is the group's command path, e.g. "gcp-t4 cache".
	Path     string
	About    []string
	Commands map[string]Command
}

// Run dispatches args[0] to its subcommand; none, or one not in the
// table, is misuse (exit 2).
func (g Group) Run(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "%s: no command given: name one of %s\n", g.Path, strings.Join(names(g.Commands), ", "))
		g.usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		g.usage(stdout)
		return 0
	}
	cmd, ok := g.Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q: name one of %s\n", g.Path, args[0], strings.Join(names(g.Commands), ", "))
		g.usage(stderr)
		return 2
	}
	return cmd.Run(ctx, args[1:], stdout, stderr, logger)
}

func (g Group) usage(w io.Writer) {
	Usage{Synopsis: []string{g.Path + " COMMAND [flags] [ARGS]"}, About: g.About}.Header(w)
	commandList(w, g.Commands, nil)
	fmt.Fprintf(w, "\n%s COMMAND -h describes each.\n", g.Path)
}

// commandList writes the "commands:" section; extra are more rows
// (version) after the table's.
func commandList(w io.Writer, cmds map[string]Command, extra [][2]string) {
	fmt.Fprint(w, "\ncommands:\n")
	for _, name := range names(cmds) {
		fmt.Fprintf(w, "  %-12s %s\n", name, cmds[name].Summary)
	}
	for _, e := range extra {
		fmt.Fprintf(w, "  %-12s %s\n", e[0], e[1])
	}
}

func names(cmds map[string]Command) []string {
	out := make([]string, 0, len(cmds))
	for name := range cmds {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ExitStatus is an error for an exit status whose reason is already
// printed (Parse, Misuse): a command that returns errors passes it up to
// its Main, which exits with it.
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
