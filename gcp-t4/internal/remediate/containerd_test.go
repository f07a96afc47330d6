//go:build linux

package remediate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// These tests run the real containerd releases GKE nodes run (1.7 on GKE
// ≤ 1.32, 2.x from 1.33), each on a GKE-like config, and ask containerd
// itself (CRI status of the running daemon, `config dump`) what it loaded.

func reconcileOK(t *testing.T, r *Remediator) Result {
	t.Helper()
	res, err := r.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res.Skipped != "" {
		t.Fatalf("Reconcile skipped: %s", res.Skipped)
	}
	return res
}

// assertLoaded checks, through the running daemon's CRI status, that the
// handler is loaded with its snapshotter, layers are kept (1.7 reports it
// there) and GKE's CNI bin_dir survived.
func assertLoaded(t *testing.T, n *node, h Handler) {
	t.Helper()
	resp := n.status()
	cfg, err := ParseStatusConfig(resp)
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := cfg.Containerd.Runtimes[h.Name]
	if !ok {
		t.Fatalf("running containerd has no %s runtime; runtimes: %v", h.Name, reflect.ValueOf(cfg.Containerd.Runtimes).MapKeys())
	}
	if rt.RuntimeType != h.RuntimeType || rt.Snapshotter != h.Snapshotter {
		t.Errorf("running %s: runtimeType %q snapshotter %q, want %q %q", h.Name, rt.RuntimeType, rt.Snapshotter, h.RuntimeType, h.Snapshotter)
	}
	if d := cfg.Containerd.DiscardUnpackedLayers; d != nil && *d {
		t.Errorf("running containerd has discardUnpackedLayers = true")
	}
	bins := cfg.CNI.BinDirs
	if cfg.CNI.BinDir != "" {
		bins = append(bins, cfg.CNI.BinDir)
	}
	if !slices.Contains(bins, "/home/kubernetes/bin") || slices.Contains(bins, "/opt/cni/bin") {
		t.Errorf("running containerd CNI bin dirs %v, want GKE's /home/kubernetes/bin only", bins)
	}
	if len(resp.RuntimeHandlers) > 0 { // containerd 2.x reports handlers (kubelet's runtimeHandlers)
		var names []string
		for _, rh := range resp.RuntimeHandlers {
			names = append(names, rh.Name)
		}
		if !slices.Contains(names, h.Name) || !slices.Contains(names, "runc") {
			t.Errorf("CRI runtime handlers %v, want runc and %s", names, h.Name)
		}
	}
}

// assertDump checks the merged config containerd computes from the files:
// every setting the handler needs, and GKE's own settings.
func assertDump(t *testing.T, n *node, h Handler) {
	t.Helper()
	dump := n.dump()
	l := layoutOf(n.version)
	if miss := missing(wanted(h, l), dump); len(miss) > 0 {
		for _, m := range miss {
			t.Errorf("config dump lacks %s = %v", m.key(), m.value)
		}
	}
	leaves := tomledit.Leaves(dump)
	want := map[string]any{}
	if n.version.Major < 2 {
		want[`plugins."io.containerd.grpc.v1.cri".cni.bin_dir`] = "/home/kubernetes/bin"
		want[`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup`] = true
		want[`plugins."io.containerd.grpc.v1.cri".sandbox_image`] = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
	} else {
		if got := dumpBinDirs(leaves); !reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) {
			t.Errorf("config dump: CNI bin dirs %#v, want GKE's /home/kubernetes/bin", got)
		}
		want[`plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options.SystemdCgroup`] = true
		want[`plugins."io.containerd.cri.v1.images".pinned_images.sandbox`] = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
	}
	for k, v := range want {
		if got := leaves[k]; !reflect.DeepEqual(got, v) {
			t.Errorf("config dump: %s = %#v, want %#v", k, got, v)
		}
	}
}

// dumpBinDirs reads the CNI plugin directories from a 2.x config dump:
// bin_dir in 2.0; from 2.1 bin_dirs, unless the deprecated bin_dir is set
// (containerd refuses both), in which case the dump still shows bin_dirs'
// default next to it.
func dumpBinDirs(l map[string]any) any {
	if s, ok := l[`plugins."io.containerd.cri.v1.runtime".cni.bin_dir`].(string); ok && s != "" {
		return []any{s}
	}
	return l[`plugins."io.containerd.cri.v1.runtime".cni.bin_dirs`]
}

