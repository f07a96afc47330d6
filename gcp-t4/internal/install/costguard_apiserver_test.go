package install

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
// policies, their bindings and the limits ConfigMap, as Build gives them.
func applyCostGuard(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) {
	t.Helper()
	objs, err := Build(Settings{CostGuard: true})
	if err != nil {
		t.Fatal(err)
	}
	applyGuardObjects(t, ctx, cs, dyn, objs)
}

// applyGuardObjects creates the guard's objects among objs and waits
// until admission enforces both policies.
func applyGuardObjects(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, objs []*unstructured.Unstructured) {
	t.Helper()
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
	if n != 5 {
		t.Fatalf("--cost-guard=on rendered %d of the guard's 5 objects (2 policies, 2 bindings, the limits)", n)
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
	// The annotations policy, on a pod of its own, deleted afterwards.
	probe, err := cs.CoreV1().Pods("default").Create(ctx, peerPod("probe-update", "", true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	untilAdmission(t, ctx, func() bool {
		p := probe.DeepCopy()
		p.Annotations = map[string]string{annotDefaultGPUs: "9"}
		_, last = cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), CostGuardAnnotationsPolicy)
	}, "the cost guard never refused an annotation update")
	if err := cs.CoreV1().Pods("default").Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// untilAdmission polls what the API server's admission answers until
// done: policy changes reach admission through an informer, with no event
// a client can wait on.
func untilAdmission(t *testing.T, ctx context.Context, done func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute) // far beyond the slowest machine: it ends on the condition
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal(msg + " within 10 minutes")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// guardCluster starts a real kube-apiserver with what a peer pod needs
// to be admitted: namespaces team-a, team-b and team-h, their default
// ServiceAccounts and kata-deploy's kata-remote RuntimeClass.
func guardCluster(t *testing.T) (context.Context, kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	dyn := dynamic.NewForConfigOrDie(cp.Config())
	for _, ns := range []string{"team-a", "team-b", "team-h"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"default", "team-a", "team-b", "team-h"} {
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
	return ctx, cs, dyn
}

// On the real kube-apiserver: the guard refuses the peer pod over its
// namespace's per-pod GPU limit, in the form the webhook leaves it and in
// the author's own; a ResourceQuota on kata.peerpods.io/vm caps the
// namespace's VMs; a tenant's own ConfigMap changes nothing.
func TestCostGuardOnAPIServer(t *testing.T) {
	ctx, cs, dyn := guardCluster(t)
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

const annotMachineType = "io.katacontainers.config.hypervisor.machine_type"

// On the real kube-apiserver, with the guard a default `gcp-t4 install
// --render` gives: a peer pod admitted with one GPU cannot be re-annotated
// to four (kubelet would start its next podVM with four), nor have any
// io.katacontainers.* annotation added, changed or removed; every update
// the cluster itself makes to a running peer pod (labels, status,
// ownerReferences, finalizers, other annotations) is admitted, with or
// without the limits ConfigMap; a pod naming h100-cc counts as the
// ConfigMap's weight for it, not as the one GPU it declares.
func TestCostGuardUpdatesAndShapesOnAPIServer(t *testing.T) {
	ctx, cs, dyn := guardCluster(t)
	applyGuardObjects(t, ctx, cs, dyn, renderDefault(t))

	pods := cs.CoreV1().Pods("team-a")
	pod, err := pods.Create(ctx, peerPod("one-gpu", "1", true), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a 1-GPU peer pod under the default limit of 1: %v", err)
	}
	// update applies change to the live pod and returns the API server's
	// answer.
	update := func(change func(*corev1.Pod)) error {
		t.Helper()
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{} // an earlier change may have removed the last one
		}
		change(p)
		_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		return err
	}
	// refusedUpdate wants the annotations policy's refusal naming the
	// annotation and the fix.
	refusedUpdate := func(what, annot string, change func(*corev1.Pod)) {
		t.Helper()
		err := update(change)
		if err == nil {
			t.Errorf("%s: admitted, want refused", what)
			return
		}
		for _, w := range []string{CostGuardAnnotationsPolicy, "annotation " + annot, "delete the pod and create it"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nlacks %q", what, err, w)
			}
		}
		t.Logf("%s refused: %v", what, err)
	}
	admittedUpdate := func(what string, change func(*corev1.Pod)) {
		t.Helper()
		if err := update(change); err != nil {
			t.Errorf("%s: refused: %v", what, err)
		}
	}
	refusedUpdate("default_gpus 1 -> 4", annotDefaultGPUs, func(p *corev1.Pod) { p.Annotations[annotDefaultGPUs] = "4" })
	refusedUpdate("default_gpus removed", annotDefaultGPUs, func(p *corev1.Pod) { delete(p.Annotations, annotDefaultGPUs) })
	refusedUpdate("machine_type added", annotMachineType, func(p *corev1.Pod) { p.Annotations[annotMachineType] = "t4-4" })
	refusedUpdate("image added", "io.katacontainers.config.hypervisor.image", func(p *corev1.Pod) {
		p.Annotations["io.katacontainers.config.hypervisor.image"] = "projects/attacker-proj/global/images/evil"
	})
	// A JSON merge patch, as kubectl annotate sends it, takes the same path.
	_, err = pods.Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+annotDefaultGPUs+`":"4"}}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), CostGuardAnnotationsPolicy) {
		t.Errorf("kubectl annotate default_gpus=4 as a merge patch: %v, want the annotations policy's refusal", err)
	}

	// What the cluster itself does to a running peer pod.
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "7d6b1c56-3c58-4a53-9e43-6e4a39b1b7a1"}
	admittedUpdate("label", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "x"} })
	admittedUpdate("other annotation", func(p *corev1.Pod) { p.Annotations["example.com/note"] = "x" })
	admittedUpdate("ownerReference", func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{owner} })
	admittedUpdate("finalizer added", func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })
	admittedUpdate("finalizer removed", func(p *corev1.Pod) { p.Finalizers = nil })
	p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.Message = corev1.PodPending, "podVM starting"
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Errorf("status update (pods/status, kubelet's): refused: %v", err)
	}

	// Named shapes count as the ConfigMap says.
	named := func(name, shape, gpus string) *corev1.Pod {
		p := peerPod(name, gpus, true)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[annotMachineType] = shape
		return p
	}
	createErr := func(ns string, p *corev1.Pod) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	for _, c := range []struct{ name, shape, gpus string }{
		{"h100", "h100-cc", "1"}, {"h100-undeclared", "h100-cc", ""}, {"h100-spelt", " H100-CC", "1"},
		{"a3", "a3-highgpu-1g", "1"}, {"t4-4-declared-1", "t4-4", "1"},
	} {
		err := createErr("team-a", named(c.name, c.shape, c.gpus))
		if err == nil {
			t.Errorf("team-a/%s naming %q admitted, want refused under maxGPUsPerPod 1", c.name, c.shape)
			continue
		}
		for _, w := range []string{"names shape", "namespace team-a may have at most 1 per pod", "key maxGPUsPerPod"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("team-a/%s: %v\nlacks %q", c.name, err, w)
			}
		}
		t.Logf("team-a/%s refused: %v", c.name, err)
	}
	if err := createErr("team-a", named("h100-msg", "h100-cc", "1")); err == nil || !strings.Contains(err.Error(), "counts as 18 GPU(s) (key shape.h100-cc.gpus)") {
		t.Errorf("h100-cc: %v, want it counted as the default weight 18 with the key named", err)
	}
	if err := createErr("team-a", named("t4-1", "t4-1", "1")); err != nil {
		t.Errorf("t4-1 with 1 GPU declared: refused: %v", err)
	}

	// An admin gives team-h the H100 and a weight of its own shape.
	cm, err := cs.CoreV1().ConfigMaps(Namespace).Get(ctx, CostGuardPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["namespace.team-h.maxGPUsPerPod"] = "18"
	cm.Data["shape.my-l4.gpus"] = "lots"
	if _, err := cs.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	untilAdmission(t, ctx, func() bool {
		_, err := cs.CoreV1().Pods("team-h").Create(ctx, named("probe", "h100-cc", "1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil
	}, "team-h's limit of 18 never reached admission")
	if err := createErr("team-h", named("h100", "h100-cc", "1")); err != nil {
		t.Errorf("team-h/h100 under namespace.team-h.maxGPUsPerPod 18: refused: %v", err)
	}
	if err := createErr("team-h", named("bad-weight", "my-l4", "1")); err == nil || !strings.Contains(err.Error(), "key shape.my-l4.gpus is lots, not a whole number") {
		t.Errorf("a malformed shape weight: %v, want refused naming the key", err)
	}

	// Without the limits ConfigMap no pod is created (the binding's params
	// are read before its match conditions, so runc pods too), but the
	// annotations policy needs none: updates go on as before.
	if err := cs.CoreV1().ConfigMaps(Namespace).Delete(ctx, CostGuardPolicy, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	untilAdmission(t, ctx, func() bool {
		runc := peerPod("runc", "", false)
		runc.Spec.RuntimeClassName = nil
		_, err := cs.CoreV1().Pods("team-b").Create(ctx, runc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), CostGuardPolicy)
	}, "a pod was still admitted after the limits ConfigMap was deleted")
	admittedUpdate("label, without the limits ConfigMap", func(p *corev1.Pod) { p.Labels["app"] = "y" })
	admittedUpdate("finalizer, without the limits ConfigMap", func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })
	refusedUpdate("default_gpus 1 -> 4, without the limits ConfigMap", annotDefaultGPUs, func(p *corev1.Pod) { p.Annotations[annotDefaultGPUs] = "4" })
}

// renderDefault is what `gcp-t4 install --render` gives with only the
// required flags (and the cluster ID it cannot read offline).
func renderDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	o, err := parseInstall(append(append([]string{}, requiredFlags...), "--render", "--set", ClusterIDKey+"=5e2f3c1a-0000-4000-8000-000000000000"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := renderObjects(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// On the real kube-apiserver: the pods/status subresource cannot change a
// peer pod's io.katacontainers.* annotations either. The status strategy
// resets the spec, not the metadata (pkg/registry/core/pod/strategy.go), so
// without the guard a principal allowed to patch pods/status (a
// readiness-gate controller) could raise default_gpus after admission. The
// kubelet's own status patches (its strategic merge of conditions, with the
// pod's UID) and a whole-status update still pass, and the refused patches
// leave the live annotations as admitted.
func TestCostGuardStatusSubresourceOnAPIServer(t *testing.T) {
	ctx, cs, dyn := guardCluster(t)
	applyGuardObjects(t, ctx, cs, dyn, renderDefault(t))
	pods := cs.CoreV1().Pods("team-a")
	pod, err := pods.Create(ctx, peerPod("one-gpu", "1", true), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a 1-GPU peer pod under the default limit of 1: %v", err)
	}
	refused := func(what, annot string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s through pods/status: admitted, want refused", what)
			return
		}
		for _, w := range []string{CostGuardAnnotationsPolicy, "annotation " + annot, "delete the pod and create it"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s through pods/status: %v\nlacks %q", what, err, w)
			}
		}
		t.Logf("%s through pods/status refused: %v", what, err)
	}
	patch := func(pt types.PatchType, body string) error {
		_, err := pods.Patch(ctx, pod.Name, pt, []byte(body), metav1.PatchOptions{}, "status")
		return err
	}
	refused("merge patch default_gpus 1 -> 4", annotDefaultGPUs,
		patch(types.MergePatchType, `{"metadata":{"annotations":{"`+annotDefaultGPUs+`":"4"}}}`))
	refused("strategic merge patch machine_type added", annotMachineType,
		patch(types.StrategicMergePatchType, `{"metadata":{"annotations":{"`+annotMachineType+`":"t4-4"}}}`))
	refused("JSON patch default_gpus removed", annotDefaultGPUs,
		patch(types.JSONPatchType, `[{"op":"remove","path":"/metadata/annotations/io.katacontainers.config.hypervisor.default_gpus"}]`))
	p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[annotDefaultGPUs] = "4"
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	refused("update default_gpus 1 -> 4", annotDefaultGPUs, err)

	// The kubelet's status patch (statusutil.PatchPodStatus): the UID and
	// the changed status, nothing of the annotations.
	kubelet := `{"metadata":{"uid":"` + string(pod.UID) + `"},"status":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"Ready"}],` +
		`"conditions":[{"type":"PodScheduled","status":"True"},{"type":"Ready","status":"False","reason":"ContainersNotReady"}],"phase":"Pending"}}`
	if err := patch(types.StrategicMergePatchType, kubelet); err != nil {
		t.Errorf("the kubelet's status patch (conditions): refused: %v", err)
	}
	p, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Message = "podVM starting"
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Errorf("a whole-status update: refused: %v", err)
	}
	// A status patch that sets an annotation to the value it has changes
	// nothing and passes.
	if err := patch(types.MergePatchType, `{"metadata":{"annotations":{"`+annotDefaultGPUs+`":"1"}},"status":{"message":"same"}}`); err != nil {
		t.Errorf("a status patch restating default_gpus=1: refused: %v", err)
	}
	live, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := live.Annotations[annotDefaultGPUs]; got != "1" {
		t.Errorf("after the refused status patches default_gpus is %q, want the admitted 1", got)
	}
	if _, ok := live.Annotations[annotMachineType]; ok {
		t.Errorf("after the refused status patches machine_type is set: %q", live.Annotations[annotMachineType])
	}
	if len(live.Status.Conditions) != 2 || live.Status.Message != "same" {
		t.Errorf("the status updates did not land: conditions %v, message %q", live.Status.Conditions, live.Status.Message)
	}
}
