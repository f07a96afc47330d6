package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Unit tests: no containerd, a Probe and Restarter of the test's own.

type fakeProbe struct {
	mu      sync.Mutex
	version string
	state   HandlerState
	err     error
}

func (p *fakeProbe) RuntimeVersion(context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version, p.err
}

func (p *fakeProbe) Handler(context.Context, string) (HandlerState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state, p.err
}

type fakeRestarter struct {
	mu        sync.Mutex
	started   time.Time
	calls     int
	err       error
	onRestart func()
}

func (f *fakeRestarter) StartedAt(context.Context) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started, nil
}

func (f *fakeRestarter) Restart(context.Context) error {
	f.mu.Lock()
	f.calls++
	err := f.err
	if err == nil {
		f.started = time.Now()
	}
	cb := f.onRestart
	f.mu.Unlock()
	if cb != nil && err == nil {
		cb()
	}
	return err
}

// fakeAPI records Events; the real client is tested against a real API
// server (internal/install).
type fakeAPI struct{ events *[]*corev1.Event }

func (f *fakeAPI) Node(context.Context, string) (*corev1.Node, error) {
	return nil, errors.New("no nodes here")
}

func (f *fakeAPI) CreateEvent(_ context.Context, ev *corev1.Event) error {
	*f.events = append(*f.events, ev)
	return nil
}

func (f *fakeAPI) DaemonSet(context.Context, string, string) (*metav1.PartialObjectMetadata, error) {
	return nil, errors.New("no daemonsets here")
}

type fixture struct {
	rel    release // the release the probe reports, by default
	dir    string
	cfg    Config
	probe  *fakeProbe
	rs     *fakeRestarter
	events *[]*corev1.Event
	core   *fakeAPI
}

// newFixture is a node with main as its config.toml, a fake probe and
// restarter, and the real containerd of an in-place release (1.7) for the
// check: the unit tests' GKE file is edited in place.
func newFixture(t testing.TB, main string) *fixture {
	t.Helper()
	return newFixtureOn(t, first(t, inPlace, "edited in place"), main)
}

// newFixtureOn is newFixture with the probe reporting rel.
func newFixtureOn(t testing.TB, rel release, main string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{rel: rel, dir: dir, probe: &fakeProbe{version: strings.TrimPrefix(rel.Version, "v")}, rs: &fakeRestarter{started: time.Now().Add(-time.Hour)}}
	f.cfg = fixtureConfig(dir)
	testKataHost(t, f.cfg.Host.Root)
	os.MkdirAll(filepath.Dir(f.cfg.Target.Config), 0o755)
	if main != "" {
		os.WriteFile(f.cfg.Target.Config, []byte(main), 0o644)
	}
	// Loaded once the restarter ran: what a real containerd does.
	f.rs.onRestart = func() {
		f.probe.mu.Lock()
		f.probe.state = loadedState()
		f.probe.mu.Unlock()
	}
	f.probe.state = HandlerState{Known: true}
	var evs []*corev1.Event
	f.events = &evs
	f.core = &fakeAPI{events: &evs}
	return f
}

// fixtureConfig is the remediator configuration of a fixture in dir.
func fixtureConfig(dir string) Config {
	return Config{
		Handler:       DefaultHandler(),
		Target:        configplan.Target{Config: filepath.Join(dir, "etc", "config.toml"), DropInDir: filepath.Join(dir, "etc", "caa-gcp-t4"), DropInName: "kata-remote.toml"},
		Host:          Host{Root: filepath.Join(dir, "host")},
		KataDir:       filepath.Join(dir, "host", "opt", "kata"),
		Lock:          HostLock{Path: filepath.Join(dir, "lock")},
		Scratch:       dir,
		VerifyTimeout: 2 * time.Second,
		Releases:      suiteTable(),
	}
}

