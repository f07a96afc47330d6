package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
)

// childArgsEnv makes the test binary run `gcp-t4 adaptor` with these
// (JSON) arguments instead of the tests: the crash scenario kills it.
const childArgsEnv = "GCP_T4_TEST_ADAPTOR_ARGS"

func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgsEnv); raw != "" {
		os.Exit(runChildAdaptor(raw))
	}
	os.Exit(m.Run())
}

// runChildAdaptor is the adaptor process: it serves until SIGTERM, as in
// the DaemonSet's container.
func runChildAdaptor(raw string) int {
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	if err := adaptor.Run(ctx, args, "child", os.Stdout, os.Stderr, logger); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
