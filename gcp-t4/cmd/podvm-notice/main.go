// Command podvm-notice runs inside a podVM: it follows GCE's preemption and
// host maintenance notices on the VM's metadata server and serves them to
// the pod's containers (internal/notice). Like gpu-init it links the
// standard library and its own package only (a test in cmd/ enforces it).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/notice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := notice.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	stop()
	os.Exit(code)
}
