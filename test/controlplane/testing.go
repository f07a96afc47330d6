package controlplane

import (
	"context"
	"errors"
	"testing"
)

// StartForTest starts a control plane for t and stops it in t.Cleanup.
// With `go test -short` the test is skipped; otherwise missing binaries fail
// the test with the command that builds them (never a silent skip).
func StartForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd; skipped with -short")
	}
	bin, err := BinariesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cp, err := Start(ctx, bin, opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.LogTail(3000))
		}
		if err := cp.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
}
