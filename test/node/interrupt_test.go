package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterruptLeavesNothing is Ctrl-C on `make node-e2e`, run: the test
// binary runs TestPodRunsOnARealNode again as a child and gets SIGINT
// once the child's node is Ready, and again once its pod is Running. The
// child must exit 130 saying so, and leave nothing it made: nothing in
// its temporary directory (the harness's and its test's TempDir), no
// mount under it, no process naming it, no network namespace.
func TestInterruptLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the node harness twice in a child; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the node harness needs root; run as root: " + MakeCommand)
	}
	for _, at := range []string{"control plane + node Ready", "pod created → Running"} {
		t.Run(strings.ReplaceAll(at, " ", "_"), func(t *testing.T) { interruptAt(t, at) })
	}
}

func interruptAt(t *testing.T, phase string) {
	// The child's own temporary directory (short: sockets live under it),
	// so what it leaves is told apart from what other runs make.
	tmp, err := os.MkdirTemp("", "ni-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	before := leftovers(t, tmp)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPodRunsOnARealNode$/^containerd-2$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sent := time.Time{}
	var seen []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		seen = append(seen, line)
		if sent.IsZero() && strings.Contains(line, "phase "+phase) {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			sent = time.Now()
		}
	}
	err = cmd.Wait()
	if sent.IsZero() {
		t.Fatalf("the child never reached %q (%v); its output:\n%s\n%s", phase, err, strings.Join(seen, "\n"), stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 || !strings.Contains(stderr.String(), "node harness: interrupted (interrupt)") {
		t.Fatalf("after SIGINT at %q: %v, want exit 130 and the harness's line; stderr:\n%s\nits output ends:\n%s", phase, err, stderr.String(), strings.Join(seen[max(0, len(seen)-30):], "\n"))
	}
	t.Logf("SIGINT at %q: exit 130 %.1fs later: %s", phase, time.Since(sent).Seconds(), strings.TrimSpace(stderr.String()))
	after := leftovers(t, tmp)
	for _, l := range after {
		if !slices.Contains(before, l) {
			t.Errorf("left behind after the interrupt: %s", l)
		}
	}
}

// leftovers are what a harness run with its temporary directory in tmp
// can leave: anything in tmp, mounts under it, processes naming it, and
// network namespaces (compared with those before the run).
func leftovers(t *testing.T, tmp string) []string {
	t.Helper()
	var out []string
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		out = append(out, "in the temporary directory: "+e.Name())
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], tmp+"/") {
				out = append(out, "mount "+f[4])
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(tmp+"/")) {
			continue
		}
		out = append(out, "process "+filepath.Base(filepath.Dir(p))+": "+clip(strings.ReplaceAll(string(b), "\x00", " ")))
	}
	if ns, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range ns {
			out = append(out, "netns "+e.Name())
		}
	}
	return out
}
