//go:build linux

package remediate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// TestSlowWriter: a writer (GKE's `cat >`, kata-deploy's plain writes)
// that pauses mid-file for longer than the debounce and the quiet time
// must not have the rest of its file lost: while it holds the file open
// for writing, the sidecar does not act on it. A release edited in place
// (1.7), whose CRI status shows what it loaded, keeps running with the
// handler meanwhile.
func TestSlowWriter(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			n.gkeWrite("gke-v2.toml")
			n.start()
			cfg := n.config()
			cfg.Quiet = 100 * time.Millisecond
			lp := startLoop(t, n.remediatorWith(cfg, Deps{}), Loop{Debounce: 20 * time.Millisecond})
			lp.waitRestarts(t, 1)

			full := n.fixture("gke-v2.toml")
			half := bytes.Index(full, []byte("[plugins.\"io.containerd.grpc.v1.cri\".containerd]"))
			f, err := os.OpenFile(n.target.Config, os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(full[:half]); err != nil {
				t.Fatal(err)
			}
			// The first half is valid TOML on its own. The pause is the writer's
			// (a slow disk, a preempted bootstrap script), not a synchronisation:
			// whatever the loop does meanwhile, the outcome must be the same.
			time.Sleep(time.Second)
			if _, err := f.Write(full[half:]); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			lp.waitFor(t, "the handler back in the complete file", func() bool {
				got := read(t, n.target.Config)
				return strings.Contains(got, "kata-remote") && strings.Contains(got, "io.containerd.internal.v1.opt") && lp.r.Ready()
			})
			lp.stop(t)
			got := []byte(read(t, n.target.Config))
			doc, err := tomledit.Decode(got)
			if err != nil {
				t.Fatalf("final file does not parse: %v", err)
			}
			l := tomledit.Leaves(doc)
			if l[`plugins."io.containerd.internal.v1.opt".path`] != n.dir+"/home/containerd/opt/containerd" || l[`plugins."io.containerd.grpc.v1.cri".registry.config_path`] == nil {
				t.Fatalf("the writer's tail was lost:\n%s", got)
			}
			assertDump(t, n, DefaultHandler())
		})
	}
}

// TestSymlinkedConfig: a config.toml that is a symlink stays one; the
// change goes to its target, and uninstall puts the target's bytes back.
func TestSymlinkedConfig(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			real := filepath.Join(n.dir, "etc", "real", "containerd.toml")
			orig := n.fixture("gke-v2.toml")
			n.catWrite(real, orig)
			if err := os.Symlink("real/containerd.toml", n.target.Config); err != nil {
				t.Fatal(err)
			}
			n.start()
			r := n.remediator(nil)
			if res := reconcileOK(t, r); !res.Converged || !res.Restarted {
				t.Fatalf("%+v", res)
			}
			if fi, err := os.Lstat(n.target.Config); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("config.toml is no longer a symlink (%v)", err)
			}
			if !strings.Contains(read(t, real), "kata-remote") && !strings.Contains(read(t, real), "imports") {
				t.Fatal("the symlink's target was not changed")
			}
			assertLoaded(t, n, DefaultHandler())
			if _, err := r.Cleanup(context.Background()); err != nil {
				t.Fatal(err)
			}
			if read(t, real) != string(orig) {
				t.Fatal("cleanup did not restore the target's bytes")
			}
			if fi, err := os.Lstat(n.target.Config); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatal("cleanup replaced the symlink")
			}
		})
	}
}

