//go:build linux

package remediate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// These tests run the real containerd releases GKE nodes run (1.7 on GKE
// ≤ 1.32, 2.x from 1.33), each on a GKE-like config, and ask containerd
// itself (CRI status of the running daemon, `config dump`) what it loaded.
// Each runs for the releases whose row has the facts it is about (suite,
// where), and expects what the row says.

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
func assertLoaded(t *testing.T, n *node, h configplan.Handler) {
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
// every setting the handler needs, where the node's release keeps it
// (its row's CRI tables), and GKE's own settings.
func assertDump(t *testing.T, n *node, h configplan.Handler) {
	t.Helper()
	dump := n.dump()
	cri := n.run.CRI
	rt := slices.Concat(cri.Runtimes, []string{h.Name})
	want := map[string]any{
		tomledit.FormatPath(slices.Concat(cri.Images, []string{"discard_unpacked_layers"})):      false,
		tomledit.FormatPath(slices.Concat(cri.Images, []string{"disable_snapshot_annotations"})): false,
		tomledit.FormatPath(slices.Concat(rt, []string{"runtime_type"})):                         h.RuntimeType,
		tomledit.FormatPath(slices.Concat(rt, []string{"runtime_path"})):                         h.RuntimePath,
		tomledit.FormatPath(slices.Concat(rt, []string{"privileged_without_host_devices"})):      true,
		tomledit.FormatPath(slices.Concat(rt, []string{"pod_annotations"})):                      strs(h.PodAnnotations),
		tomledit.FormatPath(slices.Concat(rt, []string{"container_annotations"})):                strs(h.ContainerAnnotations),
		tomledit.FormatPath(slices.Concat(rt, []string{"snapshotter"})):                          h.Snapshotter,
		tomledit.FormatPath(slices.Concat(rt, []string{"options", "ConfigPath"})):                h.ConfigPath,
	}
	if h.SnapshotterAddress != "" {
		want[tomledit.FormatPath([]string{"proxy_plugins", h.Snapshotter, "type"})] = "snapshot"
		want[tomledit.FormatPath([]string{"proxy_plugins", h.Snapshotter, "address"})] = h.SnapshotterAddress
	}
	if h.SnapshotterAddress != "" && h.ExportsRoot != "" {
		want[tomledit.FormatPath([]string{"proxy_plugins", h.Snapshotter, "exports", "root"})] = h.ExportsRoot
	}
	if cri.RuntimePlatforms != nil {
		want[tomledit.FormatPath(slices.Concat(cri.RuntimePlatforms, []string{h.Name, "snapshotter"}))] = h.Snapshotter
	}
	want[tomledit.FormatPath(slices.Concat(cri.Runtimes, []string{"runc", "options", "SystemdCgroup"}))] = true
	leaves := tomledit.Leaves(dump)
	if reflect.DeepEqual(cri, containerdrelease.CRIConfigVersion2) {
		want[`plugins."io.containerd.grpc.v1.cri".cni.bin_dir`] = "/home/kubernetes/bin"
		want[`plugins."io.containerd.grpc.v1.cri".sandbox_image`] = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
	} else {
		if got := dumpBinDirs(leaves); !reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) {
			t.Errorf("config dump: CNI bin dirs %#v, want GKE's /home/kubernetes/bin", got)
		}
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

// TestInPlace: on a release whose merge replaces whole plugin tables (1.7)
// the handler is edited into GKE's config.toml, comments kept, and no
// drop-in is written.
func TestInPlace(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) { testInPlace(t, rel) })
	}
}

