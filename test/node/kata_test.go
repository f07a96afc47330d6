package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The gcp-t4 provider's start-up Event reasons
// (src/cloud-providers/gcpt4/podevent).
const (
	reasonRequested = "PodVMRequested"
	reasonCreated   = "PodVMCreated"
)

// instance is what the test reads of an emulated podVM.
type instance struct {
	Name   string            `json:"name"`
	Status string            `json:"status"`
	Zone   string            `json:"zone"` // its URL; path.Base is the zone's name
	Labels map[string]string `json:"labels"`
	// Scheduling: a Spot VM's provisioningModel is SPOT.
	Scheduling struct {
		ProvisioningModel         string `json:"provisioningModel"`
		InstanceTerminationAction string `json:"instanceTerminationAction"`
		OnHostMaintenance         string `json:"onHostMaintenance"`
		AutomaticRestart          *bool  `json:"automaticRestart"`
	} `json:"scheduling"`
	MachineType       string `json:"machineType"` // its URL
	GuestAccelerators []struct {
		AcceleratorType  string `json:"acceleratorType"` // its URL
		AcceleratorCount int64  `json:"acceleratorCount"`
	} `json:"guestAccelerators"`
}

// gceInstances lists every instance of the project, as GCE's
// aggregatedList returns them.
func gceInstances(ctx context.Context, pp *PeerPods) ([]instance, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pp.GCE+"/compute/v1/projects/"+pp.Project+"/aggregated/instances", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("aggregated/instances: %s", resp.Status)
	}
	var body struct {
		Items map[string]struct {
			Instances []instance `json:"instances"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("aggregated/instances: %w", err)
	}
	var out []instance
	for _, scope := range body.Items {
		out = append(out, scope.Instances...)
	}
	return out, nil
}

// TestKataRemotePodThroughCAA drives a GPU peer pod through the real
// chain: kubelet → containerd → kata's remote shim → CAA v0.22.0 with our
// series (a host process, identity and settings as our manifests give its
// DaemonSet) → the gcp-t4 provider → the GCE emulator's instance, booted
// by the harness as a podVM (podvm.go: the real agent-protocol-forwarder
// at the instance's address, the stand-in kata-agent behind it). It
// asserts the provider's PodVMRequested and PodVMCreated Events, the
// podVM's boot, the pod Running, its log line and two `kubectl exec`s
// (output and exit status) back through the chain, and after the pod is deleted no instance, no podVM and nothing of the
// node left on the machine. kubelet's, containerd's, the shim's, CAA's
// and the podVM's lines go to the test's log with each phase's time.
// It skips unless `make node-e2e UPSTREAM=… KATA=…` built the binaries.
func TestKataRemotePodThroughCAA(t *testing.T) {
	k := kataOrSkip(t)
	// A short modelled pull: this scenario is about the chain, not
	// kubelet's bound on CreateContainer.
	k.AgentPull = 5 * time.Second
	for _, c := range containerdLines(t) {
		t.Run(c.name, func(t *testing.T) {
			kc := k
			kc.Containerd = c.bin
			podThroughCAA(t, &kc)
		})
	}
}

// podThroughCAA is TestKataRemotePodThroughCAA on one containerd.
func podThroughCAA(t *testing.T, k *Kata) {
	ks := startKata(t, k)
	ph, ctx, cs, n, pp := ks.ph, ks.ctx, ks.cs, ks.n, ks.pp
	const ns, name = gpuNamespace, "vllm"
	pod := gpuPod(n.Name, name)
	created := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Whatever happens next, the record of the chain goes to the log: at
	// kubelet's verdict, and again after the delete (only the lines new
	// since). CAA's retries of the agent connection are counted, not
	// repeated.
	seen := map[string]int{}
	logNew := func(name, prefix string, subs ...string) {
		lines := n.LogLines(name, subs...)
		retries := 0
		for _, l := range lines[min(seen[name], len(lines)):] {
			if strings.Contains(l, "Retrying failed agent proxy connection") {
				if retries++; retries > 1 {
					continue
				}
			}
			t.Logf("%s: %s", prefix, clip(l))
		}
		if retries > 1 {
			t.Logf("%s: … %d retries of the agent proxy connection in all, every 5 s", prefix, retries)
		}
		seen[name] = len(lines)
	}
	record := func(stage string) {
		t.Logf("— the record %s —", stage)
		logEvents(ctx, t, cs, ns, name)
		logNew("containerd", "containerd", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "level=error")
		// The shim's own log (its syslog, which the harness serves where
		// the machine has none).
		logNew("kata-shim", "kata shim", "level=error", "level=warn", "remote", "hypervisor", "Shutdown", "StopVM")
		logNew("cloud-api-adaptor", "CAA", "")
		logNew("kubelet", "kubelet", "kata-remote", "RunPodSandbox", "CreateContainer", "StartContainer", "Error", "error")
		for i := range n.PodVMLogs() {
			logNew(fmt.Sprintf("podvm-%d", i+1), fmt.Sprintf("podVM %d", i+1), "")
		}
	}
	recorded := false
	defer func() {
		if !recorded {
			record("(the test stopped early)")
		}
	}()

	// The podVM: the provider's insert reached the emulator.
	var vms []instance
	var err error
	insertCtx, insertCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer insertCancel()
	if err := poll(insertCtx, "an instance in the emulator", func() (bool, string) {
		vms, err = gceInstances(ctx, pp)
		if err != nil {
			return false, err.Error()
		}
		return len(vms) > 0, fmt.Sprintf("%d instances; CAA log ends: %s", len(vms), n.LogTail("cloud-api-adaptor", 600))
	}); err != nil {
		t.Fatal(err)
	}
	ph.done("pod created → instance inserted")
	// One per sandbox attempt: kubelet retries a failed RunPodSandbox, so
	// more than one may be seen later; at the first sight, one.
	t.Logf("%d instance(s) at the first sight", len(vms))
	for _, vm := range vms {
		t.Logf("podVM %s: %s, labels %v", vm.Name, vm.Status, vm.Labels)
	}

	// The provider's start-up Events on the pod.
	var reasons []string
	if err := poll(ctx, reasonRequested+" and "+reasonCreated+" Events", func() (bool, string) {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err.Error()
		}
		reasons = reasons[:0]
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
		}
		return slices.Contains(reasons, reasonRequested) && slices.Contains(reasons, reasonCreated), "reasons " + strings.Join(reasons, ",")
	}); err != nil {
		t.Error(err)
	}
	ph.done("→ PodVMRequested, PodVMCreated")

	// The podVM boots (podvm.go): the real forwarder in the VM's network
	// namespace at the instance's address, the stand-in agent behind it.
	var boot PodVMEvent
	if err := poll(ctx, "the podVM booted", func() (bool, string) {
		for _, e := range n.PodVMEvents() {
			if e.What == "booted" {
				boot = e
				return true, ""
			}
			if strings.HasPrefix(e.What, "boot failed") {
				return false, e.Name + ": " + e.What
			}
		}
		return false, "no boot yet"
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("podVM %s booted at %s, %.1fs after the pod was created", boot.Name, boot.IP, boot.At.Sub(created).Seconds())
	ph.done("→ podVM booted (forwarder listening)")

	// Running: kubelet → containerd → kata's shim → CAA → the forwarder →
	// the stand-in agent, and back. kubelet's Warnings on the way are
	// recorded (MissingClusterDNS: no cluster DNS runs here; kubelet falls
	// back to the node's resolv.conf and goes on).
	var running time.Time
	if err := poll(ctx, "pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if containersRunning(p) {
			running = time.Now()
			return true, ""
		}
		return false, string(p.Status.Phase) + " " + containerState(p)
	}); err != nil {
		t.Error(err)
	} else {
		t.Logf("pod Running %.1fs after it was created", running.Sub(created).Seconds())
	}
	ph.done("→ pod Running")

	// Its log line comes back through the chain: the stand-in prints the
	// container's arguments as the sleeper image does, the shim reads it
	// with ReadStdout through CAA and the forwarder, containerd writes it
	// to the pod's log, kubelet serves it.
	if !running.IsZero() {
		if err := poll(ctx, "pod log", func() (bool, string) {
			out, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(string(out), "serving"), fmt.Sprintf("%q", out)
		}); err != nil {
			t.Error(err)
		}
		ph.done("→ log through the chain")
	}
	// An exec as a user runs it: the real kubectl against the API server,
	// which proxies it to kubelet's exec endpoint, kubelet to containerd's
	// streaming server, containerd to kata's shim (Exec, Start), the shim
	// to the agent through CAA and the forwarder (ExecProcess, then
	// ReadStdout and WaitProcess for its output and exit code).
	if !running.IsZero() {
		if err := checkExec(ctx, t, n, ks.kubeconfig, ns, name); err != nil {
			t.Error(err)
		}
		ph.done("→ kubectl exec through the chain")
	}
	// The pod's network: a connection from the node to the pod's IP goes
	// through CAA's VXLAN end in the pod's namespace on the node, to the
	// forwarder's end in the podVM, to a listener in the guest's pod
	// namespace (the test's, standing in for the container's server).
	if !running.IsZero() {
		if err := checkPodNetwork(ctx, t, cs, ns, name, boot.PodNS); err != nil {
			t.Error(err)
		}
		ph.done("→ node to pod IP through the VXLAN tunnel")
	}
	record("at Running")
	recorded = true

	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, "pod gone", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, string(p.Status.Phase) + " " + containerState(p)
	}); err != nil {
		t.Error(err)
	}
	ph.done("delete → pod gone")
	if err := poll(ctx, "0 VMs left", func() (bool, string) {
		vms, err := gceInstances(ctx, pp)
		if err != nil {
			return false, err.Error()
		}
		return len(vms) == 0, fmt.Sprintf("%d instances: %+v", len(vms), vms)
	}); err != nil {
		t.Error(err)
	}
	ph.done("→ 0 VMs left")
	if err := poll(ctx, "the podVM shut down", func() (bool, string) {
		for _, e := range n.PodVMEvents() {
			if e.Name == boot.Name && strings.HasPrefix(e.What, "shut down") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", n.PodVMEvents())
	}); err != nil {
		t.Error(err)
	}
	ph.done("→ podVM shut down")
	for _, e := range n.PodVMEvents() {
		t.Logf("podVM event %s: %s %s %s", e.At.Format("15:04:05.000"), e.Name, e.IP, e.What)
	}
	record("after the delete")

	stopAndCheck(t, n, ph)
}

func logEvents(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	for _, e := range evs.Items {
		t.Logf("event %s %s/%s x%d: %s", e.Type, e.Source.Component, e.Reason, e.Count, clip(e.Message))
	}
}

// clip keeps a log line readable in the test's output.
func clip(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}

// kubectlBin is the kubectl a user would run; the exec check skips
// without it.
const kubectlBin = "/usr/bin/kubectl"

// checkExec runs `kubectl exec` in the pod's container three times and
// checks what comes back: the stand-in agent's exec'd process prints its
// arguments and exits 0, or N for `exit N` (kubectl then exits N, "command
// terminated with exit code N"); with `-i` and `cat`, what kubectl's stdin
// carried comes back on its stdout and the process exits when stdin ends. It logs the output, exit status and time
// of each, and the agent's lines about them.
func checkExec(ctx context.Context, t *testing.T, n *Node, kubeconfig, ns, name string) error {
	t.Helper()
	if _, err := os.Stat(kubectlBin); err != nil {
		t.Logf("kubectl exec not run: %v", err)
		return nil
	}
	var errs []error
	const typed = "typed into kubectl exec -i\nand a second line\n"
	for _, c := range []struct {
		args   []string
		stdin  string // non-empty: kubectl exec -i, this on its stdin
		status int
		stderr string
	}{
		{[]string{"/sleeper", "exec", "through", "the", "chain"}, "", 0, ""},
		{[]string{"/sleeper", "exit", "3"}, "", 3, "command terminated with exit code 3"},
		// Interactive: stdin through kubelet, containerd and the shim
		// (WriteStdin, then CloseStdin at its end) to the process and
		// back.
		{[]string{"/sleeper", "cat"}, typed, 0, ""},
	} {
		args := []string{"--kubeconfig", kubeconfig, "-n", ns, "exec", name, "-c", "vllm"}
		if c.stdin != "" {
			args = append(args, "-i")
		}
		args = append(append(args, "--"), c.args...)
		ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		start := time.Now()
		cmd := exec.CommandContext(ectx, kubectlBin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if c.stdin != "" {
			cmd.Stdin = strings.NewReader(c.stdin)
		}
		err := cmd.Run()
		cancel()
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status, err = ee.ExitCode(), nil
		}
		t.Logf("kubectl %s: %s, exit status %d; stdout %q; stderr %q", strings.Join(args[4:], " "), time.Since(start).Round(time.Millisecond), status, stdout.String(), stderr.String())
		want := strings.Join(c.args, " ") + "\n"
		if c.stdin != "" {
			want = c.stdin
		}
		if err != nil || status != c.status || stdout.String() != want || !strings.Contains(stderr.String(), c.stderr) {
			errs = append(errs, fmt.Errorf("kubectl exec -- %s: %v, status %d, stdout %q, stderr %q; want status %d, stdout %q, stderr with %q",
				strings.Join(c.args, " "), err, status, stdout.String(), stderr.String(), c.status, want, c.stderr))
		}
	}
	for i := range n.PodVMLogs() {
		for _, l := range n.LogLines(fmt.Sprintf("podvm-%d", i+1), "ExecProcess", "WriteStdin", "CloseStdin") {
			t.Logf("podVM %d: %s", i+1, clip(l))
		}
	}
	return errors.Join(errs...)
}

// checkPodNetwork serves one line in the podVM's pod namespace and reads
// it from the node at the pod's IP.
func checkPodNetwork(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, podNS string) error {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	l, err := ListenInNetns(podNS, ":8080")
	if err != nil {
		return err
	}
	defer l.Close()
	const line = "hello from the podVM's pod namespace\n"
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte(line))
	}()
	d := net.Dialer{Timeout: 10 * time.Second}
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, "8080"))
	if err != nil {
		return fmt.Errorf("node → pod IP %s:8080: %w", p.Status.PodIP, err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != line {
		return fmt.Errorf("node → pod IP %s:8080: read %q, %v; want %q", p.Status.PodIP, got, err, line)
	}
	t.Logf("node → pod IP %s:8080 answered from the podVM's pod namespace in %s: %q", p.Status.PodIP, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(got)))
	return nil
}

// kataRun is a node with the kata stage up and a namespace for the GPU
// pod, as each kata scenario starts.
type kataRun struct {
	// kubeconfig is the control plane's admin kubeconfig, for kubectl.
	kubeconfig string
	cp         *controlplane.ControlPlane
	ph         *phases
	ctx        context.Context
	cs         kubernetes.Interface
	n          *Node
	pp         *PeerPods
}

const gpuNamespace = "gpu"

// startKata starts the control plane, the node with kata-remote, the
// emulator, our manifests, CAA and the podVM watcher; makes the node a
// GPU node as the device plugin would; and makes the pod's namespace.
func startKata(t *testing.T, k *Kata) *kataRun {
	t.Helper()
	ph := &phases{t: t, last: time.Now()}
	sleeper := buildSleeper(t)
	cp, n := StartForTest(t, Options{ImageBinary: sleeper, Kata: k, Containerd: k.Containerd})
	ph.done("control plane + node Ready")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	t.Cleanup(cancel)
	pp, err := n.StartPeerPods(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	ph.done("emulator + install + CAA up")
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	setNodeGPUs(ctx, t, cs, n.Name, 1)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gpuNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(gpuNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ph.done("nvidia.com/gpu allocatable (kubelet's next status update), namespace")
	return &kataRun{kubeconfig: cp.Kubeconfig, cp: cp, ph: ph, ctx: ctx, cs: cs, n: n, pp: pp}
}

// kataOrSkip is the kata stage's binaries, or the test skipped saying
// how to get them (KataFromEnv's ErrNoKata), or failed on what is wrong.
func kataOrSkip(t *testing.T) Kata {
	t.Helper()
	k, err := KataFromEnv()
	if errors.Is(err, ErrNoKata) {
		t.Skip("the kata shim, CAA and the emulator are not given (" + EnvKataShim + ", " + EnvCAA + ", …): run " + KataMakeCommand)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// deleteLeavingNoVMs deletes the GPU namespace's pod name and waits until
// it is gone and the emulator holds no instance: what a scenario ends on.
func (ks *kataRun) deleteLeavingNoVMs(t *testing.T, name string) {
	t.Helper()
	if err := ks.cs.CoreV1().Pods(gpuNamespace).Delete(ks.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ks.ctx, "pod gone", func() (bool, string) {
		_, err := ks.cs.CoreV1().Pods(gpuNamespace).Get(ks.ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	}); err != nil {
		t.Error(err)
	}
	if err := poll(ks.ctx, "0 VMs left", func() (bool, string) {
		vms, err := gceInstances(ks.ctx, ks.pp)
		if err != nil {
			return false, err.Error()
		}
		return len(vms) == 0, fmt.Sprintf("%d instances", len(vms))
	}); err != nil {
		t.Error(err)
	}
	ks.ph.done("delete → pod gone, 0 VMs")
}

// gpuPod is the scenarios' pod: kata-remote, one nvidia.com/gpu, bound to
// the node (no scheduler runs), the harness's image, "serving" its
// argument.
func gpuPod(node, name string) *corev1.Pod {
	rc := KataHandler
	automount := false
	grace := int64(10)
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gpuNamespace},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RuntimeClassName:              &rc,
			AutomountServiceAccountToken:  &automount,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "vllm", Image: Image, ImagePullPolicy: corev1.PullNever,
				Args:      []string{"serving"},
				Resources: corev1.ResourceRequirements{Limits: gpu, Requests: gpu},
			}},
		},
	}
}

// stopAndCheck tears the node down and fails the test for anything of it
// left on the machine.
func stopAndCheck(t *testing.T, n *Node, ph *phases) {
	t.Helper()
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
	for pname, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("%s (pid %d) still runs after teardown", pname, pid)
		}
	}
}

// containersRunning: the pod is Running and so is each of its containers.
// The phase alone is not enough: a container whose start failed and
// waits to be retried (RunContainerError) counts as restarting, and the
// pod's phase is Running while nothing runs.
func containersRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// setNodeGPUs makes the node a GPU node as the device plugin would: count
// nvidia.com/gpu on the Node's capacity (status is the kubelet's to write,
// so it is patched as the plugin's registration would), then waits for
// kubelet's next status update to make them allocatable, which its
// admission of a pod reads.
func setNodeGPUs(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, count int64) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"status":{"capacity":{"nvidia.com/gpu":"%d"}}}`, count))
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, "nvidia.com/gpu allocatable", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable["nvidia.com/gpu"]
		return q.Value() == count, "allocatable " + q.String()
	}); err != nil {
		t.Fatal(err)
	}
}
