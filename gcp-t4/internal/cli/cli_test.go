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
	out.Reset()
	if code := p.Run([]string{"version"}, &out, &errb); code != 0 || out.String() != "v1\n" {
		t.Fatalf("version: code %d, %q", code, out.String())
	}
	out.Reset()
	if code := p.Run([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "echo") {
		t.Fatalf("help: code %d, %q", code, out.String())
	}
}

// A command's -h starts with its line of the top-level help, on the
// stream the command's own help went to, whatever that help says.
func TestHelpStartsWithTheSummary(t *testing.T) {
	p := Program{Name: "prog", Commands: map[string]Command{
		"flags": {"lists flags on stderr", func(_ context.Context, args []string, _, stderr io.Writer, _ *slog.Logger) int {
			_, _ = io.WriteString(stderr, "usage: prog flags\n")
			return 0
		}},
		"text": {"prints its help on stdout", func(_ context.Context, args []string, stdout, _ io.Writer, _ *slog.Logger) int {
			_, _ = io.WriteString(stdout, "usage: prog text\n")
			return 0
		}},
	}}
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"flags", "-h"}, "", "prog flags: lists flags on stderr\n\nusage: prog flags\n"},
		{[]string{"flags", "-x", "1", "--help"}, "", "prog flags: lists flags on stderr\n\nusage: prog flags\n"},
		{[]string{"text", "-help"}, "prog text: prints its help on stdout\n\nusage: prog text\n", ""},
		// After "--", -h is an argument, not a help request.
		{[]string{"flags", "--", "-h"}, "", "usage: prog flags\n"},
	} {
		var out, errb bytes.Buffer
		if code := p.Run(tc.args, &out, &errb); code != 0 || out.String() != tc.stdout || errb.String() != tc.stderr {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q, %q", tc.args, code, out.String(), errb.String(), tc.stdout, tc.stderr)
		}
	}
}