// TestByteOrderMark: containerd 1.7 reads a config.toml that starts with a
// UTF-8 byte order mark (go-toml v1), 2.x does not (go-toml v2: "invalid
// character at start of key"); the row's ReadsBOM says which. The sidecar
// follows the node's containerd: where it reads the mark, the file is
// edited and keeps it; where it does not, the file is left byte-identical
// and the refusal says why.
func TestByteOrderMark(t *testing.T) {
	bom := []byte("\xef\xbb\xbf")
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			orig := append(append([]byte(nil), bom...), n.fixture("gke-v2.toml")...)
			n.catWrite(n.target.Config, orig)
			if n.run.ReadsBOM {
				n.start()
				res := reconcileOK(t, n.remediator(nil))
				if !res.Converged || !res.Restarted {
					t.Fatalf("%+v", res)
				}
				if got := read(t, n.target.Config); !strings.HasPrefix(got, string(bom)) || !strings.Contains(got, "kata-remote") {
					t.Fatal("the byte order mark was dropped, or the handler not added")
				}
				assertLoaded(t, n, DefaultHandler())
				return
			}
			f := newFixtureOn(t, rel, "")
			f.cfg.Target = n.target
			r := f.remediator(t, Deps{Containerd: n.ctr})
			_, err := r.Reconcile(context.Background())
			if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), "cannot load the current configuration") || !strings.Contains(err.Error(), n.target.Config) {
				t.Fatalf("err = %v, want a refusal naming the file containerd cannot load", err)
			}
			if read(t, n.target.Config) != string(orig) || f.rs.calls != 0 {
				t.Fatal("file changed or containerd restarted")
			}
			if rs := f.reasons(); len(rs) != 1 || rs[0] != "ConfigUnsupported" {
				t.Fatalf("events %v, want one ConfigUnsupported", rs)
			}
		})
	}
}

// TestFailingRestartRollsBack: containerd does not come back after the
// restart that should load the handler (here its root directory is broken,
// as a full or failing disk would leave it). The sidecar puts every file
// back byte for byte, restarts containerd once more — which comes back as
// it was — reports, and does not write the same change again.
func TestFailingRestartRollsBack(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			orig := n.gkeWrite("gke-v2.toml")
			n.start()
			cfg := n.config()
			cfg.VerifyTimeout = 20 * time.Second
			r := n.remediatorWith(cfg, Deps{})
			n.mu.Lock()
			n.failNext = true
			n.mu.Unlock()
			res, err := r.Reconcile(context.Background())
			if err == nil || !res.RolledBack {
				t.Fatalf("res %+v err %v, want a rollback", res, err)
			}
			if read(t, n.target.Config) != string(orig) {
				t.Fatal("config.toml not put back byte for byte")
			}
			if _, err := os.Stat(n.target.DropIn()); err == nil {
				t.Fatal("the drop-in is still there")
			}
			if n.restartCount() != 2 {
				t.Fatalf("%d restarts, want the failed one and one after the rollback", n.restartCount())
			}
			cfgNow, err := ParseStatusConfig(n.status())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := cfgNow.Containerd.Runtimes["runc"]; !ok {
				t.Fatal("containerd is not back as it was")
			}
			if _, ok := cfgNow.Containerd.Runtimes["kata-remote"]; ok {
				t.Fatal("containerd runs the rolled-back handler")
			}
			_, err = r.Reconcile(context.Background())
			if !errors.Is(err, configplan.ErrUnsupported) || n.restartCount() != 2 || read(t, n.target.Config) != string(orig) {
				t.Fatalf("next pass: %v, %d restarts: want the same change refused, nothing written or restarted", err, n.restartCount())
			}
			// A new configuration is a new candidate.
			n.gkeWrite("gke-v2-streaming.toml")
			if res := reconcileOK(t, r); !res.Converged {
				t.Fatalf("after the configuration changed: %+v", res)
			}
		})
	}
}

// TestByteIdenticalRewriteNoRestart: without a CRI socket (the DaemonSet
// mounts none) a release edited in place (1.7) reports nothing about its handlers, so the
// sidecar judges by when the handler's settings were put in place. A tool
// rewriting config.toml with the same bytes changes nothing of them: no
// restart. A real drift still gets one.
func TestByteIdenticalRewriteNoRestart(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			n.gkeWrite("gke-v2.toml")
			n.start()
			cfg := n.config()
			cfg.ContainerdVersion = n.run.Raw // what the installer passes without a socket
			r, err := New(cfg, Deps{Restarter: n, Containerd: n.ctr, Budget: restart.NewBudget(time.Nanosecond, 3)})
			if err != nil {
				t.Fatal(err)
			}
			if res := reconcileOK(t, r); !res.Restarted || !res.Converged {
				t.Fatalf("first pass: %+v", res)
			}
			same := []byte(read(t, n.target.Config))
			n.catWrite(n.target.Config, same)
			if res := reconcileOK(t, r); res.Restarted || len(res.Wrote) != 0 || !res.Converged {
				t.Fatalf("after a byte-identical rewrite: %+v, want nothing done", res)
			}
			n.gkeWrite("gke-v2.toml")
			if res := reconcileOK(t, r); !res.Restarted || len(res.Wrote) != 1 {
				t.Fatalf("after a real drift: %+v, want a write and a restart", res)
			}
			if n.restartCount() != 2 {
				t.Fatalf("%d restarts, want 2", n.restartCount())
			}
		})
	}
}

