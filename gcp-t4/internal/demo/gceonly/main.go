// Command gceonly serves the embedded GCE emulator seeded as the demo's
// project (demo.SeedProject), with no podVM, no adaptor and no API server
// of its own, until SIGTERM or Ctrl-C. It is test/node's GCE for the kata
// stage (docs/node-harness.md): a real cloud-api-adaptor on the harness's
// node creates its podVMs here. It prints one line, "GCE emulator: URL
// (project P)", once the endpoint answers.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: gceonly (no arguments; serves until SIGTERM)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fake := gcefake.New()
	defer fake.Close()
	if err := demo.SeedProject(fake); err != nil {
		fmt.Fprintf(os.Stderr, "gceonly: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("GCE emulator: %s (project %s)\n", fake.URL(), fake.Project())
	<-ctx.Done()
}
