// Command modelcar is the process of a model image made by `gcp-t4 cache
// model`: it runs in the pod, beside the serving container, and links the
// image's model directory for it (internal/modelcar). Like the podVM's
// binaries it links the standard library and its own package only (a test
// in cmd/ enforces it): it runs in every tenant pod that uses it.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/modelcar"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := modelcar.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	stop()
	os.Exit(code)
}
