package main

import (
	"context"
	"io"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachestore"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli/clitest"
)

// TestHelpWalk: podvm-cache-store's usage is in the common layout, -h on
// stdout, misuse (-nope, a stray argument, both refused before it reads
// anything) on stderr with exit 2.
func TestHelpWalk(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int {
		return cachestore.Main(context.Background(), args, stdout, stderr)
	}
	clitest.Walk(t, "podvm-cache-store", run, nil, nil, nil)
}
