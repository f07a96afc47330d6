//go:build linux

package remediate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
)

// The sidecar can be stopped at any point: a pod restart, a node drain, an
// OOM kill. These tests stop it at each step that leaves something on disk
// and start a new one (a new Remediator over the same host files; nothing
// in memory carries over), against the real containerd releases.

// stopAt runs one pass of r and stops it right after step, as a kill of
// the sidecar there would: nothing after the step runs, and deferred
// releases (the host lock's flock, which a dying process's closed file
// releases too) do.
func stopAt(t *testing.T, r *Remediator, step string) {
	t.Helper()
	var seen []string
	r.step = func(name string) {
		seen = append(seen, name)
		if name == step {
			runtime.Goexit()
		}
	}
	done := make(chan bool)
	go func() {
		returned := false
		defer func() { done <- returned }()
		r.Reconcile(context.Background())
		returned = true
	}()
	if <-done {
		t.Fatalf("the pass never reached %q (steps: %q)", step, seen)
	}
}

// assertAsBefore checks the node is back as GKE left it: containerd runs,
// without the handler, on byte-identical files, and nothing is pending.
func assertAsBefore(t *testing.T, n *node, r *Remediator, orig []byte) {
	t.Helper()
	if _, err := n.StartedAt(context.Background()); err != nil {
		t.Fatalf("containerd is not running: %v", err)
	}
	if got := read(t, n.target.Config); got != string(orig) {
		t.Fatalf("config.toml not put back byte for byte:\n%s", got)
	}
	if _, err := os.Stat(n.target.DropIn()); err == nil {
		t.Fatal("the sidecar's drop-in is still there")
	}
	cfg, err := ParseStatusConfig(n.status())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Containerd.Runtimes["runc"]; !ok {
		t.Fatal("containerd is not back as it was (no runc)")
	}
	if _, ok := cfg.Containerd.Runtimes["kata-remote"]; ok {
		t.Fatal("containerd runs the rolled-back handler")
	}
	st, err := r.state.Load()
	if err != nil || st.Pending != nil {
		t.Fatalf("state %+v (%v): want nothing pending", st, err)
	}
}

func (n *node) failNextRestart() {
	n.mu.Lock()
	n.failNext = true
	n.mu.Unlock()
}

// TestRollbackAcrossSidecarRestart: the first process writes the change
// and waits out --settle; the pod restarts; the second process restarts
// containerd, which does not come back. The change is rolled back from the
// state on the host, which the second process never wrote.
func TestRollbackAcrossSidecarRestart(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			orig := n.gkeWrite("gke-v2.toml")
			n.start()
			cfg := n.config()
			cfg.Settle = time.Hour
			cfg.VerifyTimeout = 20 * time.Second
			first := n.remediatorWith(cfg, Deps{})
			res, err := first.Reconcile(context.Background())
			if err != nil || len(res.Wrote) == 0 || res.RetryIn <= 0 || n.restartCount() != 0 {
				t.Fatalf("first process: %+v %v, want the change written and the restart waiting for --settle", res, err)
			}
			cfg.Settle = 0
			second := n.remediatorWith(cfg, Deps{})
			n.failNextRestart()
			res, err = second.Reconcile(context.Background())
			if err == nil || !res.RolledBack {
				t.Fatalf("second process: %+v %v, want a rollback from the state", res, err)
			}
			if n.restartCount() != 2 {
				t.Fatalf("%d restarts, want the failed one and one after the rollback", n.restartCount())
			}
			assertAsBefore(t, n, second, orig)
			// The same change is not written again.
			if _, err := second.Reconcile(context.Background()); !errors.Is(err, configplan.ErrUnsupported) || n.restartCount() != 2 {
				t.Fatalf("next pass: %v, %d restarts; want the change refused, nothing restarted", err, n.restartCount())
			}
		})
	}
}

