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
