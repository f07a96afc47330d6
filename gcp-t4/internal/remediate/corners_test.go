//go:build linux

package remediate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
	corev1 "k8s.io/api/core/v1"
)

// staleConfigPath is where the stale legacy drop-in of the conf.d test
// points kata's configuration: a file that exists, so that only the merge
// tells the two drop-ins apart.
const staleConfigPath = "/opt/kata/share/defaults/kata-containers/runtimes/remote/configuration-remote-old.toml"

// TestConfDModeNoImportFight is kata-deploy 4.x in conf.d mode, on the
// releases whose row says kata-deploy uses it (2.2+): the main file imports conf.d/*.toml, where kata-deploy
// put its drop-in, and an older install's drop-in is still under /opt/kata
// with its import removed (runtime/containerd.rs
// remove_legacy_drop_in_import, 4.0.0 and 4.1.0). The sidecar keeps the
// drop-in containerd loads and never imports the stale one, whose settings
// would win the merge; a kata-deploy reinstall (which removes that import
// again) then finds nothing to undo, and the sidecar nothing to redo. With
// the conf.d drop-in gone, the stale file is still not imported: the
// sidecar's own drop-in carries the handler.
func TestConfDModeNoImportFight(t *testing.T) {
	confD := func(r containerdrelease.Runtime) bool { return r.KataDeploy == containerdrelease.KataDeployConfD }
	rels := where(confD)
	for _, rel := range rels {
		t.Run(rel.Version, func(t *testing.T) {
			for _, confd := range []bool{true, false} {
				n := newNode(t, rel)
				n.catWrite(filepath.Join(n.kataDir, configplan.KataDeployNydus, "containerd-nydus-grpc"), []byte("stand-in\n"))
				n.catWrite(filepath.Join(n.host, staleConfigPath), []byte("stand-in for an older kata\n"))
				kd := n.fixture("kata-deploy-4.x-dropin-v2.toml")
				legacy := configplan.LegacyDropIn(n.kataDir)
				n.catWrite(legacy, []byte(strings.ReplaceAll(string(kd), "runtimes/remote/configuration-remote.toml", "runtimes/remote/configuration-remote-old.toml")))
				current := configplan.ConfDDropIn(n.target.Config)
				if confd {
					n.catWrite(current, kd)
				} else {
					// conf.d holds something else: the glob matches.
					n.catWrite(filepath.Join(filepath.Dir(current), "10-other.toml"), []byte("version = 2\n"))
				}
				glob := filepath.Join(filepath.Dir(current), "*.toml")
				n.catWrite(n.target.Config, withImport(t, n.fixture("gke-v2.toml"), glob))
				n.start()
				node := labelled(true)
				r := n.remediatorWith(n.config(), Deps{Node: func(context.Context) (*corev1.Node, error) { return node, nil }})
				res := reconcileOK(t, r)
				if !res.Converged {
					t.Fatalf("conf.d drop-in %v: %+v", confd, res)
				}
				imports, _ := stringList(must(tomledit.Decode([]byte(read(t, n.target.Config))))["imports"])
				if slices.Contains(imports, legacy) {
					t.Fatalf("conf.d drop-in %v: imports %q: the stale legacy drop-in was imported again", confd, imports)
				}
				rt := slices.Concat(n.run.CRI.Runtimes, []string{"kata-remote"})
				got, _ := at(n.dump(), slices.Concat(rt, []string{"options", "ConfigPath"})...)
				if want := DefaultHandler().ConfigPath; got != want {
					t.Fatalf("conf.d drop-in %v: containerd's merge has ConfigPath %q, want %q (kata-deploy's current drop-in)", confd, got, want)
				}
				assertLoaded(t, n, DefaultHandler())
				if confd {
					if !strings.Contains(res.Plan.Source, current) {
						t.Errorf("settings from %q, want kata-deploy's conf.d drop-in %s", res.Plan.Source, current)
					}
					if ours := read(t, n.target.DropIn()); strings.Contains(ours, "runtime_type") {
						t.Errorf("the sidecar's drop-in redefines the handler kata-deploy's loaded drop-in holds:\n%s", ours)
					}
				}
				// kata-deploy reinstalls: same drop-in, the legacy import
				// scrubbed (a no-op now), containerd restarted.
				before := read(t, n.target.Config)
				if confd {
					n.catWrite(current, kd)
				}
				if err := n.Restart(context.Background()); err != nil {
					t.Fatal(err)
				}
				restarts := n.restartCount()
				res = reconcileOK(t, r)
				if len(res.Wrote) != 0 || res.Restarted || n.restartCount() != restarts || read(t, n.target.Config) != before {
					t.Fatalf("conf.d drop-in %v: after kata-deploy's reinstall %+v, want nothing written or restarted", confd, res)
				}
			}
		})
	}
	if len(rels) == 0 {
		t.Skip("no release configured on which kata-deploy uses conf.d (2.2+; test/containerd/versions.mk, CONTAINERD2_VERSIONS)")
	}
}

