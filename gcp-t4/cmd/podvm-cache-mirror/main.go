// Command podvm-cache-mirror runs inside a podVM that has a cache disk: it
// serves the disk's OCI image layout, read-only, as the registry mirror
// image-rs pulls through (internal/cachemirror, docs/cache.md). Like
// gpu-init it links the standard library and its own package only (a test
// in cmd/ enforces it).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cachemirror.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	stop()
	os.Exit(code)
}
