//go:build linux

package remediate

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kata-deploy 4.0.0 and 4.1.0 write the same containerd configuration
// (runtime/containerd.rs and artifacts/snapshotters.rs differ between the
// tags in paths and backups, not in keys); they differ in the host lock,
// which only 4.1.0 takes (main.rs acquire_node_mutation_lock).
var kataDeployVersions = []string{"4.0.0", "4.1.0"}

// kataDeployInstall leaves on n what kata-deploy's install does on that
// containerd release (its row's KataDeploy; configplan/katadeploy.go for the
// sources), for a GKE main file: it returns kata-deploy's drop-in path (""
// where it edits config.toml).
func kataDeployInstall(t *testing.T, n *node, gke string) string {
	t.Helper()
	return kataDeployInstallAs(t, n, gke, true)
}

// kataDeployInstallAs is kataDeployInstall with the chart's snapshotter
// mapping for the remote shim (nydus) or without one (no snapshotter key,
// no nydus installed).
func kataDeployInstallAs(t *testing.T, n *node, gke string, nydusMapping bool) string {
	t.Helper()
	suffix := ""
	if nydusMapping {
		nydus := filepath.Join(n.kataDir, configplan.KataDeployNydus, "containerd-nydus-grpc")
		n.catWrite(nydus, []byte("stand-in for kata-deploy's nydus snapshotter\n"))
	} else {
		suffix = "-nosnapshotter"
	}
	orig := n.fixture(gke)
	if n.run.KataDeploy == containerdrelease.KataDeployEditsMain {
		n.catWrite(n.target.Config+".bak", orig)
		n.catWrite(n.target.Config, n.fixture("gke-v2-kata-deploy-4.x"+suffix+".toml"))
		return ""
	}
	drop := filepath.Join(n.kataDir, "containerd", "config.d", "kata-deploy.toml")
	fixture := "kata-deploy-4.x-dropin-v2" + suffix + ".toml"
	if mustVersion(t, orig).(int64) >= 3 {
		fixture = "kata-deploy-4.x-dropin-v3" + suffix + ".toml"
	}
	n.catWrite(drop, n.fixture(fixture))
	n.catWrite(n.target.Config, withImport(t, orig, drop))
	return drop
}