func (f *fixture) remediator(t testing.TB, d Deps) *Remediator {
	t.Helper()
	if d.Probe == nil {
		d.Probe = f.probe
	}
	if d.Restarter == nil {
		d.Restarter = f.rs
	}
	if d.Events.Client == nil {
		d.Events = Events{Client: f.core, NodeName: "gke-pool-1-abc"}
	}
	if d.Containerd.Binary == "" {
		// The check runs the release the probe reports.
		d.Containerd = checker(t, f.rel)
	}
	r, err := New(f.cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) reasons() []string {
	var out []string
	for _, e := range *f.events {
		out = append(out, e.Reason)
	}
	return out
}

// hostContainerd puts a containerd release where a node has it, under the
// host root: /usr/bin/containerd.
func hostContainerd(t testing.TB, root string, rel release) {
	t.Helper()
	p := filepath.Join(root, "usr", "bin", "containerd")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ctrBinary(t, rel), p); err != nil {
		t.Fatal(err)
	}
}

func gkeFixture(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile("testdata/gke-v2.toml")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(data), "@TMP@", "/tmp/x")
}

func TestMalformedLeftUntouched(t *testing.T) {
	bad := "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd\ndiscard_unpacked_layers = true\n"
	f := newFixture(t, bad)
	m := NewMetrics()
	r := f.remediator(t, Deps{Metrics: m})
	_, err := r.Reconcile(context.Background())
	if !errors.Is(err, configplan.ErrMalformed) {
		t.Fatalf("err = %v, want configplan.ErrMalformed", err)
	}
	got, _ := os.ReadFile(f.cfg.Target.Config)
	if string(got) != bad {
		t.Fatal("malformed config was modified")
	}
	if _, err := os.Stat(statePath(f.cfg.Target)); err == nil {
		t.Fatal("state written for a file that was not changed")
	}
	if f.rs.calls != 0 {
		t.Fatal("containerd restarted over a malformed config")
	}
	if got := testutil.ToFloat64(m.Failures.WithLabelValues("ConfigMalformed")); got != 1 {
		t.Fatalf("failures{ConfigMalformed} = %v, want 1", got)
	}
	if r := f.reasons(); len(r) != 1 || r[0] != "ConfigMalformed" {
		t.Fatalf("events %v, want one ConfigMalformed", r)
	}
	ev := (*f.events)[0]
	if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "gke-pool-1-abc" || ev.Type != corev1.EventTypeWarning {
		t.Fatalf("event %+v: want a Warning on Node gke-pool-1-abc", ev.InvolvedObject)
	}
	// The same failure on the next resync is not re-reported.
	r.Reconcile(context.Background())
	if len(*f.events) != 1 {
		t.Fatalf("repeated failure emitted %d events, want 1", len(*f.events))
	}
}

// TestNeverWritesSchemaNewerThanRunning: a main file declaring a config
// version above the running release's MaxConfigVersion (containerd would
// not start with it) is refused, naming the limit, on every release.
func TestNeverWritesSchemaNewerThanRunning(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			f := newFixtureOn(t, rel, fmt.Sprintf("version = %d\n[plugins.\"io.containerd.cri.v1.images\"]\n", rel.Run.MaxConfigVersion+1))
			r := f.remediator(t, Deps{})
			_, err := r.Reconcile(context.Background())
			if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", rel.Run.MaxConfigVersion)) {
				t.Fatalf("version %d file on containerd %s: err = %v, want refusal naming the limit", rel.Run.MaxConfigVersion+1, rel.Version, err)
			}
			if _, err := os.Stat(f.cfg.Target.DropIn()); err == nil {
				t.Fatal("drop-in written")
			}
		})
	}
}

func TestMissingLiteralImportRefused(t *testing.T) {
	for _, rel := range where(dropIn) {
		t.Run(rel.Version, func(t *testing.T) {
			f := newFixtureOn(t, rel, "version = 2\nimports = [\"/opt/kata/containerd/config.d/kata-deploy.toml\"]\n")
			r := f.remediator(t, Deps{})
			_, err := r.Reconcile(context.Background())
			if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), "import is missing") {
				t.Fatalf("err = %v, want refusal over the missing literal import", err)
			}
		})
	}
}

