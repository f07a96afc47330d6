//go:build linux

package remediate

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/containerdversions"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// release is one containerd release the real-containerd suite runs: the
// version its binary reports, the release whose code it is built from
// (itself, or, for a line a test adds as a row, a tested release with the
// same facts), and the facts it runs with: its row of the suite's table.
type release struct {
	Version string // as build.sh names it, e.g. v2.0.14
	Source  string // whose code build.sh builds
	Run     containerdrelease.Runtime
}

// suiteTable is the release table the suite runs with: the sidecar's own,
// and the lines the tests add as rows (addedLines, newline_test.go).
func suiteTable() containerdrelease.Table {
	var rows []containerdrelease.Release
	for _, a := range addedLines {
		rows = append(rows, a.Row)
	}
	return append(slices.Clone(containerdrelease.Known), rows...)
}

// suite is every release the real-containerd tests run, oldest line
// first: those set once in test/containerd/versions.mk (the Makefile
// includes it; its env wins), and for each line a test adds as a row, a
// stand-in built from a tested release of the same facts (skipped when no
// tested release has them). Tests pick from it by the rows' facts (where).
func suite() []release {
	versions, err := containerdversions.Releases()
	if err != nil {
		panic(err)
	}
	table := suiteTable()
	var out []release
	for _, v := range versions {
		run, err := table.Lookup(v)
		if err != nil {
			panic(err)
		}
		out = append(out, release{Version: v, Source: v, Run: run})
	}
	for _, a := range addedLines {
		run, err := table.Lookup(a.Version)
		if err != nil {
			panic(err)
		}
		for _, tested := range out[:len(versions)] {
			if sameFacts(tested.Run.Release, a.Row) {
				out = append(out, release{Version: a.Version, Source: tested.Version, Run: run})
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b release) int {
		return cmp.Or(cmp.Compare(a.Run.Major, b.Run.Major), cmp.Compare(a.Run.Minor, b.Run.Minor))
	})
	return out
}

// sameFacts: two rows that differ in their line only.
func sameFacts(a, b containerdrelease.Release) bool {
	a.Line, b.Line = "", ""
	return reflect.DeepEqual(a, b)
}

// where is the suite's releases whose facts satisfy f.
func where(f func(containerdrelease.Runtime) bool) []release {
	var out []release
	for _, r := range suite() {
		if f(r.Run) {
			out = append(out, r)
		}
	}
	return out
}

// The selections the tests make.
func inPlace(r containerdrelease.Runtime) bool { return r.Strategy == containerdrelease.InPlace }
func dropIn(r containerdrelease.Runtime) bool  { return r.Strategy == containerdrelease.DropIn }

// first is the oldest release of a selection, for the tests that need one
// of a kind; the test is skipped when the configured releases have none.
func first(t testing.TB, f func(containerdrelease.Runtime) bool, what string) release {
	t.Helper()
	rs := where(f)
	if len(rs) == 0 {
		t.Skipf("no containerd release configured is %s (test/containerd/versions.mk, %s / %s)", what, containerdversions.Env17, containerdversions.Env2)
	}
	return rs[0]
}

// newest is the newest release test/containerd/versions.mk names (not a
// stand-in for an added line), for the tests that need the newest real one.
func newest() release {
	var out release
	for _, r := range suite() {
		if r.Source == r.Version {
			out = r
		}
	}
	return out
}

var binMu sync.Mutex

// ctrBinary builds (or finds in the cache) a containerd release with the
// repository's build script. The checks (`config dump`) run it without a
// daemon, so this needs no root; starting a daemon does (requireRoot).
func ctrBinary(t testing.TB, rel release) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real containerd (built from the module proxy when not cached); skipped with -short")
	}
	binMu.Lock()
	defer binMu.Unlock()
	script, err := filepath.Abs("../../../test/containerd/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(script, rel.Version, rel.Source)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build containerd %s from %s (make containerd builds versions.mk's): %v\n%s", rel.Version, rel.Source, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("real containerd daemon tests run as root (containerd mounts and chowns in its root dir); CI runs as root")
	}
}

// checker is the node's-containerd check of a release, for tests that do
// not start a daemon.
func checker(t testing.TB, rel release) Containerd {
	return Containerd{Binary: ctrBinary(t, rel)}
}