func mustVersion(t *testing.T, data []byte) any {
	t.Helper()
	doc, err := tomledit.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return doc["version"]
}

func TestContainerd17InPlace(t *testing.T) {
	v17, _ := containerdVersions()
	n := newNode(t, v17)
	orig := n.gkeWrite("gke-v2.toml")
	n.start()
	r := n.remediator(nil)

	res := reconcileOK(t, r)
	if !res.Restarted || !res.Converged || len(res.Wrote) != 1 || res.Wrote[0] != n.target.Config || res.Plan.Mode != "in-place" {
		t.Fatalf("first reconcile: %+v, want config.toml written in place and containerd restarted", res)
	}
	h := DefaultHandler()
	assertLoaded(t, n, h)
	assertDump(t, n, h)
	got := read(t, n.target.Config)
	for _, line := range strings.Split(string(orig), "\n") {
		if strings.HasPrefix(line, "#") && !strings.Contains(got, line) {
			t.Errorf("comment %q lost", line)
		}
	}
	st, err := r.state.Load()
	if err != nil || len(st.Files) != 1 || string(st.Files[0].Original) != string(orig) {
		t.Errorf("state %+v (%v): want GKE's original kept for uninstall", st, err)
	}
	if _, err := os.Stat(n.target.DropIn()); err == nil {
		t.Errorf("a drop-in was written for containerd 1.7, whose merge would replace GKE's CRI table")
	}
	if !r.Ready() {
		t.Errorf("not ready after converging")
	}

	// Converged: nothing written, no restart.
	before, _ := os.Stat(n.target.Config)
	res = reconcileOK(t, r)
	after, _ := os.Stat(n.target.Config)
	if len(res.Wrote) != 0 || res.Restarted || !res.Converged || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("converged reconcile wrote or restarted: %+v", res)
	}

	// A GKE node repair rewrites the file and restarts containerd before
	// we see it: converge again.
	n.gkeWrite("gke-v2.toml")
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res = reconcileOK(t, r)
	if !res.Restarted || len(res.Wrote) != 1 {
		t.Fatalf("after GKE rewrite: %+v, want a write and a restart", res)
	}
	assertLoaded(t, n, h)
}

func TestContainerd2DropIn(t *testing.T) {
	_, v2s := containerdVersions()
	for _, v2 := range v2s {
		fixtures := []string{"gke-v2.toml", "gke-v3.toml"}
		if run, err := ParseRuntimeVersion(v2); err == nil && run.MaxSchema() >= 4 {
			fixtures = append(fixtures, "gke-v4.toml")
		}
		for _, fixture := range fixtures {
			t.Run(v2+"/"+fixture, func(t *testing.T) { testContainerd2DropIn(t, v2, fixture) })
		}
	}
}

func testContainerd2DropIn(t *testing.T, v2, fixture string) {
	n := newNode(t, v2)
	orig := n.gkeWrite(fixture)
	n.start()
	r := n.remediator(nil)
	res := reconcileOK(t, r)
	if !res.Restarted || !res.Converged || len(res.Wrote) != 2 || res.Plan.Mode != "drop-in" {
		t.Fatalf("first reconcile: %+v, want drop-in and imports written, containerd restarted", res)
	}
	h := DefaultHandler()
	assertLoaded(t, n, h)
	assertDump(t, n, h)

	// The main file changed only by the literal import of the drop-in.
	got := []byte(read(t, n.target.Config))
	if err := tomledit.Verify(orig, got, []tomledit.Change{{Key: "imports", Value: []any{n.target.DropIn()}}}); err != nil {
		t.Errorf("main file: %v", err)
	}
	drop := []byte(read(t, n.target.DropIn()))
	if v := mustVersion(t, drop); v != int64(dropInVersion(n.version, int(mustVersion(t, orig).(int64)))) {
		t.Errorf("drop-in version %v, main file's %v", v, mustVersion(t, orig))
	}

	res = reconcileOK(t, r)
	if len(res.Wrote) != 0 || res.Restarted {
		t.Fatalf("converged reconcile wrote or restarted: %+v", res)
	}

	// GKE upgrade: full overwrite drops the imports line.
	n.gkeWrite(fixture)
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res = reconcileOK(t, r)
	if !res.Restarted || len(res.Wrote) != 1 || res.Wrote[0] != n.target.Config {
		t.Fatalf("after GKE rewrite: %+v, want only config.toml's imports rewritten and a restart", res)
	}
	assertLoaded(t, n, h)
}