func TestUnknownRuntimeVersionRefused(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	f.probe.err = errors.New("no socket")
	r := f.remediator(t, Deps{})
	if _, err := r.Reconcile(context.Background()); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("err = %v, want ErrUnknownRun", err)
	}
}

// TestRuntimeVersionFromNode: without a CRI socket the running release is
// the Node's containerRuntimeVersion, and its handlers are the Node's
// runtimeHandlers.
func TestRuntimeVersionFromNode(t *testing.T) {
	for _, rel := range where(dropIn) {
		t.Run(rel.Version, func(t *testing.T) {
			f := newFixtureOn(t, rel, gkeFixture(t))
			f.probe.err = errors.New("no socket")
			node := &corev1.Node{Status: corev1.NodeStatus{
				NodeInfo:        corev1.NodeSystemInfo{ContainerRuntimeVersion: "containerd://" + strings.TrimPrefix(rel.Version, "v"), OSImage: "Ubuntu 22.04.5 LTS"},
				RuntimeHandlers: []corev1.NodeRuntimeHandler{{Name: "runc"}},
			}}
			f.rs.onRestart = func() {
				node.Status.RuntimeHandlers = append(node.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{Name: "kata-remote"})
			}
			r := f.remediator(t, Deps{Node: func(context.Context) (*corev1.Node, error) { return node, nil }})
			res, err := r.Reconcile(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Plan.Mode != containerdrelease.DropIn || !res.Restarted || !res.Converged {
				t.Fatalf("%+v: want the drop-in, a restart, and the Node's runtimeHandlers to confirm it", res)
			}
		})
	}
}

func TestSkipsWithoutKataOrOnCOS(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	os.Remove(filepath.Join(f.cfg.Host.Root, f.cfg.Handler.RuntimePath))
	r := f.remediator(t, Deps{})
	res, err := r.Reconcile(context.Background())
	if err != nil || !strings.Contains(res.Skipped, f.cfg.Handler.RuntimePath) {
		t.Fatalf("shim missing: res %+v err %v, want a skip naming the shim", res, err)
	}
	if got, _ := os.ReadFile(f.cfg.Target.Config); string(got) != gkeFixture(t) {
		t.Fatal("config changed although the shim is missing")
	}

	f = newFixture(t, gkeFixture(t))
	cos := &corev1.Node{}
	cos.Labels = map[string]string{"cloud.google.com/gke-os-distribution": "cos"}
	r = f.remediator(t, Deps{Node: func(context.Context) (*corev1.Node, error) { return cos, nil }})
	res, err = r.Reconcile(context.Background())
	if err != nil || !strings.Contains(res.Skipped, "Container-Optimized OS") || r.Ready() {
		t.Fatalf("COS label: res %+v err %v, want a skip, not ready", res, err)
	}

	f = newFixture(t, gkeFixture(t))
	os.MkdirAll(filepath.Join(f.cfg.Host.Root, "etc"), 0o755)
	os.WriteFile(filepath.Join(f.cfg.Host.Root, "etc", "os-release"), []byte("NAME=\"Container-Optimized OS\"\nID=cos\n"), 0o644)
	r = f.remediator(t, Deps{})
	if res, _ := r.Reconcile(context.Background()); !strings.Contains(res.Skipped, "ID=cos") {
		t.Fatalf("COS os-release: %+v, want a skip", res)
	}
}

func TestDryRunPrintsDiffWritesNothing(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	var out, errb bytes.Buffer
	hostContainerd(t, f.cfg.Host.Root, f.rel)
	code := Main(context.Background(), []string{"--dry-run", "--config", f.cfg.Target.Config, "--host-root", f.cfg.Host.Root, "--kata-dir", f.cfg.KataDir,
		"--lock", f.cfg.Lock.Path, "--containerd-version", f.probe.version, "--cri-socket", "", "--restart", "none", "--quiet", "0s"}, &out, &errb, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"-  discard_unpacked_layers = true", "+  discard_unpacked_layers = false", "+[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata-remote]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("diff lacks %q:\n%s", want, out.String())
		}
	}
	if got, _ := os.ReadFile(f.cfg.Target.Config); string(got) != gkeFixture(t) {
		t.Fatal("dry run changed the config")
	}
}

