//go:build linux

package remediate

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerd releases the real-daemon tests run: the 1.7 line GKE ≤ 1.32
// ships and 2.x releases, the first of them 2.0 as on GKE 1.33 (config
// version 3), the last the newest (config version 4). The Makefile passes
// the versions it built; these defaults match it.
func containerdVersions() (v17 string, v2s []string) {
	v17, v2s = "v1.7.29", []string{"v2.0.14", "v2.4.2"}
	if v := os.Getenv("CONTAINERD17_VERSION"); v != "" {
		v17 = v
	}
	if v := strings.Fields(os.Getenv("CONTAINERD2_VERSIONS")); len(v) > 0 {
		v2s = v
	}
	return v17, v2s
}

// containerdBinary builds (or finds in the cache) a containerd release
// with the repository's build script.
func containerdBinary(t testing.TB, version string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("real containerd tests run as root (containerd mounts and chowns in its root dir); CI runs as root")
	}
	script, err := filepath.Abs("../../../test/containerd/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(script, version)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build containerd %s: %v\n%s", version, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// node is one fake GKE node: a host root with kata installed, a GKE config
// and a containerd daemon on temporary root, state and socket.
type node struct {
	t       testing.TB
	version Runtime // of the binary first started
	dir     string  // stands for the host's /etc/containerd and more
	host    string  // host root holding /opt/kata
	target  Target
	socket  string

	mu      sync.Mutex
	bin     string
	cmd     *exec.Cmd
	started time.Time
	log     *bytes.Buffer
	exited  chan struct{}
}

func newNode(t testing.TB, bin string) *node {
	t.Helper()
	// Short paths: the socket path must fit in sun_path (108 bytes).
	dir, err := os.MkdirTemp("", "rmd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{t: t, dir: dir, host: filepath.Join(dir, "host"), bin: bin, socket: filepath.Join(dir, "c.sock")}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	// "containerd github.com/containerd/containerd/v2 2.2.1+unknown"
	f := strings.Fields(string(out))
	if n.version, err = ParseRuntimeVersion(f[len(f)-1]); err != nil {
		t.Fatal(err)
	}
	n.target = Target{Config: filepath.Join(dir, "etc", "config.toml"), DropInDir: filepath.Join(dir, "etc", "conf.d"), DropInName: "50-kata-remote.toml"}
	h := DefaultHandler()
	for _, p := range []string{h.RuntimePath, h.ConfigPath} {
		full := filepath.Join(n.host, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("stand-in for kata\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(n.target.Config), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// gkeWrite overwrites config.toml as GKE's bootstrap does (cat >, not an
// atomic replace).
func (n *node) gkeWrite(fixture string) []byte {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		n.t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte("@TMP@"), []byte(n.dir))
	if n.version.Major == 2 && n.version.Minor == 0 {
		// containerd 2.0 has only the single CNI bin_dir; 2.1 added
		// bin_dirs (and refuses both at once).
		data = bytes.ReplaceAll(data, []byte(`bin_dirs = ["/home/kubernetes/bin"]`), []byte(`bin_dir = "/home/kubernetes/bin"`))
	}
	f, err := os.OpenFile(n.target.Config, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		n.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		n.t.Fatal(err)
	}
	return data
}

func (n *node) start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.startLocked()
}

func (n *node) startLocked() {
	n.t.Helper()
	log := &bytes.Buffer{}
	cmd := exec.Command(n.bin, "--config", n.target.Config,
		"--root", filepath.Join(n.dir, "root"), "--state", filepath.Join(n.dir, "state"),
		"--address", n.socket, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start containerd: %v", err)
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
			return
		}
		select {
		case <-exited:
			n.t.Fatalf("containerd %s exited at start:\n%s", n.bin, log.String())
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("containerd CRI not answering after 60s: %v\n%s", err, log.String())
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

// swap replaces the containerd binary the next restart runs (a GKE minor
// upgrade changes containerd's version).
func (n *node) swap(bin string) {
	n.mu.Lock()
	n.bin = bin
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
	n.stopLocked()
	n.startLocked()
	return nil
}

var _ restart.Restarter = (*node)(nil)

func (n *node) remediator(budget *restart.Budget) *Remediator {
	n.t.Helper()
	if budget == nil {
		budget = restart.NewBudget(time.Nanosecond, 3)
	}
	r, err := New(Config{
		Handler: DefaultHandler(),
		Target:  n.target,
		Host:    Host{Root: n.host},
		Lock:    HostLock{Path: filepath.Join(n.dir, "kata-deploy.lock")},
	}, Deps{Probe: CRI{Socket: n.socket}, Restarter: n, Budget: budget})
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

// configDump is `containerd --config F config dump` with the node's binary.
func (n *node) configDump() string {
	n.t.Helper()
	n.mu.Lock()
	bin := n.bin
	n.mu.Unlock()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--config", n.target.Config, "config", "dump")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		n.t.Fatalf("config dump: %v\n%s", err, stderr.String())
	}
	return string(out)
}