// TestUpgrade17To2 is GKE 1.32 → 1.33: the node comes back with
// containerd 2.x and a fresh GKE config.
func TestUpgrade17To2(t *testing.T) {
	v17, v2s := containerdVersions()
	n := newNode(t, v17)
	n.gkeWrite("gke-v2.toml")
	n.start()
	if res := reconcileOK(t, n.remediator(nil)); !res.Converged || res.Plan.Mode != "in-place" {
		t.Fatalf("on 1.7: %+v", res)
	}
	h := DefaultHandler()
	assertLoaded(t, n, h)

	n.gkeWrite("gke-v2.toml")
	n.swap(ctrBinary(t, v2s[0]))
	n.version, _ = ParseRuntimeVersion(v2s[0])
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := reconcileOK(t, n.remediator(nil))
	if !res.Converged || !res.Restarted || res.Plan.Mode != "drop-in" {
		t.Fatalf("after the upgrade to 2.x: %+v, want the drop-in layout and a restart", res)
	}
	assertLoaded(t, n, h)
	assertDump(t, n, h)
}

// TestVersion3DropInOverVersion2Main pins the containerd behaviour the
// drop-in's version follows: 2.0–2.2 merge files before migrating and take
// the version of the last file merged, so a version 3 drop-in over GKE's
// version 2 config drops GKE's CNI bin_dir and runc options; 2.3+ migrate
// each file on its own. The sidecar's MergedVersion says the same.
func TestVersion3DropInOverVersion2Main(t *testing.T) {
	_, v2s := containerdVersions()
	for _, v2 := range v2s {
		t.Run(v2, func(t *testing.T) {
			n := newNode(t, v2)
			main := n.fixture("gke-v2.toml")
			x := filepath.Join(n.dir, "etc", "x.toml")
			main = append([]byte("imports = ["+tomledit.String(x)+"]\n"), main...)
			n.catWrite(n.target.Config, main)
			bins := func() any { return dumpBinDirs(tomledit.Leaves(n.dump())) }
			h := DefaultHandler()
			n.catWrite(x, renderDropIn(h, 3, wanted(h, layout{v2: true})))
			lost := !n.version.MigratesEachFile()
			if got := bins(); reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) == lost {
				t.Fatalf("containerd %s, version 3 drop-in over a version 2 file: CNI bin dirs %v; expected them lost: %v", v2, got, lost)
			}
			files, err := LoadSet(n.target.Config, nil)
			if err != nil {
				t.Fatal(err)
			}
			if mv := MergedVersion(n.version, files); (mv != 2) != lost {
				t.Fatalf("MergedVersion = %d on %s, but containerd lost GKE's settings: %v", mv, v2, lost)
			}
			n.catWrite(x, renderDropIn(h, 2, wanted(h, layout{v2: true})))
			if got := bins(); !reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) {
				t.Fatalf("version 2 drop-in: bin_dirs = %v, want GKE's", got)
			}
		})
	}
}

