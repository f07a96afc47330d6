package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// gkeFixture is the remediation tests' GKE containerd configuration for
// containerd 2.x (version 3), the file GKE's node bootstrap writes.
const gkeFixture = "../../gcp-t4/internal/remediate/testdata/gke-v3.toml"

// gkeConfig is GKE's rewrite of containerd's configuration on this node:
// the fixture, with what this machine cannot run as GKE's node does
// replaced by the harness's own (each named below); like GKE's, it has no
// kata-remote handler and no import of kata-deploy's drop-in, and it sets
// discard_unpacked_layers = true.
func gkeConfig(n *Node) ([]byte, error) {
	data, err := os.ReadFile(gkeFixture)
	if err != nil {
		return nil, err
	}
	s := string(data)
	if strings.Contains(s, KataHandler) {
		return nil, fmt.Errorf("%s names %s: it is not GKE's rewrite", gkeFixture, KataHandler)
	}
	for _, r := range []struct{ old, new string }{
		// The node's own root, state and sockets (GKE's are the defaults,
		// /var/lib/containerd and /run/containerd: this machine's, not the
		// node's); kubelet dials the node's socket.
		{"version = 3\n", fmt.Sprintf("version = 3\nroot = %q\nstate = %q\n", n.path("containerd/root"), n.path("containerd/state"))},
		// No registry here: the harness's image is the sandbox image.
		{`sandbox = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"`, fmt.Sprintf("sandbox = %q", Image)},
		// The CNI plugins and configuration the node has.
		{`bin_dirs = ["/home/kubernetes/bin"]`, fmt.Sprintf("bin_dirs = [%q]", n.bin.CNIDir)},
		{`conf_dir = "@TMP@/cni/net.d"`, fmt.Sprintf("conf_dir = %q", n.path("cni/net.d"))},
		{"  conf_template = \"@TMP@/home/containerd/cni.template\"\n", ""},
		// PID 1 is not systemd here and kubelet's driver is cgroupfs.
		{"SystemdCgroup = true", fmt.Sprintf("SystemdCgroup = false\n  BinaryName = %q", n.bin.Runc)},
		// This machine's root may not lower oom_score_adj (node.go).
		{"  max_container_log_line_size = 262144\n", "  max_container_log_line_size = 262144\n  restrict_oom_score_adj = true\n"},
		{`path = "@TMP@/home/containerd/opt/containerd"`, fmt.Sprintf("path = %q", n.path("containerd/opt"))},
		{"@TMP@", n.path("gke")},
	} {
		if r.old != "@TMP@" && !strings.Contains(s, r.old) {
			return nil, fmt.Errorf("%s: no %q; the fixture changed", gkeFixture, r.old)
		}
		s = strings.ReplaceAll(s, r.old, r.new)
	}
	s += fmt.Sprintf("\n[grpc]\n  address = %q\n\n[ttrpc]\n  address = %q\n\n[metrics]\n  address = \"\"\n", n.Socket, n.Socket+".ttrpc")
	return []byte(s), nil
}

// podSeen is what the test records of a pod as it changes.
func podSeen(p *corev1.Pod) string {
	var b strings.Builder
	b.WriteString(string(p.Status.Phase))
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, " %s(restarts %d, ", c.Name, c.RestartCount)
		switch {
		case c.State.Running != nil:
			fmt.Fprintf(&b, "running since %s, %s)", c.State.Running.StartedAt.Format("15:04:05"), shortID(c.ContainerID))
		case c.State.Waiting != nil:
			fmt.Fprintf(&b, "waiting %s)", c.State.Waiting.Reason)
		case c.State.Terminated != nil:
			fmt.Fprintf(&b, "terminated %s exit %d)", c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodReadyToStartContainers {
			fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
		}
	}
	return b.String()
}

func shortID(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:]
	}
	return id[:min(12, len(id))]
}

// waitPodRunning waits until the pod runs every container.
func waitPodRunning(ctx context.Context, cs kubernetes.Interface, ns, name string, limit time.Duration) (*corev1.Pod, error) {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var p *corev1.Pod
	err := poll(wctx, name+" Running", func() (bool, string) {
		var err error
		p, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return containersRunning(p), podSeen(p)
	})
	return p, err
}

// sidecarRun is the remediation sidecar running as a host process.
type sidecarRun struct {
	p    *proc
	seen int
}