func testInPlace(t *testing.T, rel release) {
	n := newNode(t, rel)
	orig := n.gkeWrite("gke-v2.toml")
	n.start()
	r := n.remediator(nil)

	res := reconcileOK(t, r)
	if !res.Restarted || !res.Converged || len(res.Wrote) != 1 || res.Wrote[0] != n.target.Config || res.Plan.Mode != containerdrelease.InPlace {
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
		t.Errorf("a drop-in was written for containerd %s, whose merge would replace GKE's CRI table", rel.Version)
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

// TestDropIn: on a release that deep-merges imported plugin tables (2.x)
// the handler goes into the sidecar's drop-in, imported by literal path,
// for GKE's file in every config version the release reads.
func TestDropIn(t *testing.T) {
	for _, rel := range where(dropIn) {
		for version := 2; version <= rel.Run.MaxConfigVersion; version++ {
			fixture := fmt.Sprintf("gke-v%d.toml", version)
			t.Run(rel.Version+"/"+fixture, func(t *testing.T) { testDropIn(t, rel, fixture) })
		}
	}
}

func testDropIn(t *testing.T, rel release, fixture string) {
	n := newNode(t, rel)
	orig := n.gkeWrite(fixture)
	n.start()
	r := n.remediator(nil)
	res := reconcileOK(t, r)
	if !res.Restarted || !res.Converged || len(res.Wrote) != 2 || res.Plan.Mode != containerdrelease.DropIn {
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
	// The drop-in has the main file's version, or 3 over a version 2 file
	// on a release that migrates each file (TestVersion3DropInOverVersion2Main).
	drop := []byte(read(t, n.target.DropIn()))
	want := mustVersion(t, orig).(int64)
	if n.run.MigratesEachFile && want < 3 {
		want = 3
	}
	if v := mustVersion(t, drop); v != want {
		t.Errorf("drop-in version %v, want %d (main file's %v)", v, want, mustVersion(t, orig))
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

// TestUpgradeInPlaceToDropIn is GKE 1.32 → 1.33: the node comes back
// with the next release, 2.0 instead of 1.7 (the newest in-place release
// configured, the oldest drop-in one), and a fresh GKE config.
func TestUpgradeInPlaceToDropIn(t *testing.T) {
	from, to := where(inPlace), first(t, dropIn, "a drop-in release")
	if len(from) == 0 {
		t.Skip("no in-place release configured")
	}
	n := newNode(t, from[len(from)-1])
	n.gkeWrite("gke-v2.toml")
	n.start()
	if res := reconcileOK(t, n.remediator(nil)); !res.Converged || res.Plan.Mode != containerdrelease.InPlace {
		t.Fatalf("on %s: %+v", from[len(from)-1].Version, res)
	}
	h := DefaultHandler()
	assertLoaded(t, n, h)

	n.gkeWrite("gke-v2.toml")
	n.swap(to)
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := reconcileOK(t, n.remediator(nil))
	if !res.Converged || !res.Restarted || res.Plan.Mode != containerdrelease.DropIn {
		t.Fatalf("after the upgrade to %s: %+v, want the drop-in layout and a restart", to.Version, res)
	}
	assertLoaded(t, n, h)
	assertDump(t, n, h)
}

// TestVersion3DropInOverVersion2Main pins the containerd behaviour the
// drop-in's version follows: a release that does not migrate each file
// (2.0–2.2) merges files before migrating and takes the version of the last
// file merged, so a version 3 drop-in over GKE's version 2 config drops
// GKE's CNI bin_dir and runc options; one that does (2.3+) migrates each
// file on its own. configplan's MergedVersion says the same, from the row.
func TestVersion3DropInOverVersion2Main(t *testing.T) {
	for _, rel := range where(dropIn) {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			main := n.fixture("gke-v2.toml")
			x := filepath.Join(n.dir, "etc", "x.toml")
			main = append([]byte("imports = ["+tomledit.String(x)+"]\n"), main...)
			n.catWrite(n.target.Config, main)
			bins := func() any { return dumpBinDirs(tomledit.Leaves(n.dump())) }
			h := DefaultHandler()
			n.catWrite(x, handlerDropIn(h, 3))
			lost := !n.run.MigratesEachFile
			if got := bins(); reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) == lost {
				t.Fatalf("containerd %s, version 3 drop-in over a version 2 file: CNI bin dirs %v; expected them lost: %v", rel.Version, got, lost)
			}
			files, err := configplan.LoadSet(n.target.Config, nil)
			if err != nil {
				t.Fatal(err)
			}
			if mv := configplan.MergedVersion(n.run, files); (mv != 2) != lost {
				t.Fatalf("MergedVersion = %d on %s, but containerd lost GKE's settings: %v", mv, rel.Version, lost)
			}
			n.catWrite(x, handlerDropIn(h, 2))
			if got := bins(); !reflect.DeepEqual(got, []any{"/home/kubernetes/bin"}) {
				t.Fatalf("version 2 drop-in: bin_dirs = %v, want GKE's", got)
			}
		})
	}
}

// handlerDropIn is a drop-in of config version version holding h's runtime
// and the image settings, in that version's CRI layout.
func handlerDropIn(h configplan.Handler, version int) []byte {
	cri := containerdrelease.FileCRI(version)
	var b strings.Builder
	fmt.Fprintf(&b, "version = %d\n\n[%s]\n", version, tomledit.FormatPath(slices.Concat(cri.Runtimes, []string{h.Name})))
	fmt.Fprintf(&b, "  runtime_type = %s\n  runtime_path = %s\n  snapshotter = %s\n", tomledit.String(h.RuntimeType), tomledit.String(h.RuntimePath), tomledit.String(h.Snapshotter))
	fmt.Fprintf(&b, "\n[%s]\n  discard_unpacked_layers = false\n", tomledit.FormatPath(cri.Images))
	return []byte(b.String())
}

// TestImageStreamingInPlace: a node pool with image streaming and GKE
// Sandbox (1.7's file, edited in place) keeps gcfs as its default
// snapshotter, its gVisor handler and its registry mirrors; only
// kata-remote uses kata-deploy's nydus.
func TestImageStreamingInPlace(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) { testImageStreamingInPlace(t, rel) })
	}
}

