package main

import (
	"io"
	"slices"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/clitest"
)

// TestHelpWalk: gcp-t4-node and remediate have their usage in the common
// layout, -h on stdout, misuse on stderr with exit 2. remediate's -nope
// and stray argument fail in its flag parsing, before it touches the host.
func TestHelpWalk(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int { return program().Run(args, stdout, stderr) }
	walked := clitest.Walk(t, "gcp-t4-node", run, []string{"version"}, nil, nil)
	if !slices.Equal(walked, []string{"", "remediate"}) {
		t.Errorf("walked %q", walked)
	}
}