// TestContainerd17ImageStreaming: a node pool with image streaming and
// GKE Sandbox keeps gcfs as its default snapshotter, its gVisor handler
// and its registry mirrors; only kata-remote uses kata-deploy's nydus.
func TestContainerd17ImageStreaming(t *testing.T) {
	v17, _ := containerdVersions()
	n := newNode(t, v17)
	n.gkeWrite("gke-v2-streaming.toml")
	n.start()
	if res := reconcileOK(t, n.remediator(nil)); !res.Converged || !res.Restarted {
		t.Fatalf("%+v", res)
	}
	h := DefaultHandler()
	assertLoaded(t, n, h)
	cfg, err := ParseStatusConfig(n.status())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Containerd.Runtimes["gvisor"]; !ok {
		t.Error("gVisor handler lost")
	}
	l := tomledit.Leaves(n.dump())
	for k, v := range map[string]any{
		`plugins."io.containerd.grpc.v1.cri".containerd.snapshotter`:                  "gcfs",
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor.runtime_type`: "io.containerd.runsc.v1",
		`plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io".endpoint`:   []any{"https://mirror.gcr.io", "https://registry-1.docker.io"},
		`proxy_plugins.gcfs.type`: "snapshot",
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.snapshotter`: kataDeployNydus,
		`plugins."io.containerd.grpc.v1.cri".containerd.discard_unpacked_layers`:          false,
	} {
		if got := l[k]; !reflect.DeepEqual(got, v) {
			t.Errorf("config dump: %s = %#v, want %#v", k, got, v)
		}
	}
}

// TestSidecarLoopRealContainerd runs the sidecar's watch loop against a
// running containerd 2.x: it converges on its own, and after a GKE
// rewrite followed by GKE's own containerd restart it restores the file
// and, once the settle time has passed, restarts containerd once more.
func TestSidecarLoopRealContainerd(t *testing.T) {
	_, v2s := containerdVersions()
	n := newNode(t, v2s[len(v2s)-1])
	n.gkeWrite("gke-v2.toml")
	n.start()
	cfg := n.config()
	cfg.Settle = 300 * time.Millisecond
	r := n.remediatorWith(cfg, Deps{})
	loop := startLoop(t, r, Loop{})
	loop.waitRestarts(t, 1)
	h := DefaultHandler()
	assertLoaded(t, n, h)

	n.gkeWrite("gke-v2.toml")
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	loop.waitRestarts(t, 2)
	assertLoaded(t, n, h)
	loop.stop(t)
}

// TestRuncFromDefaults: on containerd 1.7 a config whose runc comes from
// containerd's built-in defaults loses runc as soon as the file defines a
// runtimes table (the decoded map replaces the default one; containerd
// then refuses to start: "no corresponding runtime configured ...
// default_runtime_name = \"runc\""). The sidecar writes runc explicitly,
// with the values containerd itself reports, so containerd starts with
// both; and where that cannot be done safely it refuses, byte-identical.
func TestRuncFromDefaults(t *testing.T) {
	v17, _ := containerdVersions()
	n := newNode(t, v17)
	minimal := []byte("version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n  discard_unpacked_layers = true\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/home/kubernetes/bin\"\n  conf_dir = \"" + n.dir + "/cni\"\n")
	n.catWrite(n.target.Config, minimal)
	n.start()
	runcBefore := subtree(n.dump(), cat(cri17, []string{"containerd", "runtimes", "runc"}))
	if len(runcBefore) == 0 {
		t.Fatal("containerd 1.7 shows no built-in runc in the dump")
	}
	res := reconcileOK(t, n.remediator(nil))
	if !res.Restarted || !res.Converged {
		t.Fatalf("%+v: want runc made explicit, the handler added and containerd back", res)
	}
	if got := subtree(n.dump(), cat(cri17, []string{"containerd", "runtimes", "runc"})); !reflect.DeepEqual(got, runcBefore) {
		t.Errorf("runc after the change:\n%v\nwant containerd's own:\n%v", got, runcBefore)
	}
	cfg, err := ParseStatusConfig(n.status())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Containerd.Runtimes["runc"]; !ok {
		t.Error("running containerd lost runc")
	}
	if _, ok := cfg.Containerd.Runtimes["kata-remote"]; !ok {
		t.Error("running containerd has no kata-remote")
	}

	// An inline runtimes table cannot be extended key by key: refused.
	m := newNode(t, v17)
	inline := []byte("version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n  runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\n")
	m.catWrite(m.target.Config, inline)
	m.start()
	r := m.remediator(nil)
	_, err = r.Reconcile(context.Background())
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), m.target.Config) {
		t.Fatalf("inline runtimes table: err = %v, want a refusal naming the file", err)
	}
	if got := read(t, m.target.Config); got != string(inline) || m.restartCount() != 0 {
		t.Fatalf("refused config changed or containerd restarted (%d)", m.restartCount())
	}
}

func subtree(dump map[string]any, prefix []string) map[string]any {
	out := map[string]any{}
	for k, l := range flatten(dump) {
		if hasPrefix(l.parts, prefix) {
			out[k] = l.value
		}
	}
	return out
}
