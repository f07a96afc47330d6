package notice

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// The serving example's sidecar, install/examples/mistral-tp2/drain-on-notice.py.
var sidecar = filepath.Join("..", "..", "..", "install", "examples", "mistral-tp2", "drain-on-notice.py")

// fakeRay is a `ray` CLI that answers `ray list nodes` for one node and
// records the arguments of `ray drain-node`, one per line.
func fakeRay(t *testing.T, nodeIP, nodeID string) (bin, drained string) {
	t.Helper()
	dir := t.TempDir()
	drained = filepath.Join(dir, "drain-node.args")
	bin = filepath.Join(dir, "ray")
	script := `#!/bin/sh
case "$1 $2" in
"list nodes")
	echo "$@" > "` + dir + `/list.args"
	case "$*" in
	*"--filter node_ip=` + nodeIP + ` --filter state=ALIVE"*) echo '[{"node_id": "` + nodeID + `", "node_ip": "` + nodeIP + `", "state": "ALIVE"}]' ;;
	*) echo '[]' ;;
	esac ;;
"drain-node "*)
	for a in "$@"; do echo "$a"; done > "` + drained + `" ;;
*) echo "fake ray: unexpected $*" >&2; exit 2 ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, drained
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 runs the serving example's sidecar (apt-get install python3): %v", err)
	}
	return p
}

// lines starts cmd and hands over its output, a line at a time.
func lines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ch := make(chan string)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(out)
		for s.Scan() {
			ch <- s.Text()
		}
	}()
	return ch
}

// until reads lines until one contains want, and returns what it read.
func until(t *testing.T, ctx context.Context, ch <-chan string, want string) []string {
	t.Helper()
	var seen []string
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("the sidecar ended before %q; it said:\n%s", want, strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, want) {
				return seen
			}
		case <-ctx.Done():
			t.Fatalf("no %q; the sidecar said:\n%s", want, strings.Join(seen, "\n"))
		}
	}
}

// The serving example's drain, end to end on the emulator: GCE preempts
// the Spot podVM; the podVM's watcher sees instance/preempted; the sidecar
// hanging on the podVM's endpoint finds its own Ray node by the pod's IP
// and asks Ray's GCS to drain it for preemption, with the 30 s GCE gives
// less the margin, while the VM is still stopping.
func TestServingSidecarDrainsRayBeforeHardOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, clk := emulator(t, "worker", spot())
	url, _ := podVM(t, ctx, fake, clk, "worker")

	ray, drained := fakeRay(t, "10.8.0.7", "0f1e2d")
	cmd := exec.CommandContext(ctx, python(t), sidecar, "--notice", url,
		"--gcs", "mistral-tp2-head-svc:6379", "--dashboard", "http://mistral-tp2-head-svc:8265", "--ray", ray)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1", "POD_IP=10.8.0.7"}
	out := lines(t, cmd)
	until(t, ctx, out, "watching "+url)

	if err := fake.Interrupt(zone, "worker", gcefake.Preemption); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, out, "asked Ray to drain node 0f1e2d within 25 s")
	if st := status(t, fake, "worker"); st != "STOPPING" {
		t.Fatalf("Ray was told only when the VM was %s", st)
	}
	b, err := os.ReadFile(drained)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, want := range []string{"drain-node", "--address=mistral-tp2-head-svc:6379", "--node-id=0f1e2d",
		"--reason=DRAIN_NODE_REASON_PREEMPTION", "--deadline-remaining-seconds=25"} {
		if !slices.Contains(args, want) {
			t.Errorf("ray %v: no %s", args, want)
		}
	}
	if i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--reason-message=") }); i < 0 ||
		!strings.Contains(args[i], "preemption (preempted=TRUE)") {
		t.Errorf("ray %v: the reason message does not say what GCE said", args)
	}
	// It stays up after the drain: an exited sidecar is restarted and
	// would ask again.
	if cmd.ProcessState != nil {
		t.Fatalf("the sidecar ended after the drain: %v", cmd.ProcessState)
	}
}

// Bad arguments name the field and the fix; a pod on a node without the
// endpoint says what is missing and keeps trying; a node IP Ray does not
// know is reported, not drained.
func TestServingSidecarRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(env []string, args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, python(t), append([]string{sidecar}, args...)...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1"}, env...)
		b, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(b), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(b), 0
	}
	if out, rc := run(nil, "--gcs", "h:6379", "--dashboard", "http://h:8265"); rc != 2 || !strings.Contains(out, "--node-ip: empty; set POD_IP") {
		t.Errorf("no node IP: exit %d, %s", rc, out)
	}
	if out, rc := run([]string{"POD_IP=10.0.0.1"}, "--gcs", "h:6379", "--dashboard", "http://h:8265", "--margin", "-1"); rc != 2 || !strings.Contains(out, "--margin: -1 is negative") {
		t.Errorf("negative margin: exit %d, %s", rc, out)
	}

	// Nothing listens where the endpoint should be.
	ray, _ := fakeRay(t, "10.8.0.7", "0f1e2d")
	cmd := exec.CommandContext(ctx, python(t), sidecar, "--notice", "http://127.0.0.1:1/v1/notice",
		"--gcs", "h:6379", "--dashboard", "http://h:8265", "--ray", ray)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1", "POD_IP=10.8.0.7"}
	until(t, ctx, lines(t, cmd), "is this pod on a caa-gcp-t4 podVM? retrying")

	// The notice comes but Ray has no ALIVE node at this pod's IP.
	fake, clk := emulator(t, "gpu", gpuVM())
	url, _ := podVM(t, ctx, fake, clk, "gpu")
	cmd = exec.CommandContext(ctx, python(t), sidecar, "--notice", url,
		"--gcs", "h:6379", "--dashboard", "http://h:8265", "--ray", ray)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1", "POD_IP=10.9.9.9"}
	out := lines(t, cmd)
	until(t, ctx, out, "watching")
	if err := fake.Notice(zone, "gpu", gcefake.HostMaintenance); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, out, "notice: maintenance (maintenance-event=TERMINATE_ON_HOST_MAINTENANCE), 60 s left")
	until(t, ctx, out, "drain failed: 0 ALIVE Ray nodes have IP 10.9.9.9, want 1")
}