// testKataHost lays out what kata-deploy 4.x installs under root's
// /opt/kata: the shim and the remote shim's configuration at the paths it
// writes into the handler (utils/system.rs at 4.0.0/4.1.0).
func testKataHost(t testing.TB, root string) {
	t.Helper()
	h := DefaultHandler()
	for _, p := range []string{h.RuntimePath, h.ConfigPath} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("stand-in for kata\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// node is one fake GKE node: a host root with kata installed, a GKE config
// and a containerd daemon on temporary root, state and socket.
type node struct {
	t testing.TB
	// run is the release the node runs, with its row's facts (what the
	// test expects of it).
	run     containerdrelease.Runtime
	dir     string // stands for the host's /etc/containerd and more
	host    string // host root holding /opt/kata
	kataDir string // kata-deploy's install dir as the pod and containerd see it
	target  configplan.Target
	socket  string
	ctr     Containerd

	mu       sync.Mutex
	bin      string
	cmd      *exec.Cmd
	started  time.Time
	log      *bytes.Buffer
	exited   chan struct{}
	restarts int
	// failNext makes the next restart start a containerd that cannot run
	// (its root directory is a regular file), as a broken disk would.
	failNext bool
}

func newNode(t testing.TB, rel release) *node {
	t.Helper()
	requireRoot(t)
	bin := ctrBinary(t, rel)
	// Short paths: the socket path must fit in sun_path (108 bytes).
	dir, err := os.MkdirTemp("", "rmd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{t: t, dir: dir, host: filepath.Join(dir, "host"), bin: bin, socket: filepath.Join(dir, "c.sock"), ctr: Containerd{Binary: bin}}
	n.kataDir = filepath.Join(n.host, "opt", "kata")
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	f := strings.Fields(string(out))
	if v, err := containerdrelease.ParseVersion(f[len(f)-1]); err != nil || !v.SameLine(rel.Run.Version) {
		t.Fatalf("%s --version says %q, not a %s (%v)", bin, out, rel.Version, err)
	}
	n.run = rel.Run
	n.target = configplan.Target{Config: filepath.Join(dir, "etc", "config.toml"), DropInDir: filepath.Join(dir, "etc", "caa-gcp-t4"), DropInName: "kata-remote.toml"}
	testKataHost(t, n.host)
	if err := os.MkdirAll(filepath.Dir(n.target.Config), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// fixture reads testdata/name for this node: @TMP@ is its directory, and
// a release without bin_dirs (2.0; 2.1 added it and refuses both) gets
// bin_dir.
func (n *node) fixture(name string) []byte {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		n.t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte("@TMP@"), []byte(n.dir))
	data = bytes.ReplaceAll(data, []byte("@KATA@"), []byte(n.kataDir))
	if !n.run.CNIBinDirs {
		data = bytes.ReplaceAll(data, []byte(`bin_dirs = ["/home/kubernetes/bin"]`), []byte(`bin_dir = "/home/kubernetes/bin"`))
	}
	return data
}

// gkeWrite overwrites config.toml as GKE's bootstrap does (cat >, not an
// atomic replace).
func (n *node) gkeWrite(fixture string) []byte {
	n.t.Helper()
	data := n.fixture(fixture)
	n.catWrite(n.target.Config, data)
	return data
}

func (n *node) catWrite(path string, data []byte) {
	n.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		n.t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		n.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.startLocked(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) startLocked() error {
	log := &bytes.Buffer{}
	root := filepath.Join(n.dir, "root")
	if n.failNext {
		n.failNext = false
		root = filepath.Join(n.dir, "not-a-dir")
		if err := os.WriteFile(root, nil, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.Command(n.bin, "--config", n.target.Config,
		"--root", root, "--state", filepath.Join(n.dir, "state"),
		"--address", n.socket, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.cmd, n.log, n.exited, n.started = cmd, log, exited, time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := CRI{Socket: n.socket}.RuntimeVersion(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			n.cmd = nil
			return fmt.Errorf("containerd %s exited at start:\n%s", n.bin, log.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd CRI not answering after 60s: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *node) stopLocked() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
	}
	n.cmd = nil
}

func (n *node) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopLocked()
}

// swap replaces the containerd release the next restart runs (a GKE minor
// upgrade changes containerd's version).
func (n *node) swap(rel release) {
	bin := ctrBinary(n.t, rel)
	n.mu.Lock()
	n.bin = bin
	n.ctr = Containerd{Binary: bin}
	n.run = rel.Run
	n.mu.Unlock()
}

// StartedAt and Restart make the node a restart.Restarter: the test
// restarts its own containerd the way systemd would (stop, start).
func (n *node) StartedAt(context.Context) (time.Time, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return time.Time{}, fmt.Errorf("containerd not running")
	}
	return n.started, nil
}

func (n *node) Restart(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.restarts++
	n.stopLocked()
	return n.startLocked()
}

func (n *node) restartCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.restarts
}

var _ restart.Restarter = (*node)(nil)

// config is the remediator configuration of this node's sidecar.
func (n *node) config() Config {
	return Config{
		Handler:  DefaultHandler(),
		Target:   n.target,
		Host:     Host{Root: n.host},
		KataDir:  n.kataDir,
		Lock:     HostLock{Path: filepath.Join(n.dir, "kata-deploy.lock")},
		Scratch:  n.dir,
		Releases: suiteTable(),
	}
}

func (n *node) remediator(budget *restart.Budget) *Remediator {
	n.t.Helper()
	return n.remediatorWith(n.config(), Deps{Budget: budget})
}

// remediatorWith fills in the node's probe, restarter and checker where
// d has none.
func (n *node) remediatorWith(cfg Config, d Deps) *Remediator {
	n.t.Helper()
	if d.Budget == nil {
		d.Budget = restart.NewBudget(time.Nanosecond, 3)
	}
	if d.Probe == nil {
		d.Probe = CRI{Socket: n.socket}
	}
	if d.Restarter == nil {
		d.Restarter = n
	}
	if d.Containerd.Binary == "" {
		n.mu.Lock()
		d.Containerd = n.ctr
		n.mu.Unlock()
	}
	r, err := New(cfg, d)
	if err != nil {
		n.t.Fatal(err)
	}
	return r
}

func (n *node) status() *runtimeapi.StatusResponse {
	n.t.Helper()
	var resp *runtimeapi.StatusResponse
	err := CRI{Socket: n.socket}.call(context.Background(), func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		var err error
		resp, err = rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		return err
	})
	if err != nil {
		n.t.Fatalf("CRI Status: %v", err)
	}
	return resp
}

// dump is `containerd --config F config dump` with the node's binary.
func (n *node) dump() map[string]any {
	n.t.Helper()
	n.mu.Lock()
	ctr := n.ctr
	n.mu.Unlock()
	doc, err := ctr.Dump(context.Background(), n.target.Config)
	if err != nil {
		n.t.Fatalf("config dump: %v", err)
	}
	return doc
}

// read returns a file's content ("" when absent).
func read(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}

// loop runs the sidecar's watch loop in the background and counts what it
// did.
type loop struct {
	cancel context.CancelFunc
	done   chan error
	r      *Remediator

	mu       sync.Mutex
	restarts int
	passes   []Result
}

func startLoop(t *testing.T, r *Remediator, l Loop) *loop {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lp := &loop{cancel: cancel, done: make(chan error, 1), r: r}
	l.Reconciled = func(res Result, err error) {
		lp.mu.Lock()
		if res.Restarted {
			lp.restarts++
		}
		lp.passes = append(lp.passes, res)
		lp.mu.Unlock()
	}
	if l.Debounce == 0 {
		l.Debounce = 20 * time.Millisecond
	}
	go func() { lp.done <- r.Run(ctx, l) }()
	t.Cleanup(func() { lp.stop(t) })
	return lp
}

// waitRestarts waits until the loop restarted containerd want times and
// is ready.
func (lp *loop) waitRestarts(t *testing.T, want int) {
	t.Helper()
	lp.waitFor(t, fmt.Sprintf("%d restart(s) and ready", want), func() bool { return lp.restarts == want && lp.r.Ready() })
}

func (lp *loop) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		lp.mu.Lock()
		ok := cond()
		lp.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			lp.mu.Lock()
			t.Fatalf("loop: no %s after 60s (restarts %d, %d passes)", what, lp.restarts, len(lp.passes))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (lp *loop) stop(t *testing.T) {
	if lp.cancel == nil {
		return
	}
	lp.cancel()
	lp.cancel = nil
	if err := <-lp.done; err != nil {
		t.Errorf("loop: %v", err)
	}
}

// strs is a string list as TOML decodes it.
func strs(v []string) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = s
	}
	return out
}

// at is the value at a key path of a decoded config.
func at(doc map[string]any, path ...string) (any, bool) {
	var cur any = doc
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// sub is the value at a key path of a decoded config, nil when none.
func sub(doc map[string]any, path []string) any {
	v, _ := at(doc, path...)
	return v
}

// stringList is a decoded TOML array of strings.
func stringList(v any) ([]string, error) {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not a string", e)
		}
		out = append(out, s)
	}
	return out, nil
}
