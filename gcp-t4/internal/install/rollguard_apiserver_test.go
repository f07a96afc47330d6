package install

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane/doccmd"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kataPodOn creates a pod of RuntimeClass rc in ns, bound to node (none
// when ""), with phase as its kubelet would report it: what the roll
// guard counts is what the API server holds, scheduler and kubelet
// included.
func (e *env) kataPodOn(t *testing.T, ns, name, rc, node string, phase corev1.PodPhase) {
	t.Helper()
	ctx := t.Context()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{RuntimeClassName: &rc, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = e.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	if node != "" {
		// The scheduler's part.
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		if err := e.cs.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bind pod %s/%s to %s: %v", ns, name, node, err)
		}
	}
	if phase != "" {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = phase
		if _, err := e.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod %s/%s status: %v", ns, name, err)
		}
	}
}

// podNamespace makes ns with the "default" ServiceAccount the
// ServiceAccount controller would add (admission needs it for a pod).
func (e *env) podNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if ns != metav1.NamespaceDefault {
		t.Cleanup(func() { _ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// testRollGuard: a change that rolls CAA's DaemonSet while kata-remote
// pods run on its nodes is refused (exit 2, nothing written) unless
// --restart-peer-pods is given; --dry-run lists them and succeeds; a
// first install, a change that leaves the pod template alone and a roll
// with no such pod proceed; pods of another RuntimeClass, finished ones
// and unscheduled ones are not counted.
func (e *env) testRollGuard(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t,
		node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"),
		node("worker-2", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	for _, rc := range []string{RuntimeClassName, "kata-qemu"} {
		mustCreate(t, func() error {
			_, err := e.cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: rc}, metav1.CreateOptions{})
			return err
		})
		t.Cleanup(func() { _ = e.cs.NodeV1().RuntimeClasses().Delete(context.Background(), rc, metav1.DeleteOptions{}) })
	}
	e.podNamespace(t, "default")
	e.podNamespace(t, "gpu")
	e.kataPodOn(t, "gpu", "vllm", RuntimeClassName, "worker-1", corev1.PodRunning)
	e.kataPodOn(t, "default", "train", RuntimeClassName, "worker-2", corev1.PodPending)
	e.kataPodOn(t, "default", "other-runtime", "kata-qemu", "worker-1", corev1.PodRunning)
	e.kataPodOn(t, "default", "finished", RuntimeClassName, "worker-1", corev1.PodSucceeded)
	e.kataPodOn(t, "default", "unscheduled", RuntimeClassName, "", "")

	// A first install has no CAA to restart: it proceeds under live pods.
	if code, out, errs := e.install(t, "--image=ghcr.io/you/caa-gcp-t4:v1"); code != 0 {
		t.Fatalf("first install with kata-remote pods: exit %d\n%s\n%s", code, out, errs)
	}
	defer e.uninstall(t)
	// Every object install owns, but the ResourceQuota, whose status the
	// test's stand-in quota controller may write at any time.
	versions := func() map[string]string {
		v := e.resourceVersions(t)
		maps.DeleteFunc(v, func(k, _ string) bool { return strings.HasPrefix(k, "resourcequotas ") })
		return v
	}
	before := versions()
	hash0 := e.daemonSet(t).Spec.Template.Annotations[ConfigHashAnnotation]
	unchanged := func(what string) {
		t.Helper()
		after := versions()
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s wrote %s: resourceVersion %s → %q", what, k, v, after[k])
			}
		}
		if len(after) != len(before) {
			t.Errorf("%s: %d objects of ours, was %d", what, len(after), len(before))
		}
		if h := e.daemonSet(t).Spec.Template.Annotations[ConfigHashAnnotation]; h != hash0 {
			t.Errorf("%s: config hash %q → %q", what, hash0, h)
		}
	}
	listed := []string{"2 kata-remote pod(s) running or starting on 2 node(s)",
		"pod default/train (node worker-2, Pending)", "pod gpu/vllm (node worker-1, Running)",
		"each restarts on a new podVM", "REAPER_GRACE (10m0s)"}
	notCounted := func(what, s string) {
		t.Helper()
		for _, p := range []string{"other-runtime", "finished", "unscheduled"} {
			if strings.Contains(s, p) {
				t.Errorf("%s names pod %s, which a CAA restart does not restart:\n%s", what, p, s)
			}
		}
	}

	// A settings change and an image upgrade: refused, exit 2, nothing
	// written.
	for _, args := range [][]string{{"--set", "GCP_ZONES=auto"}, {"--image=ghcr.io/you/caa-gcp-t4:v2"}} {
		code, out, errs := e.installArgs(t, args...)
		if code != 2 {
			t.Errorf("install %v under kata-remote pods: exit %d, want 2 (refused)\n%s\n%s", args, code, out, errs)
		}
		mustContain(t, "refusal", errs, append(listed, "refusing to restart CAA under running peer pods; nothing was changed",
			"rerun with --restart-peer-pods")...)
		notCounted("refusal", out+errs)
		t.Logf("install %v refused:\n%s", args, errs)
		if args[0] == "--set" {
			docRefusal(t, errs)
		}
		unchanged("a refused install")
	}

	// The Helm section's command lists the same pods.
	docRollCheck(t, e.cp.Kubeconfig, "default/train worker-2\ngpu/vllm worker-1\n")

	// --dry-run: the same list, exit 0, nothing written.
	code, out, errs := e.installArgs(t, "--dry-run", "--set", "GCP_ZONES=auto")
	if code != 0 {
		t.Fatalf("--dry-run under kata-remote pods: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "dry run", out, append(listed, "a real run refuses this change unless --restart-peer-pods is given")...)
	notCounted("dry run", out+errs)
	unchanged("--dry-run")

	// A change CAA's pod template does not carry (the cost guard's limit
	// is read by the API server, not by CAA) proceeds, and rolls nothing.
	code, out, errs = e.installArgs(t, "--cost-guard-max-gpus-per-pod=2")
	if code != 0 {
		t.Fatalf("a change that leaves CAA's pod template alone: exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out+errs, "restarts") {
		t.Errorf("a change that leaves CAA's pod template alone speaks of restarts:\n%s\n%s", out, errs)
	}
	if got := e.daemonSet(t).ResourceVersion; got != before["daemonsets "+Namespace+"/"+DaemonSetName] {
		t.Errorf("CAA's DaemonSet written by a change it does not carry")
	}
	if v, err := readGuardMax(ctx, e.cs, Namespace); err != nil || v != "2" {
		t.Errorf("cost guard limit %q (%v), want 2", v, err)
	}

	// --restart-peer-pods: applied, the pods named on stderr.
	code, out, errs = e.installArgs(t, "--restart-peer-pods", "--set", "GCP_ZONES=auto")
	if code != 0 {
		t.Fatalf("--restart-peer-pods: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "--restart-peer-pods", errs, append(listed, "warning: --restart-peer-pods:")...)
	mustContain(t, "--restart-peer-pods", out, "rollout done")
	hash1 := e.daemonSet(t).Spec.Template.Annotations[ConfigHashAnnotation]
	if hash1 == hash0 || e.configMap(t, Namespace)["GCP_ZONES"] != "auto" {
		t.Errorf("--restart-peer-pods did not apply: hash %q → %q, GCP_ZONES %q", hash0, hash1, e.configMap(t, Namespace)["GCP_ZONES"])
	}

	// Once the kata-remote pods are gone, a roll proceeds and says so.
	zero := int64(0)
	for _, p := range []string{"gpu/vllm", "default/train"} {
		ns, name, _ := strings.Cut(p, "/")
		if err := e.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs = e.installArgs(t, "--unset", "GCP_ZONES")
	if code != 0 {
		t.Fatalf("a roll with no kata-remote pod running: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "a roll with no kata-remote pod", out, "no kata-remote pod is running or starting, so no peer pod restarts", "rollout done")
	if h := e.daemonSet(t).Spec.Template.Annotations[ConfigHashAnnotation]; h == hash1 {
		t.Errorf("--unset GCP_ZONES did not roll the DaemonSet")
	}
}

// docRefusal holds docs/install.md's example refusal (the block marked
// `output: roll-refused`) to what install printed for this test's pods.
func docRefusal(t *testing.T, got string) {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := doccmd.ByMarker(blocks, "output: roll-refused")
	if !ok {
		t.Fatal("docs/install.md has no block marked <!-- output: roll-refused -->")
	}
	// The warnings before it (no kata-deploy, no webhook, no key) are
	// this bare cluster's.
	if i := strings.Index(got, "gcp-t4 install: refusing"); i >= 0 {
		got = got[i:]
	}
	if b.Text != got {
		t.Errorf("docs/install.md line %d shows the refusal as\n%s\ninstall prints\n%s", b.Line, b.Text, got)
	}
}

// docRollCheck runs docs/install.md's `roll-check: pods` command as
// written, with kubeconfig as $KUBECONFIG, and requires it to print want.
func docRollCheck(t *testing.T, kubeconfig, want string) {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := doccmd.ByMarker(blocks, "roll-check: pods")
	if !ok || len(b.Commands) != 1 {
		t.Fatalf("docs/install.md has no block of one command marked <!-- roll-check: pods --> (%d commands)", len(b.Commands))
	}
	cmdline := b.Commands[0].Text
	if !strings.HasPrefix(cmdline, "kubectl ") {
		t.Fatalf("docs/install.md's roll check %q is not a kubectl command", cmdline)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is needed to run docs/install.md's roll check as written: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), "sh", "-c", cmdline)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	if string(out) != want {
		t.Errorf("docs/install.md line %d's roll check printed\n%q\nwant the pods install counts\n%q", b.Line, out, want)
	}
}
