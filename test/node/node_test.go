package node

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// phases records how long each step took, for the test's log and the
// docs page's table; nothing asserts on them.
type phases struct {
	t    *testing.T
	last time.Time
}

func (p *phases) done(name string) {
	now := time.Now()
	p.t.Logf("phase %-28s %6.1fs", name, now.Sub(p.last).Seconds())
	p.last = now
}

// poll calls f until it reports done or ctx ends; the error then carries
// f's last word.
func poll(ctx context.Context, what string, f func() (bool, string)) error {
	last := ""
	for {
		ok, msg := f()
		if ok {
			return nil
		}
		last = msg
		select {
		case <-ctx.Done():
			return errors.New(what + ": " + ctx.Err().Error() + " (last: " + last + ")")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// TestPodRunsOnARealNode: a plain pod bound to the harness's node goes
// Running through the real kubelet and containerd, its log line comes back
// through the API server's kubelet proxy (the path of `kubectl logs`), its
// deletion is finished by the kubelet, containerd runs no task afterwards,
// and after Stop nothing of the node is left on the machine.
func TestPodRunsOnARealNode(t *testing.T) {
	for _, c := range containerdLines(t) {
		t.Run(c.name, func(t *testing.T) { podRunsOnARealNode(t, c.bin) })
	}
}

// containerdLine is a containerd release line the first scenarios run on:
// bin "" is NODE_CONTAINERD's (2.x), the other NODE_CONTAINERD17's.
type containerdLine struct{ name, bin string }

// containerdLines are NODE_CONTAINERD's release and containerd 1.7, the
// line GKE ran before 2.x (a version 2 configuration: node.go
// containerdConfigV2). make node-e2e builds both.
func containerdLines(t *testing.T) []containerdLine {
	t.Helper()
	lines := []containerdLine{{"containerd-2", ""}}
	if testing.Short() || os.Geteuid() != 0 {
		return lines // StartForTest skips, saying why
	}
	c17 := os.Getenv(EnvContainerd17)
	if c17 == "" {
		t.Fatalf("%s is not set: the node runs on containerd 1.7 too; run `%s`, which builds it", EnvContainerd17, MakeCommand)
	}
	return append(lines, containerdLine{"containerd-1.7", c17})
}

func podRunsOnARealNode(t *testing.T, containerd string) {
	ph := &phases{t: t, last: time.Now()}
	sleeper := buildSleeper(t)
	ph.done("build image binary")

	cp, n := StartForTest(t, Options{ImageBinary: sleeper, Containerd: containerd})
	ph.done("control plane + node Ready")

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kubelet registered no Node %s: %v", n.Name, err)
	}
	t.Logf("node %s: kubelet %s, runtime %s, kernel %s", node.Name, node.Status.NodeInfo.KubeletVersion,
		node.Status.NodeInfo.ContainerRuntimeVersion, node.Status.NodeInfo.KernelVersion)
	if !strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("node reports runtime %q, want containerd://…", node.Status.NodeInfo.ContainerRuntimeVersion)
	}

	const ns, name, line = "node-e2e", "hello", "hello from the node harness"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager: the ServiceAccount admission plugin wants
	// "default" to exist.
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	automount := false
	grace := int64(10)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			// No scheduler: bound here.
			NodeName:                      n.Name,
			AutomountServiceAccountToken:  &automount,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           Image,
				ImagePullPolicy: corev1.PullNever,
				Args:            strings.Fields(line),
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = poll(ctx, "pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + " " + containerState(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	ph.done("pod created → Running")

	err = poll(ctx, "pod log", func() (bool, string) {
		out, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		return strings.TrimSpace(string(out)) == line, string(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.Kubeconfig, "-n", ns, "logs", name).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != line {
			t.Errorf("kubectl logs: %v: %q, want %q", err, out, line)
		}
	} else {
		t.Log("kubectl is not on PATH: the log was read through client-go's pods/log only")
	}
	ph.done("log through the API server")

	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Only the kubelet removes the object, once its containers are gone.
	err = poll(ctx, "pod gone", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, string(p.Status.Phase) + " " + containerState(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	ph.done("delete → pod gone")
	err = poll(ctx, "containerd runs no task", func() (bool, string) {
		// stdout only: ctr warns on stderr that cgroup v1 is deprecated.
		out, err := exec.CommandContext(ctx, n.bin.Ctr, "--address", n.Socket, "-n", "k8s.io", "tasks", "ls", "-q").Output()
		if err != nil {
			return false, err.Error()
		}
		return strings.TrimSpace(string(out)) == "", "tasks: " + strings.Join(strings.Fields(string(out)), " ")
	})
	if err != nil {
		t.Error(err)
	}
	ph.done("containerd's tasks gone")

	pids := n.PIDs()
	if err := n.Stop(); err != nil {
		t.Errorf("stop node: %v", err)
	}
	ph.done("node teardown")
	for _, f := range n.Forced() {
		t.Logf("teardown removed: %s", f)
	}
	if left := n.Residue(); len(left) > 0 {
		t.Errorf("after teardown, left on the machine:\n  %s", strings.Join(left, "\n  "))
	}
	for name, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", itoa(pid))); err == nil {
			t.Errorf("%s (pid %d) still runs after teardown", name, pid)
		}
	}
}

func containerState(p *corev1.Pod) string {
	var b strings.Builder
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			b.WriteString(c.Name + ": waiting " + c.State.Waiting.Reason + " " + c.State.Waiting.Message)
		case c.State.Terminated != nil:
			b.WriteString(c.Name + ": terminated " + c.State.Terminated.Reason)
		case c.State.Running != nil:
			b.WriteString(c.Name + ": running")
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			b.WriteString("; " + string(c.Type) + ": " + c.Message)
		}
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

// buildSleeper builds ./sleeper static, the image's one file.
func buildSleeper(t *testing.T) string {
	t.Helper()
	if testing.Short() || os.Geteuid() != 0 {
		return "" // StartForTest skips with the reason
	}
	out := filepath.Join(t.TempDir(), "sleeper")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", out, "./sleeper")
	// This module is not in go.work (its own, like controlplane).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./sleeper: %v\n%s", err, b)
	}
	return out
}