// TestExistingHandlerWithoutDefaultPaths: kata is installed somewhere else
// than the flag defaults (/opt/kata), and containerd's configuration
// already has a kata-remote handler pointing there. That handler comes
// before the flag defaults (docs/remediation.md, "What it keeps"), so its
// paths are the ones that must exist: the node is repaired, not skipped as
// "kata not installed".
func TestExistingHandlerWithoutDefaultPaths(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			if err := os.RemoveAll(filepath.Join(n.host, "opt", "kata")); err != nil {
				t.Fatal(err)
			}
			shim, conf := "/opt/kata-alt/bin/containerd-shim-kata-v2", "/opt/kata-alt/share/kata-containers/configuration-remote.toml"
			for _, p := range []string{shim, conf} {
				n.catWrite(filepath.Join(n.host, p), []byte("stand-in for kata\n"))
			}
			main := string(n.fixture("gke-v2.toml")) + `
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote]
  runtime_type = "io.containerd.kata-remote.v2"
  runtime_path = "` + shim + `"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.options]
  ConfigPath = "` + conf + `"
`
			n.catWrite(n.target.Config, []byte(main))
			n.start()
			r := n.remediator(nil)
			res, err := r.Reconcile(context.Background())
			if err != nil || res.Skipped != "" || !res.Converged {
				t.Fatalf("res %+v err %v: want the existing handler kept and the node converged", res, err)
			}
			if res.Plan.Handler.RuntimePath != shim || res.Plan.Handler.ConfigPath != conf {
				t.Fatalf("handler %+v, want the configured paths kept", res.Plan.Handler)
			}
			rt := slices.Concat(n.run.CRI.Runtimes, []string{"kata-remote"})
			dump := n.dump()
			if got, _ := at(dump, slices.Concat(rt, []string{"runtime_path"})...); got != shim {
				t.Errorf("merged runtime_path %q, want %q", got, shim)
			}
			// Kept as it is: it names no snapshotter, so none is added (the
			// node may run no nydus; TestKataDeployWithoutASnapshotterMapping).
			h := DefaultHandler()
			h.RuntimePath, h.ConfigPath = shim, conf
			h = h.WithoutSnapshotter()
			assertLoaded(t, n, h)
			if res.Plan.Handler.Snapshotter != "" {
				t.Errorf("planned snapshotter %q, want the existing handler's (none)", res.Plan.Handler.Snapshotter)
			}

			// With its shim gone too, the node is skipped, naming the path
			// the configured handler needs.
			os.Remove(filepath.Join(n.host, shim))
			res, err = n.remediator(nil).Reconcile(context.Background())
			if err != nil || !strings.Contains(res.Skipped, shim) {
				t.Fatalf("res %+v err %v: want a skip naming %s", res, err, shim)
			}
		})
	}
}

// TestReadOnlySymlinkTargetWritesNothing: config.toml is a symlink to a
// file on a read-only mount. Nothing is written, not the sidecar's drop-in
// nor its state, before the write that cannot succeed; the refusal names
// the file.
func TestReadOnlySymlinkTargetWritesNothing(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			src := filepath.Join(n.dir, "ro-src")
			ro := filepath.Join(n.dir, "ro")
			orig := n.fixture("gke-v2.toml")
			n.catWrite(filepath.Join(src, "containerd.toml"), orig)
			if err := os.MkdirAll(ro, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mount(src, ro, "", syscall.MS_BIND, ""); err != nil {
				t.Skipf("bind mount (needs CAP_SYS_ADMIN, as CI's root has): %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(ro, syscall.MNT_DETACH) })
			if err := syscall.Mount("", ro, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
				t.Fatalf("remount read-only: %v", err)
			}
			if err := os.Symlink(filepath.Join(ro, "containerd.toml"), n.target.Config); err != nil {
				t.Fatal(err)
			}
			n.start()
			_, err := n.remediator(nil).Reconcile(context.Background())
			for _, p := range []string{n.target.DropIn(), statePath(n.target)} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was written before the failing write", p)
				}
			}
			if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), filepath.Join(ro, "containerd.toml")) || !strings.Contains(err.Error(), "nothing was written") {
				t.Fatalf("err %v, want a refusal naming the read-only target", err)
			}
			if left, _ := filepath.Glob(filepath.Join(n.target.DropInDir, ".*tmp-*")); len(left) > 0 {
				t.Errorf("temp files left: %v", left)
			}
			if got := read(t, filepath.Join(ro, "containerd.toml")); got != string(orig) || n.restartCount() != 0 {
				t.Fatal("target changed or containerd restarted")
			}
		})
	}
}

