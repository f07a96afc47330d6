// Command gpu-init runs inside a podVM before the agent: it loads the NVIDIA
// driver, writes the CDI spec and prints the readiness line. It is the only
// binary of ours in the podVM image, so it links the standard library and
// the gpuinit package only (a test in cmd/ enforces that).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/gpuinit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := gpuinit.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	stop()
	os.Exit(code)
}
