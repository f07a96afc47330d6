package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/clitest"
	"github.com/caa-gcp-t4/gcp-t4/internal/notice"
)

// TestHelpWalk: podvm-notice's usage is in the common layout, -h on stdout, misuse
// (-nope, a stray argument, both refused before it starts) on stderr with
// exit 2.
func TestHelpWalk(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int {
		return notice.Main(context.Background(), args, stdout, stderr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	clitest.Walk(t, "podvm-notice", run, nil, nil, nil)
}