// TestInterruptedAtEveryStep stops the sidecar after each step of a write
// whose restart fails (state saved, each file written, the restart, each
// file put back, the rollback saved, the restart after it) and starts a new
// one. Wherever the first left containerd failed, the next start rolls the
// change back from the state and brings containerd back as it was.
func TestInterruptedAtEveryStep(t *testing.T) {
	for _, rel := range suite() {
		// In place: config.toml; a drop-in: the drop-in, then its import.
		written := []string{"config.toml"}
		if rel.Run.Strategy == containerdrelease.DropIn {
			written = []string{"kata-remote.toml", "config.toml"}
		}
		steps := []string{"state saved"}
		for _, f := range written {
			steps = append(steps, "wrote "+f)
		}
		steps = append(steps, "restarted")
		back := slices.Clone(written)
		slices.Reverse(back)
		for _, f := range back {
			steps = append(steps, "restored "+f)
		}
		steps = append(steps, "rollback saved", "restarted again")
		for _, step := range steps {
			t.Run(rel.Version+"/"+strings.ReplaceAll(step, " ", "-"), func(t *testing.T) {
				n := newNode(t, rel)
				orig := n.gkeWrite("gke-v2.toml")
				n.start()
				cfg := n.config()
				cfg.VerifyTimeout = 5 * time.Second
				n.failNextRestart()
				stopAt(t, n.remediatorWith(cfg, Deps{}), step)

				next := n.remediatorWith(cfg, Deps{})
				res, err := next.Reconcile(context.Background())
				switch step {
				case "restarted again":
					// containerd came back from the rollback; the new
					// process only clears what was pending and refuses the
					// rejected change.
					if !errors.Is(err, configplan.ErrUnsupported) || res.RolledBack {
						t.Fatalf("next start: %+v %v, want the rolled-back change refused", res, err)
					}
				default:
					if err == nil || !res.RolledBack {
						t.Fatalf("next start: %+v %v, want a rollback", res, err)
					}
				}
				assertAsBefore(t, n, next, orig)
				before := n.restartCount()
				if _, err := next.Reconcile(context.Background()); !errors.Is(err, configplan.ErrUnsupported) || n.restartCount() != before {
					t.Fatalf("the pass after: %v, want the change refused and no restart", err)
				}
			})
		}
	}
}

// lockWatch is the node's restarter that records, at every restart,
// whether the host lock is held (by another open file description, as
// kata-deploy's process would see it).
type lockWatch struct {
	*node
	lock string
	held []bool
}

func (l *lockWatch) Restart(ctx context.Context) error {
	probe := HostLock{Path: l.lock}
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	unlock, err := probe.Acquire(ctx2)
	cancel()
	if err == nil {
		unlock()
	}
	l.held = append(l.held, errors.Is(err, errLockBusy))
	return l.node.Restart(ctx)
}

// TestLockHeldThroughRestart: the sidecar holds kata-deploy's host lock
// from its first write through containerd's restart and the check that it
// came back, as kata-deploy 4.1.0 does around its own restart, so neither
// restarts containerd while the other is half-way through an edit. Also: a
// state temp file left by a kill at the state's rename is removed.
func TestLockHeldThroughRestart(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			n.gkeWrite("gke-v2.toml")
			n.start()
			cfg := n.config()
			if err := os.MkdirAll(cfg.Target.DropInDir, 0o755); err != nil {
				t.Fatal(err)
			}
			leftover := filepath.Join(cfg.Target.DropInDir, ".state.json.tmp-123456")
			n.catWrite(leftover, []byte(`{"files": [`))
			w := &lockWatch{node: n, lock: cfg.Lock.Path}
			r := n.remediatorWith(cfg, Deps{Restarter: w})
			if res := reconcileOK(t, r); !res.Restarted || !res.Converged {
				t.Fatalf("%+v, want converged with a restart", res)
			}
			if len(w.held) != 1 || !w.held[0] {
				t.Fatalf("host lock held at the restarts: %v, want held at the one restart", w.held)
			}
			if _, err := os.Stat(leftover); err == nil {
				t.Fatalf("%s left behind", leftover)
			}
			// Released after the pass.
			unlock, err := cfg.Lock.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			unlock()
		})
	}
}