// TestImportThatOverridesIsRefused: on a release edited in place (1.7) an imported file
// that defines the CRI plugin table replaces the main file's whole table,
// so a handler edited into the main file would not be loaded. The check
// with containerd sees it; the sidecar refuses, names the import, and
// leaves both files byte-identical.
func TestImportThatOverridesIsRefused(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			other := filepath.Join(n.dir, "etc", "cri.toml")
			n.catWrite(other, []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/home/kubernetes/bin\"\n"))
			main := withImport(t, n.fixture("gke-v2.toml"), other)
			n.catWrite(n.target.Config, main)
			n.start()
			_, err := n.remediator(nil).Reconcile(context.Background())
			if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), "would not take effect") || !strings.Contains(err.Error(), other) {
				t.Fatalf("err = %v, want a refusal naming %s", err, other)
			}
			if read(t, n.target.Config) != string(main) || n.restartCount() != 0 {
				t.Fatal("refused config changed, or containerd restarted")
			}
		})
	}
}

// TestCleanupRestoresPreInstallBytes: uninstall on a node puts every file
// back as it was before the sidecar, restarts containerd once because
// bytes changed, and a second run changes and restarts nothing. A file
// someone else rewrote since is left as it is.
func TestCleanupRestoresPreInstallBytes(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			orig := n.gkeWrite("gke-v2.toml")
			n.start()
			r := n.remediator(nil)
			if res := reconcileOK(t, r); !res.Converged {
				t.Fatalf("%+v", res)
			}
			before := n.restartCount()
			out, err := r.Cleanup(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if read(t, n.target.Config) != string(orig) || !out.Restarted || n.restartCount() != before+1 {
				t.Fatalf("cleanup %+v: config restored %v, restarts %d→%d; want GKE's bytes and one restart", out, read(t, n.target.Config) == string(orig), before, n.restartCount())
			}
			if _, err := os.Stat(n.target.DropInDir); err == nil {
				t.Fatal("the sidecar's directory is still there")
			}
			cfg, err := ParseStatusConfig(n.status())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := cfg.Containerd.Runtimes["kata-remote"]; ok {
				t.Fatal("containerd still runs kata-remote after the cleanup")
			}
			out, err = r.Cleanup(context.Background())
			if err != nil || out.Restarted || len(out.Restored)+len(out.Removed) != 0 || n.restartCount() != before+1 {
				t.Fatalf("second cleanup %+v %v: want nothing done", out, err)
			}

			// GKE rewrote the file after the sidecar: not the sidecar's to
			// restore.
			reconcileOK(t, r)
			rewritten := n.gkeWrite("gke-v2-streaming.toml")
			out, err = r.Cleanup(context.Background())
			if err != nil || !slicesContains(out.Kept, n.target.Config) || read(t, n.target.Config) != string(rewritten) {
				t.Fatalf("cleanup after GKE's rewrite: %+v %v; want config.toml kept as GKE wrote it", out, err)
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestWriteErrorsNameNoTempFile: a failed write reads the same at every
// retry (the file being replaced, never the random temp name), so it is
// reported once.
func TestWriteErrorsNameNoTempFile(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	r := f.remediator(t, Deps{})
	r.beforeRename = func(tmp string) { os.Remove(tmp) }
	var msgs []string
	for range 2 {
		_, err := r.Reconcile(context.Background())
		if err == nil {
			t.Fatal("the write succeeded although its temp file vanished")
		}
		if strings.Contains(err.Error(), ".tmp-") {
			t.Fatalf("error names the temp file: %v", err)
		}
		msgs = append(msgs, err.Error())
	}
	if msgs[0] != msgs[1] {
		t.Fatalf("the same failure reads differently:\n%s\n%s", msgs[0], msgs[1])
	}
	if rs := f.reasons(); len(rs) != 1 || rs[0] != "WriteFailed" {
		t.Fatalf("events %v, want one WriteFailed", rs)
	}
}
