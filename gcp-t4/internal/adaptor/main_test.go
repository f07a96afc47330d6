package adaptor

import (
	"log/slog"
	"os"
	"testing"
)

// TestMain keeps the provider's per-VM info logs (it logs through the
// default logger, as inside CAA) out of test and benchmark output.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}
