package install

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/test/controlplane"
)

const (
	annotDefaultGPUs = "io.katacontainers.config.hypervisor.default_gpus"
	peerPodResource  = "kata.peerpods.io/vm"
)

// peerPod is a kata-remote pod. mutated is the form the peer-pods webhook
// hands on (remove-resourcespec.go at CAA v0.22.0): no container resources
// but one kata.peerpods.io/vm, the GPU request in default_gpus; otherwise
// the pod as its author wrote it, requesting nvidia.com/gpu.
func peerPod(name string, gpus string, mutated bool) *corev1.Pod {
	rc := "kata-remote"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{RuntimeClassName: &rc, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if mutated {
		if gpus != "" {
			p.Annotations = map[string]string{annotDefaultGPUs: gpus}
		}
		one := corev1.ResourceList{peerPodResource: resource.MustParse("1")}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: one, Limits: one}
	} else if gpus != "" {
		q := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: q, Limits: q}
	}
	return p
}

// applyCostGuard creates what --cost-guard=on renders for the guard: the
// policy, its binding and the limits ConfigMap, as Build gives them.
func applyCostGuard(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) {
	t.Helper()
	objs, err := Build(Settings{CostGuard: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		var gvr schema.GroupVersionResource
		switch {
		case o.GetKind() == "ValidatingAdmissionPolicy":
			gvr = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
		case o.GetKind() == "ValidatingAdmissionPolicyBinding":
			gvr = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
		case o.GetKind() == "ConfigMap" && o.GetName() == CostGuardPolicy:
			gvr = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		default:
			continue
		}
		n++
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if o.GetNamespace() != "" {
			ri = dyn.Resource(gvr).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if n != 3 {
		t.Fatalf("--cost-guard=on rendered %d of the guard's 3 objects", n)
	}
	// The policy is enforced once the API server's policy informer has it
	// and has type-checked it; wait on what admission says, with a
	// server-side dry run that stores nothing.
	var last error
	defer func() {
		if t.Failed() {
			vap, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, CostGuardPolicy, metav1.GetOptions{})
			t.Logf("last probe: %v; policy status: %+v (%v)", last, vap.Status, err)
		}
	}()
	untilAdmission(t, ctx, func() bool {
		_, last = cs.CoreV1().Pods("default").Create(ctx, peerPod("probe", "9", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), CostGuardPolicy)
	}, "the cost guard never refused a 9-GPU peer pod")
}

// untilAdmission polls what the API server's admission answers until
// done: policy changes reach admission through an informer, with no event
// a client can wait on.
func untilAdmission(t *testing.T, ctx context.Context, done func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal(msg + " within 60s")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// On the real kube-apiserver: the guard refuses the peer pod over its
// namespace's per-pod GPU limit, in the form the webhook leaves it and in
// the author's own; a ResourceQuota on kata.peerpods.io/vm caps the
// namespace's VMs; a tenant's own ConfigMap changes nothing.
func TestCostGuardOnAPIServer(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	dyn := dynamic.NewForConfigOrDie(cp.Config())
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"default", "team-a", "team-b"} {
		// The ServiceAccount admission plugin wants the default account,
		// which the controller manager (not running here) would make.
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// kata-deploy's RuntimeClass; the RuntimeClass admission plugin
	// refuses pods naming one that does not exist.
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata-remote"}, Handler: "kata-remote"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyCostGuard(t, ctx, cs, dyn)

	// team-b may have two GPUs per pod; the admin says so in the limits.
	cm, err := cs.CoreV1().ConfigMaps(Namespace).Get(ctx, CostGuardPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["namespace.team-b.maxGPUsPerPod"] = "2"
	if _, err := cs.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The policy reads its params through an informer: wait until
	// admission has the new limit.
	untilAdmission(t, ctx, func() bool {
		_, err := cs.CoreV1().Pods("team-b").Create(ctx, peerPod("probe", "2", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil
	}, "team-b's limit of 2 never reached admission")
	// A tenant's ConfigMap of the same name in their namespace is not read.
	if _, err := cs.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: CostGuardPolicy},
		Data: map[string]string{"maxGPUsPerPod": "8", "namespace.team-a.maxGPUsPerPod": "8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Two VMs per namespace in team-a. The quota controller (in the
	// controller manager) would fill status.hard; the test does.
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "peer-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests." + peerPodResource: resource.MustParse("2")}}}
	rq, err = cs.CoreV1().ResourceQuotas("team-a").Create(ctx, rq, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Status = corev1.ResourceQuotaStatus{Hard: rq.Spec.Hard, Used: corev1.ResourceList{"requests." + peerPodResource: resource.MustParse("0")}}
	if _, err := cs.CoreV1().ResourceQuotas("team-a").UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	create := func(ns string, p *corev1.Pod) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	refused := func(ns string, p *corev1.Pod, want ...string) {
		t.Helper()
		err := create(ns, p)
		if err == nil {
			t.Errorf("%s/%s admitted, want refused (%v)", ns, p.Name, want)
			return
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s/%s: %v\nlacks %q", ns, p.Name, err, w)
			}
		}
		t.Logf("%s/%s refused: %v", ns, p.Name, err)
	}
	admitted := func(ns string, p *corev1.Pod) {
		t.Helper()
		if err := create(ns, p); err != nil {
			t.Errorf("%s/%s refused: %v", ns, p.Name, err)
		}
	}

	// Over the limit: as the webhook leaves it, and as written.
	actionable := []string{"asks for 2 GPU(s)", "namespace team-a may have at most 1 per pod",
		"ConfigMap " + Namespace + "/" + CostGuardPolicy, "key maxGPUsPerPod", "request at most 1"}
	refused("team-a", peerPod("two-mutated", "2", true), actionable...)
	refused("team-a", peerPod("two-unmutated", "2", false), actionable...)
	refused("team-a", peerPod("not-a-number", "two", true), "not a whole number")
	// Init containers' GPUs count, as the webhook counts them.
	initGPUs := peerPod("init-gpus", "", false)
	q := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	initGPUs.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: q, Limits: q}}}
	refused("team-a", initGPUs, "asks for 2 GPU(s)")
	// Within it, until the namespace's VM quota is spent.
	admitted("team-a", peerPod("one-a", "1", true))
	admitted("team-a", peerPod("cpu-only", "", true))
	refused("team-a", peerPod("one-b", "1", true), "exceeded quota", "requests."+peerPodResource)
	// team-b's own limit.
	admitted("team-b", peerPod("two", "2", true))
	refused("team-b", peerPod("four", "4", true), "namespace team-b may have at most 2", "key namespace.team-b.maxGPUsPerPod")
	// Pods of other runtime classes are not the guard's.
	gpuPod := peerPod("runc-gpus", "8", false)
	gpuPod.Spec.RuntimeClassName = nil
	admitted("team-b", gpuPod)

	// Without its limits the guard admits no peer pod: it fails closed.
	if err := cs.CoreV1().ConfigMaps(Namespace).Delete(ctx, CostGuardPolicy, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	untilAdmission(t, ctx, func() bool {
		_, err := cs.CoreV1().Pods("team-b").Create(ctx, peerPod("after-delete", "", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Logf("without the ConfigMap: %v", err)
		}
		return err != nil
	}, "a peer pod was still admitted after the limits ConfigMap was deleted")
}