func testImageStreamingInPlace(t *testing.T, rel release) {
	n := newNode(t, rel)
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
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.snapshotter`: configplan.KataDeployNydus,
		`plugins."io.containerd.grpc.v1.cri".containerd.discard_unpacked_layers`:          false,
	} {
		if got := l[k]; !reflect.DeepEqual(got, v) {
			t.Errorf("config dump: %s = %#v, want %#v", k, got, v)
		}
	}
}

// TestSidecarLoopRealContainerd runs the sidecar's watch loop against the
// newest running containerd: it converges on its own, and after a GKE
// rewrite followed by GKE's own containerd restart it restores the file
// and, once the settle time has passed, restarts containerd once more.
func TestSidecarLoopRealContainerd(t *testing.T) {
	n := newNode(t, newest())
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

// TestRuncFromDefaults: on a release edited in place (1.7) a config whose runc comes from
// containerd's built-in defaults loses runc as soon as the file defines a
// runtimes table (the decoded map replaces the default one; containerd
// then refuses to start: "no corresponding runtime configured ...
// default_runtime_name = \"runc\""). The sidecar writes runc explicitly,
// with the values containerd itself reports, so containerd starts with
// both; and where that cannot be done safely it refuses, byte-identical.
func TestRuncFromDefaults(t *testing.T) {
	for _, rel := range where(inPlace) {
		t.Run(rel.Version, func(t *testing.T) { testRuncFromDefaults(t, rel) })
	}
}

func testRuncFromDefaults(t *testing.T, rel release) {
	n := newNode(t, rel)
	minimal := []byte("version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n  discard_unpacked_layers = true\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/home/kubernetes/bin\"\n  conf_dir = \"" + n.dir + "/cni\"\n")
	n.catWrite(n.target.Config, minimal)
	n.start()
	runc := slices.Concat(n.run.CRI.Runtimes, []string{"runc"})
	runcBefore, ok := at(n.dump(), runc...)
	if !ok {
		t.Fatalf("containerd %s shows no built-in runc in the dump", rel.Version)
	}
	res := reconcileOK(t, n.remediator(nil))
	if !res.Restarted || !res.Converged {
		t.Fatalf("%+v: want runc made explicit, the handler added and containerd back", res)
	}
	if got, _ := at(n.dump(), runc...); !reflect.DeepEqual(got, runcBefore) {
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
	m := newNode(t, rel)
	inline := []byte("version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n  runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\n")
	m.catWrite(m.target.Config, inline)
	m.start()
	r := m.remediator(nil)
	_, err = r.Reconcile(context.Background())
	if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), m.target.Config) {
		t.Fatalf("inline runtimes table: err = %v, want a refusal naming the file", err)
	}
	if got := read(t, m.target.Config); got != string(inline) || m.restartCount() != 0 {
		t.Fatalf("refused config changed or containerd restarted (%d)", m.restartCount())
	}
}
