package remediate

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/nodeevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
	corev1 "k8s.io/api/core/v1"
)

// kataHost is kata-deploy 4.x's layout of the remote shim under a fixture
// directory: the per-shim copy of the configuration, the extracted file
// turned into a relative symlink to it, and config.d beside the copy
// (artifacts/install.rs setup_runtime_directory at 4.0.0 and 4.1.0).
type kataHost struct {
	cfg        Config
	base, conf string
	events     *[]*corev1.Event
}

const kataBase = "[hypervisor.remote]\nremote_hypervisor_socket = \"/run/peerpod/hypervisor.sock\"\n\n[runtime]\nenable_debug = false\ncreate_container_timeout = 60\n"

func newKataHost(t *testing.T, timeout time.Duration) *kataHost {
	t.Helper()
	dir := t.TempDir()
	k := &kataHost{cfg: fixtureConfig(dir)}
	k.cfg.CreateContainerTimeout = timeout
	share := filepath.Join(k.cfg.KataDir, "share", "defaults", "kata-containers")
	k.base = filepath.Join(share, "runtimes", "remote", "configuration-remote.toml")
	k.conf = filepath.Join(share, "runtimes", "remote", "config.d")
	if err := os.MkdirAll(k.conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.base, []byte(kataBase), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("runtimes/remote/configuration-remote.toml", filepath.Join(share, "configuration-remote.toml")); err != nil {
		t.Fatal(err)
	}
	var evs []*corev1.Event
	k.events = &evs
	return k
}

// remediator is one without containerd: the timeout pass is file-level.
func (k *kataHost) remediator(t *testing.T) *Remediator {
	t.Helper()
	r, err := New(k.cfg, Deps{Events: Events{Client: &fakeAPI{events: k.events}, NodeName: "gke-pool-1-abc"}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (k *kataHost) reasons() []string {
	var out []string
	for _, e := range *k.events {
		out = append(out, e.Type+" "+e.Reason)
	}
	return out
}

func (k *kataHost) dropIn() string { return filepath.Join(k.conf, kataDropInName) }

func (k *kataHost) write(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(k.conf, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCreateContainerTimeoutWrittenAndEffective(t *testing.T) {
	k := newKataHost(t, 1200*time.Second)
	// kata-deploy's own drop-ins and a user's override from shims.remote.dropIn.
	k.write(t, "20-debug.toml", "[runtime]\nenable_debug = true\n")
	k.write(t, "50-user-overrides.toml", "[runtime]\ncreate_container_timeout = 3000\n")
	r := k.remediator(t)
	ctx := context.Background()
	if err := r.keepTimeout(ctx, k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(k.dropIn())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), kataDropInMarker) || !strings.Contains(string(got), "[runtime]\ncreate_container_timeout = 1200\n") {
		t.Fatalf("drop-in:\n%s", got)
	}
	// Ours sorts after every name kata-deploy writes: the admin's value wins.
	secs, from, set, err := EffectiveTimeout(kataFiles{Base: k.base, ConfD: k.conf})
	if err != nil || !set || secs != 1200 || from != k.dropIn() {
		t.Fatalf("effective = %d from %s (set %v, err %v), want 1200 from our drop-in", secs, from, set, err)
	}
	if got := k.reasons(); len(got) != 1 || got[0] != "Normal "+nodeevents.CreateContainerTimeoutSet {
		t.Fatalf("events %v, want one Normal %s", got, nodeevents.CreateContainerTimeoutSet)
	}
	// The containerd side is not converged yet: not ready, and says so.
	if why := r.ReadyReason(); !strings.Contains(why, "containerd") {
		t.Fatalf("ReadyReason = %q, want the containerd side named", why)
	}
	r.setReady(true)
	if why := r.ReadyReason(); why != "" {
		t.Fatalf("ReadyReason = %q, want ready", why)
	}
	// A second pass changes nothing and reports nothing.
	st, _ := os.Stat(k.dropIn())
	if err := r.keepTimeout(ctx, k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(k.dropIn()); !st2.ModTime().Equal(st.ModTime()) || len(*k.events) != 1 {
		t.Fatal("an idle pass rewrote the drop-in or reported")
	}
	// Only our file was written.
	for name, want := range map[string]string{"20-debug.toml": "[runtime]\nenable_debug = true\n", "50-user-overrides.toml": "[runtime]\ncreate_container_timeout = 3000\n"} {
		if b, _ := os.ReadFile(filepath.Join(k.conf, name)); string(b) != want {
			t.Errorf("%s changed:\n%s", name, b)
		}
	}
	if b, _ := os.ReadFile(k.base); string(b) != kataBase {
		t.Error("base configuration changed")
	}
}

func TestCreateContainerTimeoutLaterFileLowersIt(t *testing.T) {
	k := newKataHost(t, 1200*time.Second)
	k.write(t, "99-zz.toml", "[runtime]\ncreate_container_timeout = 30\n")
	r := k.remediator(t)
	r.setReady(true)
	if err := r.keepTimeout(context.Background(), k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	why := r.ReadyReason()
	if !strings.Contains(why, "30s") || !strings.Contains(why, "99-zz.toml") || !strings.Contains(why, "--create-container-timeout=20m0s") || strings.Contains(why, "\n") {
		t.Fatalf("ReadyReason = %q, want one line naming 30s, the file and the flag", why)
	}
	if got := k.reasons(); len(got) != 2 || got[1] != "Warning "+nodeevents.CreateContainerTimeoutFailed {
		t.Fatalf("events %v, want the write then a Warning %s", got, nodeevents.CreateContainerTimeoutFailed)
	}
}

func TestCreateContainerTimeoutUnparsableLeftAlone(t *testing.T) {
	k := newKataHost(t, 1200*time.Second)
	bad := "[runtime\ncreate_container_timeout = 5\n"
	k.write(t, kataDropInName, bad)
	r := k.remediator(t)
	r.setReady(true)
	if err := r.keepTimeout(context.Background(), k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(k.dropIn()); string(b) != bad {
		t.Fatalf("unparsable drop-in rewritten:\n%s", b)
	}
	if why := r.ReadyReason(); !strings.Contains(why, "does not parse") {
		t.Fatalf("ReadyReason = %q", why)
	}
	// Another file kata would fail on: ours is written, that one is left
	// byte-identical, and the node is not ready.
	k2 := newKataHost(t, 1200*time.Second)
	k2.write(t, "50-user-overrides.toml", bad)
	r2 := k2.remediator(t)
	r2.setReady(true)
	if err := r2.keepTimeout(context.Background(), k2.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(k2.conf, "50-user-overrides.toml")); string(b) != bad {
		t.Fatal("another file changed")
	}
	if why := r2.ReadyReason(); !strings.Contains(why, "kata would fail to decode") {
		t.Fatalf("ReadyReason = %q", why)
	}
}

// A node reset (or kata-deploy's re-run) removes or changes the drop-in:
// the watch loop puts it back and records an Event.
func TestCreateContainerTimeoutRestoredAfterReset(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	f.probe.state = loadedState()
	k := newKataHost(t, 0)
	// The fixture's host: replace its stand-in with kata-deploy's layout.
	f.cfg.KataDir, f.cfg.Host.Root = k.cfg.KataDir, k.cfg.Host.Root
	testKataHost(t, f.cfg.Host.Root)
	os.WriteFile(k.base, []byte(kataBase), 0o644)
	f.cfg.CreateContainerTimeout = 1200 * time.Second
	r := f.remediator(t, Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := r.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, Loop{Debounce: 20 * time.Millisecond, Resync: time.Hour}) }()
	dropIn := k.dropIn()
	want := kataDropIn(1200 * time.Second)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Minute) // far beyond the slowest machine: it ends on the condition
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (ready: %q; events %v)", what, r.ReadyReason(), f.reasons())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	hasDropIn := func() bool { b, _ := os.ReadFile(dropIn); return string(b) == string(want) }
	countSet := func() int {
		n := 0
		for _, e := range f.reasons() {
			if e == nodeevents.CreateContainerTimeoutSet {
				n++
			}
		}
		return n
	}
	waitFor("the drop-in and readiness", func() bool { return hasDropIn() && r.Ready() })
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != 200 {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	// Reset: the file is gone. No resync is due for an hour: the watch on
	// config.d brings the pass.
	os.Remove(dropIn)
	waitFor("the drop-in restored", func() bool { return hasDropIn() && countSet() == 2 })
	// Changed to a lower value: put back too.
	os.WriteFile(dropIn, []byte("[runtime]\ncreate_container_timeout = 60\n"), 0o644)
	waitFor("the drop-in restored again", func() bool { return hasDropIn() && countSet() == 3 })
	// A later file lowers the effective value: 503 with the reason.
	os.WriteFile(filepath.Join(k.conf, "95-other.toml"), []byte("[runtime]\ncreate_container_timeout = 60\n"), 0o644)
	waitFor("not ready", func() bool { return !r.Ready() })
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "95-other.toml") || strings.Count(body, "\n") != 1 {
		t.Fatalf("/readyz = %d %q, want 503 and one line naming 95-other.toml", code, body)
	}
	os.Remove(filepath.Join(k.conf, "95-other.toml"))
	waitFor("ready again", r.Ready)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Uninstall removes it, and only it.
	res, err := r.Cleanup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dropIn); !os.IsNotExist(err) {
		t.Fatalf("drop-in left after cleanup (%v); result %+v", err, res)
	}
	if !strings.Contains(strings.Join(res.Removed, " "), kataDropInName) {
		t.Fatalf("cleanup result %+v does not name the drop-in", res)
	}
	if b, _ := os.ReadFile(k.base); string(b) != kataBase {
		t.Fatal("base configuration changed")
	}
}

func TestCreateContainerTimeoutZeroAndCleanup(t *testing.T) {
	k := newKataHost(t, 1200*time.Second)
	r := k.remediator(t)
	if err := r.keepTimeout(context.Background(), k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	// 0: the sidecar sets nothing, and the drop-in an earlier setting left goes.
	k.cfg.CreateContainerTimeout = 0
	r0 := k.remediator(t)
	r0.setReady(true)
	if err := r0.keepTimeout(context.Background(), k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(k.dropIn()); !os.IsNotExist(err) {
		t.Fatal("drop-in kept with --create-container-timeout=0")
	}
	if why := r0.ReadyReason(); why != "" {
		t.Fatalf("ReadyReason = %q with 0, want ready", why)
	}
	// A file at our name that is not ours is never removed.
	theirs := "[runtime]\ncreate_container_timeout = 99\n"
	k.write(t, kataDropInName, theirs)
	if err := r0.keepTimeout(context.Background(), k.cfg.Handler); err != nil {
		t.Fatal(err)
	}
	res, err := r0.Cleanup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(k.dropIn()); string(b) != theirs || len(res.Kept) != 1 {
		t.Fatalf("a file not ours was touched, or not reported kept: %+v", res)
	}
}

func TestCreateContainerTimeoutFlag(t *testing.T) {
	c, err := startup.Load()
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.InstallCreateContainerTimeout(); want <= 0 || o.cfg.CreateContainerTimeout != want {
		t.Fatalf("default --create-container-timeout %s, want the catalogue's %s", o.cfg.CreateContainerTimeout, want)
	}
	if o, err := parseFlags([]string{"--create-container-timeout=0"}, io.Discard); err != nil || o.cfg.CreateContainerTimeout != 0 {
		t.Fatalf("0: %v", err)
	}
	for _, bad := range []string{"1.5s", "-1s", "20"} {
		if _, err := parseFlags([]string{"--create-container-timeout=" + bad}, io.Discard); err == nil {
			t.Errorf("--create-container-timeout=%s accepted", bad)
		}
	}
}

// The configuration named through kata-deploy's symlink resolves to the
// per-shim directory, as the shim resolves it.
func TestKataPathsFollowTheSymlink(t *testing.T) {
	k := newKataHost(t, time.Second)
	r := k.remediator(t)
	h := k.cfg.Handler
	h.ConfigPath = "/opt/kata/share/defaults/kata-containers/configuration-remote.toml"
	kf, err := r.kataPaths(h)
	if err != nil || kf.ConfD != k.conf {
		t.Fatalf("kataPaths = %+v, %v; want config.d %s", kf, err, k.conf)
	}
	h.ConfigPath = "/etc/kata/configuration-remote.toml"
	if _, err := r.kataPaths(h); err == nil {
		t.Fatal("a configuration outside /opt/kata accepted")
	}
}