// startSidecar runs `gcp-t4-node remediate` as the DaemonSet runs it:
// its args, NODE_NAME and POD_NAMESPACE, its ServiceAccount's token (in a
// kubeconfig); only the host paths differ (the node's directory, not
// /etc/containerd and /opt/kata, and the host's / is / itself: a host
// process), and systemd is the stand-in. It returns once /readyz answers
// 200.
func startSidecar(ctx context.Context, t *testing.T, n *Node, cp *controlplane.ControlPlane, cs kubernetes.Interface, bin, ns string) *sidecarRun {
	t.Helper()
	bus, err := n.ServeSystemd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "gcp-t4-remediate",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the sidecar's ServiceAccount: %v", err)
	}
	kc := n.path("remediate.kubeconfig")
	if err := cp.WriteKubeconfig(kc, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{"remediate",
		// install/components/gke-remediation/daemonset.yaml's args, the
		// host root aside.
		"--host-root=/", "--cri-socket=", "--listen=" + listen, "--daemonset=gcp-t4-remediate",
		// The DaemonSet's 1200s: the sidecar keeps kata-remote's timeout
		// only for a configuration under /opt/kata (katatimeout.go
		// kataPaths), and this node's is in its own directory; the
		// harness writes the sidecar's drop-in itself, byte for byte.
		// 0 leaves kata-remote's configuration alone.
		"--create-container-timeout=0",
		// The node's paths for what the DaemonSet mounts at the host's.
		"--config=" + n.ContainerdConfig(), "--kata-dir=" + n.KataDir(), "--lock=" + n.path("kata-deploy.lock"),
		"--containerd-binary=" + n.bin.Containerd, "--systemd-bus=" + bus, "--kubeconfig=" + kc,
	}
	env := append(os.Environ(), "NODE_NAME="+n.Name, "POD_NAMESPACE="+ns)
	p, err := n.start("remediate", env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sidecar: gcp-t4-node %s", strings.Join(args, " "))
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := poll(readyCtx, "the sidecar Ready", func() (bool, string) {
		if err := p.exited(); err != nil {
			return false, err.Error()
		}
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s; log ends: %s", resp.StatusCode, strings.TrimSpace(string(b)), n.LogTail("remediate", 800))
	}); err != nil {
		t.Fatal(err)
	}
	return &sidecarRun{p: p}
}

// log writes the sidecar's lines new since the last call.
func (s *sidecarRun) log(t *testing.T, n *Node) {
	t.Helper()
	lines := n.LogLines("remediate", "")
	for _, l := range lines[min(s.seen, len(lines)):] {
		t.Logf("sidecar: %s", clip(l))
	}
	s.seen = len(lines)
}

// gkeResetAndWatch writes GKE's configuration and restarts containerd as
// GKE's node bootstrap does, then watches, recording each change with
// its time from the rewrite, until the sidecar has restored kata-deploy's
// import and restarted containerd, kata-remote is back in the Node's
// runtime handlers and the pod runs every container and is Ready. It
// fails the test if that does not happen within 6 minutes.
//
// inWindow, when not nil, runs right after GKE's restart, while containerd
// runs without kata-remote and before the sidecar's repair.
func gkeResetAndWatch(ctx context.Context, t *testing.T, n *Node, cs kubernetes.Interface, ns, pod string, inWindow func()) {
	t.Helper()
	orig, err := os.ReadFile(n.ContainerdConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd's main file before (kata-deploy's import):\n%s", firstLines(string(orig), 3))
	gke, err := gkeConfig(n)
	if err != nil {
		t.Fatal(err)
	}
	restartsBefore := len(n.SystemdCalls())
	reset := time.Now()
	since := func() string { return fmt.Sprintf("%5.1fs", time.Since(reset).Seconds()) }
	if err := n.RestartContainerd(ctx, gke); err != nil {
		t.Fatalf("GKE's restart of containerd: %v", err)
	}
	t.Logf("%s GKE's config written, containerd restarted by \"GKE\" (not the sidecar)", since())
	if inWindow != nil {
		inWindow()
		t.Logf("%s in the window: done", since())
	}
	lastPod, lastHandlers, lastFile := "", "", ""
	podStates := 0 // the pod's states seen, the first included
	var restored, restarted, handlerBack, podBack time.Duration
	watchCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	werr := poll(watchCtx, "the sidecar's repair, kata-remote back, the pod Running", func() (bool, string) {
		data, _ := os.ReadFile(n.ContainerdConfig())
		file := "GKE's (no import)"
		if strings.Contains(string(data), n.KataDeployDropIn()) {
			file = "kata-deploy's import restored"
			if restored == 0 {
				restored = time.Since(reset)
			}
		}
		if file != lastFile {
			t.Logf("%s containerd's main file: %s", since(), file)
			lastFile = file
		}
		if calls := n.SystemdCalls(); len(calls) > restartsBefore && restarted == 0 {
			restarted = time.Since(reset)
			t.Logf("%s systemd stand-in: %s", since(), calls[len(calls)-1])
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			var hs []string
			for _, h := range node.Status.RuntimeHandlers {
				hs = append(hs, h.Name)
			}
			slices.Sort(hs)
			if got := strings.Join(hs, ","); got != lastHandlers {
				t.Logf("%s Node runtimeHandlers: [%s]", since(), got)
				lastHandlers = got
			}
			if restarted != 0 && slices.Contains(hs, KataHandler) && handlerBack == 0 {
				handlerBack = time.Since(reset)
			}
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if s := podSeen(p); s != lastPod {
			t.Logf("%s pod %s: %s", since(), pod, s)
			lastPod = s
			podStates++
		}
		if restarted != 0 && containersRunning(p) && isReady(p) && podBack == 0 {
			podBack = time.Since(reset)
		}
		return restored != 0 && restarted != 0 && handlerBack != 0 && podBack != 0,
			fmt.Sprintf("file %s, restarts by the sidecar %v, handlers [%s], pod %s", file, n.SystemdCalls(), lastHandlers, lastPod)
	})
	for _, l := range n.LogLines("containerd", "kata-remote", "level=error", "level=warn") {
		t.Logf("containerd: %s", clip(l))
	}
	for _, l := range n.LogLines("kubelet", "kata-remote", "SandboxChanged", "Killing", "runtime handler") {
		t.Logf("kubelet: %s", clip(l))
	}
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("after GKE's rewrite: import restored at %.1fs, containerd restarted by the sidecar at %.1fs, kata-remote on the Node at %.1fs; the pod Running and Ready at %.1fs, in %d state(s) in all",
		restored.Seconds(), restarted.Seconds(), handlerBack.Seconds(), podBack.Seconds(), podStates)
}

// logSameContainer says whether the pod's container lived through it.
func logSameContainer(t *testing.T, before, after *corev1.Pod) {
	t.Helper()
	t.Logf("after: %s", podSeen(after))
	if len(before.Status.ContainerStatuses) == 1 && len(after.Status.ContainerStatuses) == 1 {
		b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
		t.Logf("the Running pod: same container %v (%s → %s), restarts %d → %d", b.ContainerID == a.ContainerID, shortID(b.ContainerID), shortID(a.ContainerID), b.RestartCount, a.RestartCount)
		if b.ContainerID != a.ContainerID {
			t.Errorf("the pod's container changed under the repair: %s → %s", b.ContainerID, a.ContainerID)
		}
	}
}

// TestKataRemoteContainerdConfigReset: the remediation sidecar
// (gcp-t4-node remediate) runs as a host process against the node, with
// the flags, ServiceAccount and settings our DaemonSet gives it, and
// systemd's D-Bus API served by a stand-in that restarts the node's
// containerd. kata-deploy's drop-in holds kata-remote, imported by the
// main file. A kata-remote pod is Running when "GKE" rewrites containerd's
// configuration (the remediation tests' GKE fixture: no kata-remote, no
// import) and restarts containerd. The test records, with times from the
// rewrite, the sidecar's lines, its restart of containerd, the Node's
// runtime handlers, the Running pod's state and Events; it asserts the
// import restored, containerd restarted by the sidecar, kata-remote back
// in the Node's runtime handlers, the pod's container the same, and a new
// kata-remote pod Running after.
func TestKataRemoteContainerdConfigReset(t *testing.T) {
	k := kataOrSkip(t)
	if k.GcpT4Node == "" || k.Nydus == "" {
		t.Fatalf("%s and %s are not set: run %s", EnvGcpT4Node, EnvNydus, KataMakeCommand)
	}
	k.AgentPull = 5 * time.Second
	k.KataDeployDropIn = true
	k.Remediation = true
	ks := startKata(t, &k)
	ph, ctx, cs, n, pp := ks.ph, ks.ctx, ks.cs, ks.n, ks.pp
	// Three GPU pods at once, allocatable before the first: kubelet
	// admits the window's pod at once, before its next status update.
	setNodeGPUs(ctx, t, cs, n.Name, 3)
	const ns, first, second, window = gpuNamespace, "vllm", "vllm-after", "vllm-window"
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(n.Name, first), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := waitPodRunning(ctx, cs, ns, first, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %s", podSeen(before))
	logEvents(ctx, t, cs, ns, first)
	ph.done("pod Running")

	side := startSidecar(ctx, t, n, ks.cp, cs, k.GcpT4Node, pp.Namespace)
	ph.done("sidecar up and Ready")
	side.log(t, n)

	// A kata-remote pod created in the window between GKE's restart of
	// containerd (no kata-remote) and the sidecar's (kata-remote back).
	var windowCreated time.Time
	gkeResetAndWatch(ctx, t, n, cs, ns, first, func() {
		windowCreated = time.Now()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(n.Name, window), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	side.log(t, n)
	logEvents(ctx, t, cs, ns, first)
	if p, err := waitPodRunning(ctx, cs, ns, window, 5*time.Minute); err != nil {
		t.Error(err)
	} else {
		t.Logf("pod %s, created in the window, Running %.1fs after it was created: %s", window, time.Since(windowCreated).Seconds(), podSeen(p))
	}
	failed := 0
	if evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + window}); err == nil {
		for _, e := range evs.Items {
			if e.Reason == "FailedCreatePodSandBox" {
				failed += int(max(e.Count, 1))
			}
		}
	}
	t.Logf("pod %s: %d FailedCreatePodSandBox before it ran", window, failed)
	logEvents(ctx, t, cs, ns, window)
	for _, l := range n.LogLines("kubelet", window, "no runtime for") {
		t.Logf("kubelet: %s", clip(l))
	}
	ph.done("the window's pod Running")
	after, err := cs.CoreV1().Pods(ns).Get(ctx, first, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logSameContainer(t, before, after)
	ph.done("GKE's rewrite → repaired")
	vms, _ := gceInstances(ctx, pp)
	t.Logf("%d instance(s) now", len(vms))

	// A new kata-remote pod after the repair.
	created := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(n.Name, second), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := waitPodRunning(ctx, cs, ns, second, 5*time.Minute); err != nil {
		t.Error(err)
		logEvents(ctx, t, cs, ns, second)
	} else {
		t.Logf("new pod %s Running %.1fs after it was created: %s", second, time.Since(created).Seconds(), podSeen(p))
	}
	ph.done("new kata-remote pod Running")
	side.log(t, n)

	for _, name := range []string{first, second, window} {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	if err := poll(ctx, "pods gone, 0 VMs", func() (bool, string) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		vms, err := gceInstances(ctx, pp)
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0 && len(vms) == 0, fmt.Sprintf("%d pods, %d instances", len(pods.Items), len(vms))
	}); err != nil {
		t.Error(err)
	}
	ph.done("delete → pods gone, 0 VMs")
	side.p.stop(30 * time.Second)
	side.log(t, n)
	t.Logf("systemd stand-in calls: %v", n.SystemdCalls())
	stopAndCheck(t, n, ph)
}

// applyManifest creates the objects of one of install's YAML files that
// the remediation sidecar needs (ServiceAccount, RBAC, its DaemonSet),
// as `kubectl apply` would; no controller-manager runs the DaemonSet.
func applyManifest(ctx context.Context, cs kubernetes.Interface, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var obj any
		switch meta.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		case "":
			continue
		default:
			return fmt.Errorf("%s: a %s, which this test does not apply", file, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return fmt.Errorf("%s: %s: %w", file, meta.Kind, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("%s: create %s: %w", file, meta.Kind, err)
		}
	}
	return nil
}

// sidecarComponent is install's component of the remediation sidecar.
const sidecarComponent = "../../install/components/gke-remediation"

// TestSidecarRestoresKataRemote is the config-reset scenario without the
// kata stage, so it runs in make test: the same node layout (kata-deploy's
// drop-in, imported, with the nydus stand-in; the shim and kata's
// configuration placeholders no pod runs), the sidecar as a host process
// with its DaemonSet's args and ServiceAccount (install's
// components/gke-remediation objects applied), a plain (runc) pod Running
// when "GKE" rewrites containerd's configuration and restarts it. It
// asserts the import restored, containerd restarted by the sidecar,
// kata-remote back in the Node's runtime handlers (kubelet's report, which
// the sidecar reads with no CRI socket), the pod's container the same, a
// new pod Running after, and nothing of the node left. Twice: kata-deploy
// with the chart's nydus mapping (the documented install), and kata-deploy
// without a snapshotter mapping, where the sidecar must not add one the
// node does not run (it did: docs/node-harness.md).
func TestSidecarRestoresKataRemote(t *testing.T) {
	t.Run("nydus", func(t *testing.T) { testSidecarRestoresKataRemote(t, true) })
	t.Run("no-snapshotter", func(t *testing.T) { testSidecarRestoresKataRemote(t, false) })
}

func testSidecarRestoresKataRemote(t *testing.T, withNydus bool) {
	bin, nydus := os.Getenv(EnvGcpT4Node), os.Getenv(EnvNydus)
	ph := &phases{t: t, last: time.Now()}
	sleeper := buildSleeper(t)
	if !testing.Short() && os.Geteuid() == 0 && (bin == "" || nydus == "") {
		t.Fatalf("%s and %s are not set: run %s", EnvGcpT4Node, EnvNydus, MakeCommand)
	}
	opts := Options{ImageBinary: sleeper, KataDeployNydus: nydus}
	if !withNydus {
		opts.KataDeployNydus, opts.KataDeployNoSnapshotter = "", true
	}
	cp, n := StartForTest(t, opts)
	ph.done("control plane + node Ready")
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{installNamespace, "sidecar-e2e"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"rbac.yaml", "daemonset.yaml"} {
		if err := applyManifest(ctx, cs, filepath.Join(sidecarComponent, f)); err != nil {
			t.Fatal(err)
		}
	}
	// kata-deploy labels the nodes it installed on; the sidecar waits
	// while kata-deploy's files are there and the label is not.
	patch := []byte(`{"metadata":{"labels":{"katacontainers.io/kata-runtime":"true"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns, first, second = "sidecar-e2e", "hello", "hello-after"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plainPod := func(name string) *corev1.Pod {
		automount := false
		grace := int64(10)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName: n.Name, AutomountServiceAccountToken: &automount, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "hello", Image: Image, ImagePullPolicy: corev1.PullNever, Args: []string{"hello"}}},
			},
		}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, plainPod(first), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := waitPodRunning(ctx, cs, ns, first, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ph.done("pod Running")
	side := startSidecar(ctx, t, n, cp, cs, bin, installNamespace)
	ph.done("sidecar up and Ready")
	side.log(t, n)
	gkeResetAndWatch(ctx, t, n, cs, ns, first, nil)
	side.log(t, n)
	after, err := cs.CoreV1().Pods(ns).Get(ctx, first, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logSameContainer(t, before, after)
	ph.done("GKE's rewrite → repaired")
	if !withNydus {
		noSnapshotterAdded(t, n)
	}
	created := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, plainPod(second), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := waitPodRunning(ctx, cs, ns, second, 3*time.Minute); err != nil {
		t.Error(err)
	} else {
		t.Logf("new pod %s Running %.1fs after it was created: %s", second, time.Since(created).Seconds(), podSeen(p))
	}
	ph.done("new pod Running")
	for _, name := range []string{first, second} {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
	if err := poll(ctx, "pods gone", func() (bool, string) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	}); err != nil {
		t.Error(err)
	}
	ph.done("delete → pods gone")
	side.p.stop(30 * time.Second)
	side.log(t, n)
	t.Logf("systemd stand-in calls: %v", n.SystemdCalls())
	stopAndCheck(t, n, ph)
}

// noSnapshotterAdded: with kata-deploy's handler naming no snapshotter, the
// files containerd loads after the sidecar's repair name none either (no
// nydus proxy plugin, no runtime_platforms entry), and kubelet never went
// looking for a snapshotter's directory.
func noSnapshotterAdded(t *testing.T, n *Node) {
	t.Helper()
	// The main file, the sidecar's own directory beside it (its drop-in,
	// remediate's default --dropin-dir) and kata-deploy's drop-in.
	dir := filepath.Dir(n.ContainerdConfig())
	ours, err := filepath.Glob(filepath.Join(dir, "caa-gcp-t4", "*.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{n.ContainerdConfig(), n.KataDeployDropIn()}, ours...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "nydus") || strings.Contains(string(data), "runtime_platforms") {
			t.Errorf("%s names a snapshotter kata-deploy did not map:\n%s", p, data)
		}
	}
	if lines := n.LogLines("kubelet", "nydus"); len(lines) > 0 {
		t.Errorf("kubelet looked for a snapshotter the node does not run: %s", clip(lines[0]))
	}
	if lines := n.LogLines("remediate", "nydus"); len(lines) > 0 {
		t.Errorf("the sidecar names nydus: %s", clip(lines[0]))
	}
	t.Logf("no snapshotter added: the node's containerd files under %s name none, kubelet and the sidecar never mention nydus", filepath.Base(dir))
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func firstLines(s string, k int) string {
	lines := strings.SplitN(s, "\n", k+1)
	return strings.Join(lines[:min(k, len(lines))], "\n")
}
