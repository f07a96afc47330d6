package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/clitest"
	"github.com/caa-gcp-t4/gcp-t4/internal/gpuinit"
)

// TestHelpWalk: gpu-init's usage is in the common layout, -h on stdout, misuse
// (-nope, a stray argument, both refused before it starts) on stderr with
// exit 2.
func TestHelpWalk(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int {
		return gpuinit.Main(context.Background(), args, stdout, stderr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	clitest.Walk(t, "gpu-init", run, nil, nil, nil)
}