// withImport appends an imports entry as kata-deploy's
// append_to_toml_array does (a root key).
func withImport(t testing.TB, main []byte, entry string) []byte {
	t.Helper()
	doc, err := tomledit.Decode(main)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := stringList(doc["imports"])
	out, err := tomledit.Apply(main, []tomledit.Change{{Key: "imports", Value: strs(append(list, entry))}}, tomledit.Render)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func labelled(installed bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gke-peer-1", Labels: map[string]string{"cloud.google.com/gke-os-distribution": "ubuntu"}}}
	if installed {
		n.Labels[kataRuntimeLabel] = "true"
	}
	return n
}

// TestKataDeployCoexistence: with its default flags the sidecar keeps
// kata-deploy's own configuration, on every containerd release and for
// kata-deploy 4.0 and 4.1: it does not rewrite kata-deploy's handler, only
// adds what peer pods need besides (discard_unpacked_layers = false; on 2.x
// the runtime_platforms mapping kata-deploy writes only for version 3 main
// files); after GKE's rewrite it restores kata-deploy's handler (1.7) or
// kata-deploy's import (2.x); a kata-deploy reinstall does not make it
// write or restart again; and it waits while kata-deploy installs.
func TestKataDeployCoexistence(t *testing.T) {
	for _, kdv := range kataDeployVersions {
		for _, rel := range suite() {
			t.Run(kdv+"/"+rel.Version, func(t *testing.T) { testKataDeployCoexistence(t, kdv, rel) })
		}
	}
}

func testKataDeployCoexistence(t *testing.T, kdv string, rel release) {
	n := newNode(t, rel)
	drop := kataDeployInstall(t, n, "gke-v2.toml")
	n.start()
	installedDump := n.dump()
	kdHandler := sub(installedDump, slices.Concat(n.run.CRI.Runtimes, []string{"kata-remote"}))
	kdFile := read(t, drop)
	node := labelled(true)
	cfg := n.config()
	r := n.remediatorWith(cfg, Deps{Node: func(context.Context) (*corev1.Node, error) { return node, nil }})

	res := reconcileOK(t, r)
	if !res.Converged || !strings.HasPrefix(res.Plan.Source, "kata-deploy") {
		t.Fatalf("first pass: %+v, want converged with kata-deploy's settings", res)
	}
	h := DefaultHandler()
	assertLoaded(t, n, h)
	assertDump(t, n, h)
	if got := sub(n.dump(), slices.Concat(n.run.CRI.Runtimes, []string{"kata-remote"})); !reflect.DeepEqual(got, kdHandler) {
		t.Errorf("handler in containerd's merge after the sidecar:\n%v\nkata-deploy's:\n%v", got, kdHandler)
	}
	if n.run.Strategy == containerdrelease.DropIn {
		if read(t, drop) != kdFile {
			t.Error("kata-deploy's drop-in was rewritten")
		}
		ours := read(t, n.target.DropIn())
		if strings.Contains(ours, "runtime_type") || !strings.Contains(ours, "runtime_platforms") {
			t.Errorf("the sidecar's drop-in redefines kata-deploy's handler or lacks the snapshotter mapping:\n%s", ours)
		}
		imports, _ := stringList(must(tomledit.Decode([]byte(read(t, n.target.Config))))["imports"])
		if !reflect.DeepEqual(imports, []string{drop, n.target.DropIn()}) {
			t.Errorf("imports %q, want kata-deploy's then ours, by literal path", imports)
		}
	}

	// kata-deploy's DaemonSet reinstalls whenever its container starts: it
	// writes its keys again (the same values, so the same bytes) and
	// restarts containerd. The sidecar has nothing to do.
	if drop == "" {
		n.catWrite(n.target.Config, []byte(read(t, n.target.Config)))
	} else {
		n.catWrite(drop, []byte(kdFile))
	}
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := n.restartCount()
	res = reconcileOK(t, r)
	if len(res.Wrote) != 0 || res.Restarted || n.restartCount() != before || !res.Converged {
		t.Fatalf("after kata-deploy's reinstall: %+v; want nothing written, no restart", res)
	}

	// GKE's bootstrap rewrites config.toml and restarts containerd.
	n.gkeWrite("gke-v2.toml")
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res = reconcileOK(t, r)
	if !res.Restarted || !res.Converged {
		t.Fatalf("after GKE's rewrite: %+v, want kata-deploy's configuration restored and containerd restarted", res)
	}
	assertLoaded(t, n, h)
	assertDump(t, n, h)
	if got := sub(n.dump(), slices.Concat(n.run.CRI.Runtimes, []string{"kata-remote"})); !reflect.DeepEqual(got, kdHandler) {
		t.Errorf("handler restored after GKE's rewrite:\n%v\nkata-deploy's:\n%v", got, kdHandler)
	}

	// kata-deploy installing again: 4.1 holds the host lock while it
	// works, 4.0 takes none but has not labelled the node yet. Either way
	// the sidecar waits and writes nothing.
	n.gkeWrite("gke-v2.toml")
	cur := read(t, n.target.Config)
	if kdv == "4.1.0" {
		unlock, err := cfg.Lock.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Reconcile(context.Background())
		unlock()
		if err != nil || res.RetryIn <= 0 || len(res.Wrote) != 0 {
			t.Fatalf("while kata-deploy 4.1 holds the lock: %+v %v, want a wait", res, err)
		}
	} else {
		node = labelled(false)
		res, err := r.Reconcile(context.Background())
		if err != nil || !strings.Contains(res.Skipped, "kata-deploy is installing") || len(res.Wrote) != 0 {
			t.Fatalf("while kata-deploy 4.0 installs: %+v %v, want a wait", res, err)
		}
		node = labelled(true)
	}
	if read(t, n.target.Config) != cur {
		t.Fatal("the sidecar wrote while kata-deploy was installing")
	}
	if res := reconcileOK(t, r); len(res.Wrote) == 0 || !res.Converged {
		t.Fatalf("once kata-deploy is done: %+v", res)
	}
}

// TestKataDeployWithoutASnapshotterMapping: kata-deploy installed without a
// snapshotter mapping for its remote shim names no snapshotter and runs no
// nydus. The sidecar, with its default flags, keeps it so on every release,
// at install and after GKE's rewrite: it never adds a snapshotter the node
// does not run. Before, it added its flag's default (nydus-for-kata-tee)
// and restarted containerd, and kubelet then failed to read
// /var/lib/nydus-for-kata-tee every 10 s (docs/node-harness.md, found by the
// node harness).
func TestKataDeployWithoutASnapshotterMapping(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			drop := kataDeployInstallAs(t, n, "gke-v2.toml", false)
			n.start()
			rt := slices.Concat(n.run.CRI.Runtimes, []string{"kata-remote"})
			kdHandler := sub(n.dump(), rt)
			node := labelled(true)
			r := n.remediatorWith(n.config(), Deps{Node: func(context.Context) (*corev1.Node, error) { return node, nil }})
			want := DefaultHandler().WithoutSnapshotter()
			check := func(when string, res Result) {
				t.Helper()
				if !res.Converged || res.Plan.Handler.Snapshotter != "" {
					t.Fatalf("%s: converged %v, snapshotter %q learned from %s, wrote %v; want converged on kata-deploy's handler, no snapshotter",
						when, res.Converged, res.Plan.Handler.Snapshotter, res.Plan.Source, res.Wrote)
				}
				assertLoaded(t, n, want)
				dump := n.dump()
				if got := sub(dump, rt); !reflect.DeepEqual(got, kdHandler) {
					t.Errorf("%s: handler in containerd's merge:\n%v\nkata-deploy's:\n%v", when, got, kdHandler)
				}
				for k, v := range tomledit.Leaves(dump) {
					if s, _ := v.(string); strings.Contains(k, "nydus") || strings.Contains(s, "nydus") {
						t.Errorf("%s: containerd's merge has %s = %v; kata-deploy runs no nydus here", when, k, v)
					}
				}
				if ours := read(t, n.target.DropIn()); strings.Contains(ours, "nydus") || strings.Contains(ours, "runtime_platforms") || strings.Contains(ours, "disable_snapshot_annotations") {
					t.Errorf("%s: the sidecar's drop-in maps a snapshotter:\n%s", when, ours)
				}
				if main := read(t, n.target.Config); strings.Contains(main, "nydus") {
					t.Errorf("%s: the main file names nydus:\n%s", when, main)
				}
			}
			check("install", reconcileOK(t, r))
			n.gkeWrite("gke-v2.toml")
			if err := n.Restart(context.Background()); err != nil {
				t.Fatal(err)
			}
			res := reconcileOK(t, r)
			if !res.Restarted {
				t.Fatalf("after GKE's rewrite: wrote %v, restarted %v; want kata-deploy's handler restored and containerd restarted", res.Wrote, res.Restarted)
			}
			check("after GKE's rewrite", res)
			if drop != "" && !strings.Contains(read(t, n.target.Config), drop) {
				t.Errorf("kata-deploy's import %s not restored", drop)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestForeignUnimportedDropIn: NVIDIA's container toolkit left a version 3
// drop-in in /etc/containerd/conf.d, which GKE's main file does not import.
// Importing the sidecar's drop-in by literal path leaves it out, so GKE's
// CNI bin_dir, runc options and sandbox image stay. Where the main file
// does import conf.d by a glob, containerd 2.0 merges as version 3 and
// drops GKE's settings: the sidecar refuses and says why; 2.3+ migrate each
// file and are fine.
func TestForeignUnimportedDropIn(t *testing.T) {
	for _, rel := range where(dropIn) {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			confd := filepath.Join(filepath.Dir(n.target.Config), "conf.d")
			nv := filepath.Join(confd, "99-nvidia.toml")
			n.catWrite(nv, n.fixture("nvidia-ctk-99-nvidia.toml"))
			n.gkeWrite("gke-v2.toml")
			n.start()
			res := reconcileOK(t, n.remediator(nil))
			if !res.Converged || !res.Restarted {
				t.Fatalf("%+v", res)
			}
			h := DefaultHandler()
			assertLoaded(t, n, h)
			assertDump(t, n, h)
			if _, ok := at(n.dump(), slices.Concat(n.run.CRI.Runtimes, []string{"nvidia"})...); ok {
				t.Error("NVIDIA's unimported drop-in is loaded now")
			}

			m := newNode(t, rel)
			m.catWrite(filepath.Join(filepath.Dir(m.target.Config), "conf.d", "99-nvidia.toml"), m.fixture("nvidia-ctk-99-nvidia.toml"))
			glob := withImport(t, m.fixture("gke-v2.toml"), filepath.Join(filepath.Dir(m.target.Config), "conf.d", "*.toml"))
			m.catWrite(m.target.Config, glob)
			m.start()
			r := m.remediator(nil)
			res, err := r.Reconcile(context.Background())
			if m.run.MigratesEachFile {
				if err != nil || !res.Converged {
					t.Fatalf("containerd %s migrates each file: %+v %v, want converged", rel.Version, res, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "merges the current configuration as version 3") || !strings.Contains(err.Error(), "99-nvidia.toml") {
				t.Fatalf("containerd %s with NVIDIA's drop-in imported by a glob: err %v, want a refusal naming the file and the version", rel.Version, err)
			}
			if read(t, m.target.Config) != string(glob) || m.restartCount() != 0 {
				t.Fatal("refused config changed, or containerd restarted")
			}
			if _, err := os.Stat(m.target.DropIn()); err == nil {
				t.Fatal("drop-in written although refused")
			}
		})
	}
}
