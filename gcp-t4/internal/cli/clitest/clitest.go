// Package clitest walks a binary's commands the way a new user does:
// every command and subcommand's -h, a flag that does not exist, and a
// stray argument, each checked against the one layout internal/cli gives
// every command.
package clitest

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// Runner runs one command line of the binary and returns its exit status.
type Runner func(args []string, stdout, stderr io.Writer) int

// Walk checks, for the binary prog and every command under it that the
// "commands:" sections of the helps list (except skip's, which are no
// commands, like version):
//   - -h and --help exit 0 with the usage on stdout, nothing on stderr,
//     its first line "usage: PROG PATH …" naming that exact command, then
//     a paragraph saying what it does;
//   - -nope exits 2 with nothing on stdout and, on stderr, one line
//     "PROG PATH: …" naming -nope, then the same usage;
//   - an argument "stray" does the same, for commands not in takesArgs.
//
// helpOnly names commands whose -nope or stray argument would run them
// (a demo that starts its emulator before reading its flags); for them
// only -h is walked. It returns every command path walked.
func Walk(t *testing.T, prog string, run Runner, skip, takesArgs, helpOnly []string) []string {
	t.Helper()
	var walked []string
	var walk func(path []string)
	walk = func(path []string) {
		name := strings.Join(append([]string{prog}, path...), " ")
		walked = append(walked, strings.Join(path, " "))
		var subs []string
		for _, h := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			code := run(append(append([]string{}, path...), h), &out, &errb)
			help := out.String()
			if code != 0 || errb.Len() != 0 {
				t.Errorf("%s %s: exit %d, stderr %q; want 0 and the usage on stdout alone", name, h, code, errb.String())
			}
			if first, _, _ := strings.Cut(help, "\n"); !strings.HasPrefix(first+" ", "usage: "+name+" ") {
				t.Errorf("%s %s: first line %q; want \"usage: %s …\"", name, h, first, name)
			}
			if about := About(help); about == "" {
				t.Errorf("%s %s: no paragraph says what it does after the usage lines:\n%s", name, h, help)
			}
			subs = Commands(help)
		}
		key := strings.Join(path, " ")
		if !contains(helpOnly, key) {
			misuse(t, run, name, path, "-nope", "-nope")
			if !contains(takesArgs, key) {
				misuse(t, run, name, path, "stray", `"stray"`)
			}
		}
		for _, s := range subs {
			if !contains(skip, s) {
				walk(append(append([]string{}, path...), s))
			}
		}
	}
	walk(nil)
	return walked
}

// misuse checks that PATH ARG is a usage error: exit 2, stdout empty, a
// first line on stderr naming the command and want, the usage after it.
func misuse(t *testing.T, run Runner, name string, path []string, arg, want string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append(append([]string{}, path...), arg), &out, &errb)
	first, rest, _ := strings.Cut(errb.String(), "\n")
	usage, _, _ := strings.Cut(rest, "\n")
	if code != 2 || out.Len() != 0 || !strings.HasPrefix(first, name+": ") || !strings.Contains(first, want) || !strings.HasPrefix(usage+" ", "usage: "+name+" ") {
		t.Errorf("%s %s: exit %d, stdout %q, stderr:\n%s\nwant exit 2, a line \"%s: …%s…\", then the usage, on stderr alone", name, arg, code, out.String(), errb.String(), name, want)
	}
}

// About is the first paragraph after a help's usage lines, "" when there
// is none or it is a section heading (flags:, commands:).
func About(help string) string {
	_, rest, ok := strings.Cut(help, "\n\n")
	if !ok {
		return ""
	}
	para, _, _ := strings.Cut(rest, "\n\n")
	if first, _, _ := strings.Cut(para, "\n"); first == "flags:" || first == "commands:" {
		return ""
	}
	return para
}

// Commands are the names a help lists under "commands:".
func Commands(help string) []string {
	_, rest, ok := strings.Cut(help, "\ncommands:\n")
	if !ok {
		return nil
	}
	var names []string
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		if f := strings.Fields(l); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