// gke17Dotted is GKE's containerd 1.7 configuration (testdata/gke-v2.toml)
// written with dotted keys under the CRI table, as a hand-edited or
// tool-generated file may be.
const gke17Dotted = `version = 2
required_plugins = ["io.containerd.grpc.v1.cri"]
disabled_plugins = ["io.containerd.internal.v1.restart"]
oom_score = -999

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
  cni.bin_dir = "/home/kubernetes/bin"
  cni.conf_dir = "@TMP@/cni/net.d"
  containerd.default_runtime_name = "runc"
  containerd.discard_unpacked_layers = true
  containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
  containerd.runtimes.runc.options.SystemdCgroup = true
`

// TestInPlaceDottedAndInline: on a release edited in place (1.7) the
// handler is edited into config.toml. A CRI table written with dotted keys
// gets the handler as dotted keys of the same section (TOML gives such
// tables no header), proven with that containerd's own merge and loaded. An inline
// `runtimes = {…}` or `proxy_plugins = {…}` can only be changed by
// rewriting it whole: refused, byte-identical, with an Event naming the
// inline table.
func TestInPlaceDottedAndInline(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) { testInPlaceDottedAndInline(t, rel) })
	}
}

func testInPlaceDottedAndInline(t *testing.T, rel release) {
	t.Run("dotted", func(t *testing.T) {
		n := newNode(t, rel)
		orig := []byte(strings.ReplaceAll(gke17Dotted, "@TMP@", n.dir))
		n.catWrite(n.target.Config, orig)
		n.start()
		res := reconcileOK(t, n.remediator(nil))
		if !res.Converged || !res.Restarted {
			t.Fatalf("%+v, want converged", res)
		}
		assertLoaded(t, n, DefaultHandler())
		got := read(t, n.target.Config)
		kept := strings.Replace(string(orig), "containerd.discard_unpacked_layers = true", "containerd.discard_unpacked_layers = false", 1)
		if !strings.HasPrefix(got, kept) {
			t.Errorf("the original lines were not kept as they were:\n%s", got)
		}
		if !strings.Contains(got, "  containerd.runtimes.kata-remote.runtime_type = \"io.containerd.kata-remote.v2\"\n") {
			t.Errorf("handler not added as dotted keys of the CRI section:\n%s", got)
		}
	})
	for name, inline := range map[string]struct{ old, new, table string }{
		"runtimes": {
			old:   "  containerd.runtimes.runc.runtime_type = \"io.containerd.runc.v2\"\n  containerd.runtimes.runc.options.SystemdCgroup = true\n",
			new:   "  containerd.runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\", options = { SystemdCgroup = true } } }\n",
			table: "runtimes = {…}",
		},
		"proxy_plugins": {
			old:   "oom_score = -999\n",
			new:   "oom_score = -999\nproxy_plugins = { stargz = { type = \"snapshot\", address = \"/run/containerd-stargz-grpc/containerd-stargz-grpc.sock\" } }\n",
			table: "proxy_plugins = {…}",
		},
	} {
		t.Run("inline-"+name, func(t *testing.T) {
			n := newNode(t, rel)
			orig := []byte(strings.ReplaceAll(strings.Replace(gke17Dotted, inline.old, inline.new, 1), "@TMP@", n.dir))
			n.catWrite(n.target.Config, orig)
			n.start()
			var evs []*corev1.Event
			r := n.remediatorWith(n.config(), Deps{Events: Events{Client: &fakeAPI{events: &evs}, NodeName: "gke-peer-1"}})
			_, err := r.Reconcile(context.Background())
			if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), "inline table ("+inline.table+")") {
				t.Fatalf("err %v, want a refusal naming the inline table %s", err, inline.table)
			}
			if read(t, n.target.Config) != string(orig) || n.restartCount() != 0 {
				t.Fatal("refused config changed or containerd restarted")
			}
			if len(evs) != 1 || evs[0].Reason != "ConfigUnsupported" || !strings.Contains(evs[0].Message, inline.table) {
				t.Fatalf("events %+v, want one ConfigUnsupported naming %s", evs, inline.table)
			}
		})
	}
}
