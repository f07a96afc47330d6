package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	var got []string
	p := Program{Name: "prog", Version: "v1", Commands: map[string]Command{
		"echo": {"records its arguments", func(_ context.Context, args []string, _, _ io.Writer, _ *slog.Logger) int {
			got = args
			return 7
		}},
	}}
	var out, errb bytes.Buffer
	if code := p.Run([]string{"echo", "a", "b"}, &out, &errb); code != 7 || strings.Join(got, " ") != "a b" {
		t.Fatalf("echo: code %d, args %q", code, got)
	}
	if code := p.Run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `prog: unknown command "frobnicate"`) {
		t.Fatalf("unknown: code %d, stderr %q", code, errb.String())
	}
	if code := p.Run(nil, &out, &errb); code != 2 {
		t.Fatalf("no command: code %d", code)
	}
	for _, v := range []string{"version", "--version", "-version"} {
		out.Reset()
		if code := p.Run([]string{v}, &out, &errb); code != 0 || out.String() != "v1\n" {
			t.Fatalf("%s: code %d, %q", v, code, out.String())
		}
	}
	out.Reset()
	if code := p.Run([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "echo") {
		t.Fatalf("help: code %d, %q", code, out.String())
	}
}

// Parse, NoArgs and Misuse: -h is the usage alone on stdout (exit 0); a
// flag error or a stray argument is one line naming it, then the usage,
// on stderr (exit 2); after "--", -h is an argument.
func TestParse(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int {
		fs := NewFlagSet("prog cmd", Usage{Synopsis: []string{"prog cmd [-n N]"}, About: []string{"Does the thing."}})
		fs.Int("n", 1, "how many")
		if code, ok := Parse(fs, args, stdout, stderr); !ok {
			return code
		}
		if code, ok := NoArgs(fs, stderr); !ok {
			return code
		}
		return 0
	}
	const usage = "usage: prog cmd [-n N]\n\nDoes the thing.\n\nflags:\n  -n int\n    \thow many (default 1)\n"
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"-h"}, 0, usage, ""},
		{[]string{"-n", "2", "--help"}, 0, usage, ""},
		{[]string{"-nope"}, 2, "", "prog cmd: flag provided but not defined: -nope (the flags it takes are below)\n" + usage},
		{[]string{"stray"}, 2, "", "prog cmd: unexpected argument \"stray\": it takes flags only (below)\n" + usage},
		{[]string{"--", "-h"}, 2, "", "prog cmd: unexpected argument \"-h\": it takes flags only (below)\n" + usage},
		{[]string{"-n", "3"}, 0, "", ""},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code || out.String() != tc.stdout || errb.String() != tc.stderr {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}

// A Group's -h lists its commands; none or an unknown one is misuse.
func TestGroup(t *testing.T) {
	g := Group{Path: "prog grp", About: []string{"Groups things."}, Commands: map[string]Command{
		"sub": {"does sub", func(_ context.Context, args []string, stdout, _ io.Writer, _ *slog.Logger) int {
			_, _ = io.WriteString(stdout, strings.Join(args, " "))
			return 3
		}},
	}}
	var out, errb bytes.Buffer
	if code := g.Run(context.Background(), []string{"-h"}, &out, &errb, nil); code != 0 || errb.Len() != 0 || !strings.HasPrefix(out.String(), "usage: prog grp COMMAND") || !strings.Contains(out.String(), "\ncommands:\n  sub          does sub\n") {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := g.Run(context.Background(), []string{"sub", "a"}, &out, &errb, nil); code != 3 || out.String() != "a" {
		t.Errorf("sub a: exit %d, stdout %q", code, out.String())
	}
	for _, args := range [][]string{nil, {"nope"}} {
		out.Reset()
		errb.Reset()
		if code := g.Run(context.Background(), args, &out, &errb, nil); code != 2 || out.Len() != 0 || !strings.HasPrefix(errb.String(), "prog grp: ") || !strings.Contains(errb.String(), "name one of sub\nusage: prog grp COMMAND") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
}
