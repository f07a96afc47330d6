package node

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane"
)

// StartForTest starts a control plane with ControlPlaneFlags and a node
// registered to it, both removed in t.Cleanup and, on SIGINT or SIGTERM
// (Ctrl-C on `make node-e2e`), before the test binary exits. It skips with
// the reason under `go test -short` and when not root (kubelet and
// containerd mount, make cgroups and network namespaces); otherwise a
// missing binary fails the test with the command that builds it.
func StartForTest(t *testing.T, opts Options) (*controlplane.ControlPlane, *Node) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiserver, etcd, containerd and a kubelet; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("kubelet and containerd need root (mounts, cgroups, network namespaces); run as root: " + MakeCommand)
	}
	bin, err := BinariesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Containerd != "" {
		if bin, err = bin.WithContainerd(opts.Containerd); err != nil {
			t.Fatal(err)
		}
	}
	cpBin, err := controlplane.BinariesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	// Ctrl-C: the daemons are in their own process groups and do not see
	// it; this cancels a start under way (which then removes what it made),
	// tears the rest down, and exits as the signal would have. Set before
	// the control plane starts, so no window lets the signal kill the test
	// with its daemons' mounts and directories left behind.
	ctx, cancel := context.WithCancel(t.Context())
	// The test's TempDir root (the image binary is built there): testing
	// removes it in its clean-up, which os.Exit below skips.
	tempRoot := filepath.Dir(t.TempDir())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var cpStarted atomic.Pointer[controlplane.ControlPlane]
	var started atomic.Pointer[Node]
	startDone, stopped, interrupted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			close(interrupted)
			cancel()
			<-startDone
			if n := started.Load(); n != nil {
				_ = n.Stop()
			}
			if cp := cpStarted.Load(); cp != nil {
				_ = cp.Stop()
			}
			_ = os.RemoveAll(tempRoot)
			os.Stderr.WriteString("node harness: interrupted (" + s.String() + "); node and control plane removed\n")
			os.Exit(130)
		case <-stopped:
		}
	}()
	// A test the teardown below makes fail (its API server gone) ends,
	// and its clean-ups run, while the handler still removes things; the
	// process must not exit before the handler does, so each clean-up
	// here waits for it instead of running.
	waitIfInterrupted := func() {
		select {
		case <-interrupted:
			select {} // the handler exits the process
		default:
		}
	}
	t.Cleanup(func() {
		waitIfInterrupted()
		signal.Stop(sig)
		close(stopped)
		cancel()
	})
	cp, err := controlplane.Start(ctx, cpBin, controlplane.Options{ExtraAPIServerFlags: ControlPlaneFlags})
	if err != nil {
		close(startDone)
		t.Fatalf("start control plane: %v", err)
	}
	cpStarted.Store(cp)
	t.Cleanup(func() {
		waitIfInterrupted()
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	n, err := Start(ctx, bin, cp, opts)
	if err == nil {
		started.Store(n)
	}
	close(startDone)
	if err != nil {
		t.Fatalf("start node: %v\ncontrol plane logs:\n%s", err, cp.LogTail(2000))
	}
	t.Cleanup(func() {
		waitIfInterrupted()
		if t.Failed() {
			t.Logf("kubelet log ends:\n%s\ncontainerd log ends:\n%s", n.LogTail("kubelet", 4000), n.LogTail("containerd", 3000))
		}
		if err := n.Stop(); err != nil {
			t.Errorf("stop node: %v", err)
		}
	})
	return cp, n
}