func TestFlagsAndEnv(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if h := o.cfg.Handler; !h.Equal(DefaultHandler()) || h.Snapshotter != "nydus-for-kata-tee" || h.ExportsRoot != "/var/lib/nydus-for-kata-tee" ||
		h.ConfigPath != "/opt/kata/share/defaults/kata-containers/runtimes/remote/configuration-remote.toml" {
		t.Fatalf("default handler %+v: want kata-deploy 4.x's", h)
	}
	t.Setenv(EnvPrefix+"SNAPSHOTTER", "nydus")
	t.Setenv(EnvPrefix+"SNAPSHOTTER_ADDRESS", "/run/containerd-nydus/containerd-nydus-grpc.sock")
	o, err = parseFlags([]string{"--handler", "kata-remote"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Handler.Snapshotter != "nydus" || o.cfg.Target.DropInDir != "/etc/containerd/caa-gcp-t4" {
		t.Fatalf("env not applied or default drop-in dir wrong: %+v", o.cfg)
	}
	if !o.cfg.Explicit["snapshotter"] || !o.cfg.Explicit["snapshotter-address"] || o.cfg.Explicit["kata-config"] {
		t.Fatalf("explicit flags %v: want the two set by the environment only", o.cfg.Explicit)
	}
	for _, args := range [][]string{
		{"--restart", "signal"},
		{"--config", "relative/config.toml"},
		{"--dropin-name", "../x.toml"},
		{"--containerd-binary", "bin/containerd"},
		{"--daemonset", "gcp-t4-remediate"},
		{"--once", "--cleanup"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) accepted bad input", args)
		}
	}
	h := DefaultHandler()
	h.Snapshotter = "bad name"
	if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "--snapshotter") {
		t.Errorf("Validate: %v, want an error naming --snapshotter", err)
	}
	// An empty --snapshotter is containerd's default snapshotter: the nydus
	// proxy plugin's address and root go with it, unless given.
	for _, k := range []string{"SNAPSHOTTER", "SNAPSHOTTER_ADDRESS"} {
		os.Unsetenv(EnvPrefix + k) // t.Setenv above puts them back
	}
	o, err = parseFlags([]string{"--snapshotter="}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if h := o.cfg.Handler; h.Snapshotter != "" || h.SnapshotterAddress != "" || h.ExportsRoot != "" || h.Validate() != nil {
		t.Errorf("--snapshotter= gave %+v (%v), want no snapshotter, address or root", h, h.Validate())
	}
	o, err = parseFlags([]string{"--snapshotter=", "--snapshotter-address=/run/x.sock"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.cfg.Handler.Validate(); err == nil || !strings.Contains(err.Error(), "without --snapshotter") {
		t.Errorf("an address without a snapshotter: %v, want it refused naming --snapshotter", err)
	}
}

func TestNoRestartWhenContainerdStartedAfterWrite(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	r := f.remediator(t, Deps{})
	f.rs.started = time.Now().Add(time.Hour) // containerd (re)started after any write
	_, err := r.Reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not restarting") {
		t.Fatalf("err = %v, want a report instead of a restart", err)
	}
	if f.rs.calls != 0 {
		t.Fatal("restarted a containerd that already read the config")
	}
}

func TestNoRestartWhenLoaded(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	keep := false
	f.probe.state = HandlerState{Known: true, Loaded: true, Snapshotter: configplan.KataDeployNydus, Discard: &keep}
	r := f.remediator(t, Deps{})
	res, err := r.Reconcile(context.Background())
	if err != nil || res.Restarted || f.rs.calls != 0 || !res.Converged {
		t.Fatalf("res %+v err %v calls %d: want no restart for a loaded handler", res, err, f.rs.calls)
	}
}

// TestRestartBudget: one restart per interval; a second drift within it
// waits for the budget instead of restarting again.
func TestRestartBudget(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	now := time.Now()
	clock := func() time.Time { return now }
	m := NewMetrics()
	r := f.remediator(t, Deps{Budget: restart.NewBudget(10*time.Minute, 3), Now: clock, Metrics: m})
	if res, err := r.Reconcile(context.Background()); err != nil || !res.Restarted {
		t.Fatalf("first drift: %+v %v, want a restart", res, err)
	}
	// GKE rewrites the file without restarting containerd, and the
	// running one lost the handler (a real 1.7 would still have it; the
	// probe says it does not, as after a GKE restart).
	os.WriteFile(f.cfg.Target.Config, []byte(gkeFixture(t)), 0o644)
	f.probe.mu.Lock()
	f.probe.state = HandlerState{Known: true}
	f.probe.mu.Unlock()
	now = now.Add(time.Minute)
	res, err := r.Reconcile(context.Background())
	if err != nil || res.RetryIn <= 0 || f.rs.calls != 1 || len(res.Wrote) != 1 {
		t.Fatalf("second drift within the interval: res %+v err %v calls %d; want the file written and the restart deferred", res, err, f.rs.calls)
	}
	// The wait is told on the Node, once, with when it ends and what to
	// do meanwhile: kata-remote pods fail to start there until then.
	var deferred []*corev1.Event
	for _, e := range *f.events {
		if e.Reason == "RestartDeferred" {
			deferred = append(deferred, e)
		}
	}
	if len(deferred) != 1 || deferred[0].Type != corev1.EventTypeWarning ||
		!strings.Contains(deferred[0].Message, "next allowed at "+now.Add(9*time.Minute).Format(time.RFC3339)) ||
		!strings.Contains(deferred[0].Message, "systemctl restart containerd") {
		t.Fatalf("events %v; want one Warning RestartDeferred naming when the next restart is allowed and the fix", f.reasons())
	}
	now = now.Add(time.Minute)
	if _, err := r.Reconcile(context.Background()); err != nil || f.rs.calls != 1 {
		t.Fatalf("still within the interval: %v calls %d", err, f.rs.calls)
	}
	if n := strings.Count(strings.Join(f.reasons(), ","), "RestartDeferred"); n != 1 {
		t.Fatalf("RestartDeferred told %d times, want once until the node converges", n)
	}
	now = now.Add(9 * time.Minute)
	if res, err := r.Reconcile(context.Background()); err != nil || !res.Restarted || f.rs.calls != 2 {
		t.Fatalf("after the interval: %+v %v calls %d, want the restart", res, err, f.rs.calls)
	}
	if got := testutil.ToFloat64(m.Restarts); got != 2 {
		t.Fatalf("restarts metric %v, want 2", got)
	}
}

// TestFailedRestartRollsBack: containerd does not come back with the
// handler: the files get their previous bytes, containerd is restarted
// once more, the node reports it, and the same change is not written again.
func TestFailedRestartRollsBack(t *testing.T) {
	orig := gkeFixture(t)
	f := newFixture(t, orig)
	f.rs.onRestart = nil // the restarted containerd never shows the handler
	r := f.remediator(t, Deps{})
	res, err := r.Reconcile(context.Background())
	if err == nil || !res.RolledBack || !strings.Contains(err.Error(), "restored "+f.cfg.Target.Config) {
		t.Fatalf("res %+v err %v: want a rollback naming the file", res, err)
	}
	if got := read(t, f.cfg.Target.Config); got != orig {
		t.Fatal("config not put back byte for byte")
	}
	if f.rs.calls != 2 {
		t.Fatalf("%d restarts, want the failed one and one after the rollback", f.rs.calls)
	}
	if r := f.reasons(); len(r) == 0 || r[len(r)-1] != "RolledBack" {
		t.Fatalf("events %v, want RolledBack last", r)
	}
	_, err = r.Reconcile(context.Background())
	if !errors.Is(err, configplan.ErrUnsupported) || !strings.Contains(err.Error(), "not writing it again") || f.rs.calls != 2 {
		t.Fatalf("next pass: err %v, calls %d; want the same change refused without a restart", err, f.rs.calls)
	}
	if got := read(t, f.cfg.Target.Config); got != orig {
		t.Fatal("config written again after the rollback")
	}
}

func TestSettleDefersRestart(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	f.cfg.Settle = time.Hour
	r := f.remediator(t, Deps{})
	res, err := r.Reconcile(context.Background())
	if err != nil || len(res.Wrote) != 1 || res.RetryIn <= 0 || f.rs.calls != 0 {
		t.Fatalf("res %+v err %v: want the file written now and the restart deferred", res, err)
	}
}

func TestHostLockExcludes(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	unlock, err := f.cfg.Lock.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := f.remediator(t, Deps{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := r.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "host lock") {
		t.Fatalf("err = %v, want a wait on the held host lock", err)
	}
	if got, _ := os.ReadFile(f.cfg.Target.Config); string(got) != gkeFixture(t) {
		t.Fatal("wrote while kata-deploy held the lock")
	}
	unlock()
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWatchLoopRestoresAndServesReadiness(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	f.probe.state = loadedState()
	m := NewMetrics()
	r := f.remediator(t, Deps{Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := r.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	passes := make(chan Result, 100)
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, Loop{Debounce: 20 * time.Millisecond, Resync: time.Hour, Reconciled: func(res Result, _ error) { passes <- res }})
	}()
	waitConverged := func() {
		t.Helper()
		for {
			select {
			case res := <-passes:
				if res.Converged {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no converged pass")
			}
		}
	}
	waitConverged()
	// A rewrite as GKE does it: the loop notices it without a resync.
	os.WriteFile(f.cfg.Target.Config, []byte(gkeFixture(t)), 0o644)
	waitConverged()
	got, _ := os.ReadFile(f.cfg.Target.Config)
	if doc, err := tomledit.Decode(got); err != nil || !strings.Contains(string(got), "kata-remote") {
		t.Fatalf("config not restored (%v):\n%s", err, got)
	} else if tomledit.Leaves(doc)[`plugins."io.containerd.grpc.v1.cri".containerd.discard_unpacked_layers`] != false {
		t.Fatal("discard_unpacked_layers not restored")
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d after converging", resp.StatusCode)
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"gcpt4_remediate_files_written_total 2", "gcpt4_remediate_drift_detected_total 2", "gcpt4_remediate_converged 1", "gcpt4_remediate_last_converged_timestamp_seconds"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Malformed content makes it unready.
	os.WriteFile(f.cfg.Target.Config, []byte("version = [\n"), 0o644)
	deadline := time.Now().Add(30 * time.Second)
	for r.Ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	resp, err = http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d with a malformed config, want 503", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDiff(t *testing.T) {
	d := Diff("/x", []byte("a\nb\nc\nd\ne\n"), []byte("a\nb\nC\nd\ne\n"))
	want := "--- a/x\n+++ b/x\n@@\nb\n-c\n+C\nd\n@@\n"
	if strings.ReplaceAll(d, " ", "") != strings.ReplaceAll(want, " ", "") {
		t.Fatalf("Diff:\n%s\nwant:\n%s", d, want)
	}
}

// TestLoopRetriesTransientErrors: with containerd's socket down (GKE
// restarting it), a failed pass is retried with backoff, not left to the
// next resync or file event.
func TestLoopRetriesTransientErrors(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	f.probe.err = errors.New("connection refused")
	f.probe.state = loadedState()
	r := f.remediator(t, Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := make(chan error, 100)
	go r.Run(ctx, Loop{Resync: time.Hour, Reconciled: func(_ Result, err error) { passes <- err }})
	if err := <-passes; err == nil {
		t.Fatal("first pass succeeded although the probe fails")
	}
	f.probe.mu.Lock()
	f.probe.err = nil
	f.probe.mu.Unlock()
	select {
	case err := <-passes:
		if err != nil {
			t.Fatalf("retry failed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no retry after a failed pass (resync is an hour)")
	}
	if !r.Ready() {
		t.Fatal("not ready after the retry converged")
	}
}

// loadedState is what containerd 1.7's CRI status says once it runs the
// handler: the runtime, its snapshotter and discard_unpacked_layers.
func loadedState() HandlerState {
	keep := false
	return HandlerState{Known: true, Loaded: true, Snapshotter: configplan.KataDeployNydus, Discard: &keep}
}

// TestIdlePassesSkipTheCheck: a converged node whose files did not change
// does not run containerd again at every resync.
func TestIdlePassesSkipTheCheck(t *testing.T) {
	f := newFixture(t, gkeFixture(t))
	f.probe.state = loadedState()
	ctr := checker(t, f.rel)
	counted := filepath.Join(f.dir, "containerd")
	script := "#!/bin/sh\necho run >> " + filepath.Join(f.dir, "runs") + "\nexec " + ctr.Binary + " \"$@\"\n"
	if err := os.WriteFile(counted, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := f.remediator(t, Deps{Containerd: Containerd{Binary: counted}})
	runs := func() int { return strings.Count(read(t, filepath.Join(f.dir, "runs")), "run") }
	for i := range 3 {
		if res, err := r.Reconcile(context.Background()); err != nil || !res.Converged {
			t.Fatalf("pass %d: %+v %v", i, res, err)
		}
	}
	after3 := runs()
	if res, err := r.Reconcile(context.Background()); err != nil || !res.Converged || runs() != after3 {
		t.Fatalf("idle pass ran containerd (%d → %d runs): %+v %v", after3, runs(), res, err)
	}
	os.WriteFile(f.cfg.Target.Config, []byte(gkeFixture(t)), 0o644)
	if _, err := r.Reconcile(context.Background()); err != nil || runs() == after3 {
		t.Fatalf("a changed file was not checked again (%v)", err)
	}
}

// TestKeepsAnExistingHandler: without kata-deploy's files, a kata-remote
// already in containerd's configuration (here as the CoCo operator's
// pre-install sets it up: nydus at /run/containerd-nydus, per its
// reqs-deploy.sh) keeps its settings; only what peer pods lack is added.
func TestKeepsAnExistingHandler(t *testing.T) {
	main := gkeFixture(t) + `
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote]
  runtime_type = "io.containerd.kata-remote.v2"
  runtime_path = "/opt/kata/bin/containerd-shim-kata-v2"
  snapshotter = "nydus"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.options]
  ConfigPath = "/opt/kata/share/defaults/kata-containers/runtimes/remote/configuration-remote.toml"
[proxy_plugins.nydus]
  type = "snapshot"
  address = "/run/containerd-nydus/containerd-nydus-grpc.sock"
`
	f := newFixture(t, main)
	f.probe.state = loadedState()
	f.probe.state.Snapshotter = "nydus"
	r := f.remediator(t, Deps{})
	res, err := r.Reconcile(context.Background())
	if err != nil || len(res.Wrote) != 1 || res.Plan.Handler.Snapshotter != "nydus" || !strings.Contains(res.Plan.Source, "already in containerd") {
		t.Fatalf("res %+v err %v: want the existing handler's settings kept", res.Plan, err)
	}
	doc, err := tomledit.Decode([]byte(read(t, f.cfg.Target.Config)))
	if err != nil {
		t.Fatal(err)
	}
	l := tomledit.Leaves(doc)
	for k, v := range map[string]any{
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote.snapshotter`: "nydus",
		`proxy_plugins.nydus.address`:                                            "/run/containerd-nydus/containerd-nydus-grpc.sock",
		`plugins."io.containerd.grpc.v1.cri".containerd.discard_unpacked_layers`: false,
	} {
		if l[k] != v {
			t.Errorf("%s = %v, want %v", k, l[k], v)
		}
	}
	if _, ok := l[`proxy_plugins.nydus-for-kata-tee.type`]; ok {
		t.Error("kata-deploy's snapshotter added next to the existing one")
	}
}
