//go:build linux

package remediate

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
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
// handler is loaded with the nydus snapshotter, layers are kept (1.7
// reports it there) and GKE's CNI bin_dir survived.
func assertLoaded(t *testing.T, n *node) {
	t.Helper()
	resp := n.status()
	cfg, err := ParseStatusConfig(resp)
	if err != nil {
		t.Fatal(err)
	}
	h := DefaultHandler()
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

// assertDump checks the merged config containerd computes from the files.
func assertDump(t *testing.T, n *node, major int) {
	t.Helper()
	doc, err := tomledit.Decode([]byte(n.configDump()))
	if err != nil {
		t.Fatalf("config dump does not parse: %v", err)
	}
	l := tomledit.Leaves(doc)
	h := DefaultHandler()
	want := map[string]any{}
	if major < 2 {
		rt := `plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.`
		want[rt+"snapshotter"] = h.Snapshotter
		want[rt+"runtime_type"] = h.RuntimeType
		want[rt+"options.ConfigPath"] = h.ConfigPath
		want[`plugins."io.containerd.grpc.v1.cri".containerd.discard_unpacked_layers`] = false
		want[`plugins."io.containerd.grpc.v1.cri".containerd.disable_snapshot_annotations`] = false
		want[`plugins."io.containerd.grpc.v1.cri".cni.bin_dir`] = "/home/kubernetes/bin"
		want[`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup`] = true
	} else {
		rt := `plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata-remote.`
		want[rt+"snapshotter"] = h.Snapshotter
		want[rt+"runtime_type"] = h.RuntimeType
		want[rt+"options.ConfigPath"] = h.ConfigPath
		want[`plugins."io.containerd.cri.v1.images".runtime_platforms.kata-remote.snapshotter`] = h.Snapshotter
		want[`plugins."io.containerd.cri.v1.images".discard_unpacked_layers`] = false
		want[`plugins."io.containerd.cri.v1.images".disable_snapshot_annotations`] = false
		want[`plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options.SystemdCgroup`] = true
	}
	want["proxy_plugins.nydus.address"] = h.SnapshotterAddress
	want["proxy_plugins.nydus.type"] = "snapshot"
	if major >= 2 {
		if got := dumpBinDirs(l); !reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) {
			t.Errorf("config dump: CNI bin dirs %#v, want GKE's /home/kubernetes/bin", got)
		}
	}
	for k, v := range want {
		if got := l[k]; !reflect.DeepEqual(got, v) {
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

func TestContainerd17InPlace(t *testing.T) {
	v17, _ := containerdVersions()
	n := newNode(t, containerdBinary(t, v17))
	orig := n.gkeWrite("gke-v2.toml")
	n.start()
	r := n.remediator(nil)

	res := reconcileOK(t, r)
	if !res.Restarted || !res.Converged || len(res.Wrote) != 1 || res.Wrote[0] != n.target.Config || res.Plan.Mode != "in-place" {
		t.Fatalf("first reconcile: %+v, want config.toml written in place and containerd restarted", res)
	}
	assertLoaded(t, n)
	assertDump(t, n, 1)
	got, _ := os.ReadFile(n.target.Config)
	for _, line := range strings.Split(string(orig), "\n") {
		if strings.HasPrefix(line, "#") && !strings.Contains(string(got), line) {
			t.Errorf("comment %q lost", line)
		}
	}
	if bak, _ := os.ReadFile(n.target.Config + BackupSuffix); string(bak) != string(orig) {
		t.Errorf("backup does not hold GKE's original")
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
	assertLoaded(t, n)
	if bak, _ := os.ReadFile(n.target.Config + BackupSuffix); string(bak) != string(orig) {
		t.Errorf("backup overwritten; it must keep the first original")
	}
}

func TestContainerd2DropIn(t *testing.T) {
	_, v2s := containerdVersions()
	for _, v2 := range v2s {
		fixtures := []string{"gke-v2.toml", "gke-v3.toml"}
		if run, err := ParseRuntimeVersion(v2); err == nil && run.MaxSchema() >= 4 {
			fixtures = append(fixtures, "gke-v4.toml")
		}
		for _, fixture := range fixtures {
			t.Run(v2+"/"+fixture, func(t *testing.T) {
				testContainerd2DropIn(t, containerdBinary(t, v2), fixture)
			})
		}
	}
}

func testContainerd2DropIn(t *testing.T, bin, fixture string) {
	n := newNode(t, bin)
	orig := n.gkeWrite(fixture)
	n.start()
	r := n.remediator(nil)
	res := reconcileOK(t, r)
	if !res.Restarted || !res.Converged || len(res.Wrote) != 2 || res.Plan.Mode != "drop-in" {
		t.Fatalf("first reconcile: %+v, want drop-in and imports written, containerd restarted", res)
	}
	assertLoaded(t, n)
	assertDump(t, n, 2)

	// The main file changed only by the imports glob.
	got, _ := os.ReadFile(n.target.Config)
	if err := tomledit.Verify(orig, got, []tomledit.Change{{Key: "imports", Value: []any{n.target.Glob()}}}); err != nil {
		t.Errorf("main file: %v", err)
	}
	drop, _ := os.ReadFile(n.target.DropIn())
	doc, _ := tomledit.Decode(drop)
	if doc["version"] != doc["version"] || doc["version"] != mustVersion(t, orig) {
		t.Errorf("drop-in version %v, want the main file's %v", doc["version"], mustVersion(t, orig))
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
	assertLoaded(t, n)
}

func mustVersion(t *testing.T, data []byte) any {
	t.Helper()
	doc, err := tomledit.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return doc["version"]
}

// TestUpgrade17To2 is GKE 1.32 → 1.33: the node comes back with
// containerd 2.x and a fresh GKE config.
func TestUpgrade17To2(t *testing.T) {
	v17, v2s := containerdVersions()
	bin17, bin2 := containerdBinary(t, v17), containerdBinary(t, v2s[0])
	n := newNode(t, bin17)
	n.gkeWrite("gke-v2.toml")
	n.start()
	r := n.remediator(nil)
	if res := reconcileOK(t, r); !res.Converged || res.Plan.Mode != "in-place" {
		t.Fatalf("on 1.7: %+v", res)
	}
	assertLoaded(t, n)

	n.gkeWrite("gke-v2.toml")
	n.swap(bin2)
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := reconcileOK(t, r)
	if !res.Converged || !res.Restarted || res.Plan.Mode != "drop-in" {
		t.Fatalf("after the upgrade to 2.x: %+v, want the drop-in layout and a restart", res)
	}
	assertLoaded(t, n)
	assertDump(t, n, 2)
}

// TestVersion3DropInOverVersion2Main pins the containerd behaviour the
// drop-in's version follows: 2.x merges files before migrating and takes
// the version of the last file merged, so a version 3 drop-in over GKE's
// version 2 config drops GKE's CNI bin_dir and runc options.
func TestVersion3DropInOverVersion2Main(t *testing.T) {
	_, v2s := containerdVersions()
	for _, v2 := range v2s {
		t.Run(v2, func(t *testing.T) { testVersion3DropInOverVersion2Main(t, v2) })
	}
}

func testVersion3DropInOverVersion2Main(t *testing.T, v2 string) {
	n := newNode(t, containerdBinary(t, v2))
	main := n.gkeWrite("gke-v2.toml")
	main = append([]byte("imports = ["+tomledit.String(n.target.Glob())+"]\n"), main...)
	if err := os.WriteFile(n.target.Config, main, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.target.DropInDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bins := func() any {
		doc, err := tomledit.Decode([]byte(n.configDump()))
		if err != nil {
			t.Fatal(err)
		}
		return dumpBinDirs(tomledit.Leaves(doc))
	}
	if err := os.WriteFile(filepath.Join(n.target.DropInDir, "x.toml"), RenderDropIn(DefaultHandler(), 3), 0o644); err != nil {
		t.Fatal(err)
	}
	// containerd 2.0–2.2 (config version 3) skip the migration of the
	// merged config; 2.3+ (version 4) migrate a merged version 3 again and
	// keep GKE's settings. Matching versions is right for both.
	lost := n.version.MaxSchema() == 3
	if got := bins(); reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) == lost {
		t.Fatalf("containerd %s, version 3 drop-in over a version 2 file: CNI bin dirs %v; expected them lost: %v", v2, got, lost)
	}
	if err := os.WriteFile(filepath.Join(n.target.DropInDir, "x.toml"), RenderDropIn(DefaultHandler(), 2), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := bins(); !reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) {
		t.Fatalf("version 2 drop-in: bin_dirs = %v, want GKE's", got)
	}
}

// TestContainerd17ImageStreaming: a node pool with image streaming and
// GKE Sandbox keeps gcfs as its default snapshotter, its gVisor handler
// and its registry mirrors; only kata-remote uses nydus.
func TestContainerd17ImageStreaming(t *testing.T) {
	v17, _ := containerdVersions()
	n := newNode(t, containerdBinary(t, v17))
	n.gkeWrite("gke-v2-streaming.toml")
	n.start()
	if res := reconcileOK(t, n.remediator(nil)); !res.Converged || !res.Restarted {
		t.Fatalf("%+v", res)
	}
	assertLoaded(t, n)
	cfg, err := ParseStatusConfig(n.status())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Containerd.Runtimes["gvisor"]; !ok {
		t.Error("gVisor handler lost")
	}
	doc, err := tomledit.Decode([]byte(n.configDump()))
	if err != nil {
		t.Fatal(err)
	}
	l := tomledit.Leaves(doc)
	for k, v := range map[string]any{
		`plugins."io.containerd.grpc.v1.cri".containerd.snapshotter`:                  "gcfs",
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor.runtime_type`: "io.containerd.runsc.v1",
		`plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io".endpoint`:   []any{"https://mirror.gcr.io", "https://registry-1.docker.io"},
		`proxy_plugins.gcfs.type`: "snapshot",
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.snapshotter`: "nydus",
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
	n := newNode(t, containerdBinary(t, v2s[len(v2s)-1]))
	n.gkeWrite("gke-v2.toml")
	n.start()
	r, err := New(Config{
		Handler: DefaultHandler(), Target: n.target, Host: Host{Root: n.host},
		Lock: HostLock{Path: filepath.Join(n.dir, "lock")}, Settle: 300 * time.Millisecond,
	}, Deps{Probe: CRI{Socket: n.socket}, Restarter: n, Budget: restart.NewBudget(time.Nanosecond, 3)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	restarts := 0
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, Loop{Reconciled: func(res Result, err error) {
			mu.Lock()
			if res.Restarted {
				restarts++
			}
			mu.Unlock()
		}})
	}()
	waitReady := func(want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			got := restarts
			mu.Unlock()
			if got == want && r.Ready() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not converged with %d restart(s) after 60s (restarts %d)", want, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReady(1)
	assertLoaded(t, n)

	n.gkeWrite("gke-v2.toml")
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReady(2)
	assertLoaded(t, n)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
