// Command podvm-cache-store runs inside a podVM that has a cache disk,
// before confidential-data-hub: it hands the disk's pre-unpacked image
// store to image-rs when, and only when, the store passes every check
// (internal/cachestore, docs/cache.md). Like the podVM's other binaries it
// links the standard library and its own packages only (a test in cmd/
// enforces it).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachestore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cachestore.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
