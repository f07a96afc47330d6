package install

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// env is one real control plane shared by the subtests, plus the two
// controllers a bare kube-apiserver lacks and install/uninstall wait on.
type env struct {
	cp  *controlplane.ControlPlane
	cs  kubernetes.Interface
	dyn dynamic.Interface
	// dsController reports DaemonSet rollouts as kube-controller-manager
	// would once every selected node runs the pod; off to test a timeout.
	dsController atomic.Bool
	// uninstallMain is `gcp-t4 uninstall`.
	uninstallMain MainFunc
}

// MainFunc is a gcp-t4 command's entry point, as cmd/gcp-t4 runs it.
type MainFunc = func(context.Context, []string, io.Writer, io.Writer, *slog.Logger) int

// AgainstAPIServer is TestAgainstAPIServer: install's scenarios on one
// real control plane, each installing and uninstalling for real, with
// uninstallMain as `gcp-t4 uninstall`. The test itself is in package
// install_test (uninstall_test.go): package uninstall imports this one,
// so only an external test can hand its Main in.
func AgainstAPIServer(t *testing.T, uninstallMain MainFunc) {
	cp := controlplane.StartForTest(t, controlplane.Options{ExtraAPIServerFlags: []string{"--admission-control-config-file=" + gkeAdmissionConfig(t)}})
	e := &env{cp: cp, cs: kubernetes.NewForConfigOrDie(cp.Config()), dyn: dynamic.NewForConfigOrDie(cp.Config()), uninstallMain: uninstallMain}
	e.dsController.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.runControllers(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// A failed case may leave its objects behind; without a reset every
	// later case would fail on them too, hiding which one broke.
	run := func(name string, f func(*testing.T)) {
		if !t.Run(name, f) {
			e.reset(t)
		}
	}
	run("ManifestsAcceptedWithStrictValidation", e.testManifestsAccepted)
	run("GenericCluster", e.testGeneric)
	run("GKEUbuntuPool", e.testGKEUbuntu)
	run("GKECOSPoolRefused", e.testGKECOS)
	run("AutopilotRefused", e.testAutopilot)
	run("NewSettingsPruneOldObjects", e.testPrune)
	run("RolloutTimeout", e.testRolloutTimeout)
	run("UninstallRestoresNodes", e.testUninstallRestoresNodes)
	run("UpgradeKeepsWhatWasSet", e.testUpgradeKeeps)
	run("ValidatedBeforeApply", e.testValidatedBeforeApply)
	run("EveryCAAKeyAndAgentTLS", e.testEveryCAAKey)
	run("KubectlApplyThenInstall", e.testKubectlThenInstall)
	run("FailedInstallCanBeUninstalled", e.testFailedInstallUninstalls)
	run("Namespace", e.testNamespace)
	run("RuntimeClassAdoptable", e.testRuntimeClassAdoptable)
	run("CriticalPodsAdmitted", e.testCriticalPods)
	run("PruneAfterRollout", e.testPruneAfterRollout)
	run("HelmReleaseRefused", e.testHelmReleaseRefused)
	run("RollRefusedUnderPeerPods", e.testRollGuard)
	run("InstallMDWalkthrough", e.testWalkthrough)
	run("RunbookMistralTP2", e.testRunbook)
}

// runControllers stands in for kube-controller-manager: the DaemonSet
// controller's status (desired = nodes matching the node selector, all of
// them updated and available) and the namespace controller's finalize
// step once a namespace is deleted.
func (e *env) runControllers(ctx context.Context) {
	for ctx.Err() == nil {
		if e.dsController.Load() {
			dss, err := e.cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + DaemonSetName})
			if err != nil {
				dss = &appsv1.DaemonSetList{}
			}
			for i := range dss.Items {
				ds := &dss.Items[i]
				if ds.Status.ObservedGeneration >= ds.Generation {
					continue
				}
				n := int32(0)
				if nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).String()}); err == nil {
					n = int32(len(nodes.Items))
				}
				ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: n, CurrentNumberScheduled: n, UpdatedNumberScheduled: n, NumberReady: n, NumberAvailable: n}
				_, _ = e.cs.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{})
			}
		}
		// The quota controller's part: a ResourceQuota without status
		// makes admission refuse every pod it covers.
		if qs, err := e.cs.CoreV1().ResourceQuotas("").List(ctx, metav1.ListOptions{}); err == nil {
			for i := range qs.Items {
				if q := &qs.Items[i]; len(q.Status.Hard) == 0 {
					q.Status.Hard, q.Status.Used = q.Spec.Hard, corev1.ResourceList{"pods": resource.MustParse("0")}
					_, _ = e.cs.CoreV1().ResourceQuotas(q.Namespace).UpdateStatus(ctx, q, metav1.UpdateOptions{})
				}
			}
		}
		if nss, err := e.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
			for i := range nss.Items {
				if ns := &nss.Items[i]; ns.DeletionTimestamp != nil && len(ns.Spec.Finalizers) > 0 {
					ns.Spec.Finalizers = nil
					_, _ = e.cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var requiredFlags = []string{"--project=demo-project", "--zone=us-central1-a", "--podvm-image=podvm-t4", "--network=global/networks/default", "--timeout=10m"}

// install runs `gcp-t4 install` against the control plane.
func (e *env) install(t *testing.T, extra ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, errb bytes.Buffer
	args := append([]string{"--kubeconfig=" + e.cp.Kubeconfig}, requiredFlags...)
	code = Main(t.Context(), append(args, extra...), &o, &errb, nil)
	return code, o.String(), errb.String()
}

// installer is what install's Cluster sees of the control plane.
func (e *env) installer(t *testing.T) Cluster {
	t.Helper()
	c, err := caaconfig.NewClients(e.cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	return Cluster{Dynamic: c.Dynamic, Mapper: c.Mapper}
}

func (e *env) uninstall(t *testing.T) string {
	t.Helper()
	var o, errb bytes.Buffer
	// These installs name no reachable GCE; the uninstall guard is tested
	// in guard_apiserver_test.go.
	if code := e.uninstallMain(t.Context(), []string{"--kubeconfig=" + e.cp.Kubeconfig, "--timeout=10m", "--force"}, &o, &errb, nil); code != 0 {
		t.Fatalf("uninstall: exit %d: %s\n%s", code, errb.String(), o.String())
	}
	return o.String()
}

// reset removes whatever a failed case left: an uninstall without the
// guard, then our labelled objects one by one, then the namespace.
func (e *env) reset(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	var o, errb bytes.Buffer
	e.uninstallMain(ctx, []string{"--kubeconfig=" + e.cp.Kubeconfig, "--timeout=10m", "--force"}, &o, &errb, nil)
	for _, k := range kinds {
		l, err := e.dyn.Resource(k).List(ctx, metav1.ListOptions{LabelSelector: PartOfLabel + "=" + PartOfValue})
		if err != nil {
			continue
		}
		for _, obj := range l.Items {
			_ = e.dyn.Resource(k).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		}
	}
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("reset after a failed case: namespace %s still there: %v", Namespace, err)
	}
}

// kinds are every resource the manifests render, plus the inventory's.
var kinds = []schema.GroupVersionResource{
	{Version: "v1", Resource: "namespaces"}, {Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"},
	{Group: "apps", Version: "v1", Resource: "daemonsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"},
	{Version: "v1", Resource: "resourcequotas"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	// The cost guard's: a binding left behind without its ConfigMap
	// would refuse every pod of the cluster.
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// ours lists every object carrying our part-of label.
func (e *env) ours(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, k := range kinds {
		l, err := e.dyn.Resource(k).List(t.Context(), metav1.ListOptions{LabelSelector: PartOfLabel + "=" + PartOfValue})
		if err != nil {
			t.Fatalf("list %s: %v", k.Resource, err)
		}
		for _, o := range l.Items {
			out = append(out, fmt.Sprintf("%s %s/%s", k.Resource, o.GetNamespace(), o.GetName()))
		}
	}
	return out
}

func (e *env) assertNothingLeft(t *testing.T) {
	t.Helper()
	if left := e.ours(t); len(left) > 0 {
		t.Errorf("after uninstall, still present: %v", left)
	}
}

// setNodes replaces the cluster's Nodes; status (OS image, kubelet
// version) goes through the status subresource as a kubelet's would.
func (e *env) setNodes(t *testing.T, nodes ...*corev1.Node) {
	t.Helper()
	ctx := t.Context()
	if err := e.cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete nodes: %v", err)
	}
	for _, n := range nodes {
		status := n.Status
		created, err := e.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
		created.Status = status
		if _, err := e.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("node %s status: %v", n.Name, err)
		}
	}
}

func node(name string, lbls map[string]string, providerID, kubelet, osImage string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: kubelet, OSImage: osImage, ContainerRuntimeVersion: "containerd://2.0.4",
			OperatingSystem: "linux", Architecture: "amd64",
		}},
	}
}

func gkeNode(name, pool, os string, selected bool) *corev1.Node {
	l := map[string]string{labelGKENodePool: pool, labelGKEOS: os, "cloud.google.com/gke-container-runtime": "containerd"}
	if selected {
		l[SelectionLabel] = "true"
	}
	img := "Ubuntu 22.04.5 LTS"
	if os == "cos" {
		img = "Container-Optimized OS from Google"
	}
	return node(name, l, "gce://proj/us-central1-a/"+name, "v1.33.2-gke.1240000", img)
}

func (e *env) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds, err := e.cs.AppsV1().DaemonSets(Namespace).Get(t.Context(), DaemonSetName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get daemonset: %v", err)
	}
	return ds
}

// resourceVersions of every object we own, to prove a re-install is a
// no-op on the server.
func (e *env) resourceVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range kinds {
		l, err := e.dyn.Resource(k).List(t.Context(), metav1.ListOptions{LabelSelector: PartOfLabel + "=" + PartOfValue})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			out[k.Resource+" "+o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}

// can asks the API server's own RBAC whether CAA's ServiceAccount may do verb.
func (e *env) can(t *testing.T, verb, group, resource, sub, ns string) bool {
	t.Helper()
	return e.review(t, "cloud-api-adaptor", authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns})
}

// canAs asks the same for ServiceAccount sa of our namespace, on a named object.
func (e *env) canAs(t *testing.T, sa, verb, group, resource, name, ns string) bool {
	t.Helper()
	return e.review(t, sa, authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Name: name, Namespace: ns})
}

func (e *env) review(t *testing.T, sa string, attrs authzv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + Namespace + ":" + sa,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"},
		ResourceAttributes: &attrs,
	}}
	out, err := e.cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("access review: %v", err)
	}
	return out.Status.Allowed
}

func mustContain(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// subset reports the first field of want that got lacks or differs in. A
// zero value (false, "", an empty map) may be absent: the API server omits
// those, which loses nothing.
func subset(path string, want, got any) string {
	if got == nil && (want == nil || reflect.ValueOf(want).IsZero() || isEmpty(want)) {
		return ""
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path + ": not an object"
		}
		for k, v := range w {
			if d := subset(path+"."+k, v, g[k]); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: %v, want %v", path, got, want)
		}
		for i := range w {
			if d := subset(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("%s: %v, want %v", path, got, want)
		}
	}
	return ""
}

// testManifestsAccepted: every overlay and component, server-side applied
// with strict field validation, reads back with every rendered field
// intact (nothing dropped or rewritten by the API server).
func (e *env) testManifestsAccepted(t *testing.T) {
	c := e.installer(t)
	for name, s := range combinations() {
		t.Run(name, func(t *testing.T) {
			objs, err := Build(s)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Apply(t.Context(), objs, ApplyOptions{}); err != nil {
				t.Fatalf("apply: %v", err)
			}
			for _, o := range objs {
				ri, err := c.resource(refOf(o))
				if err != nil {
					t.Fatal(err)
				}
				live, err := ri.Get(t.Context(), o.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("read back %s: %v", refOf(o), err)
				}
				want := o.Object
				if o.GetKind() == "Secret" {
					// kustomize wraps long base64 values; compare the bytes.
					want = o.DeepCopy().Object
					d, _, _ := unstructured.NestedStringMap(want, "data")
					for k, v := range d {
						d[k] = strings.ReplaceAll(v, "\n", "")
					}
					_ = unstructured.SetNestedStringMap(want, d, "data")
				}
				if d := subset(refOf(o).String(), want, live.Object); d != "" {
					t.Errorf("read back differs: %s", d)
				}
				if !managedBy(live, FieldManager, "Apply") {
					t.Errorf("%s: no Apply entry for field manager %s", refOf(o), FieldManager)
				}
			}
			e.uninstall(t)
			e.assertNothingLeft(t)
		})
	}
	// Strict validation is really on: an unknown field is refused.
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "strict-probe", "namespace": "default"},
		"data":     map[string]any{"a": "b"}, "dataa": map[string]any{"typo": "x"},
	}}
	cl := c
	cl.Namespace = "default"
	_, err := cl.Apply(t.Context(), []*unstructured.Unstructured{bad}, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "dataa") {
		t.Errorf("apply with an unknown field: err = %v, want it named", err)
	}
	_ = e.cs.CoreV1().ConfigMaps("default").Delete(t.Context(), InventoryName, metav1.DeleteOptions{})
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

func managedBy(u *unstructured.Unstructured, manager, op string) bool {
	for _, f := range u.GetManagedFields() {
		if f.Manager == manager && string(f.Operation) == op {
			return true
		}
	}
	return false
}

func (e *env) testGeneric(t *testing.T) {
	e.setNodes(t,
		node("worker-1", map[string]string{labelWorker: ""}, "kind://docker/k/worker-1", "v1.33.1", "Debian GNU/Linux 12 (bookworm)"),
		node("worker-2", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"),
		node("control-plane", nil, "", "v1.33.1", "Ubuntu 24.04 LTS"),
	)
	code, out, errs := e.install(t)
	if code != 0 {
		t.Fatalf("install: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if strings.Contains(out, "GKE detected") {
		t.Errorf("GKE detected on a generic cluster:\n%s", out)
	}
	mustContain(t, "stdout", out, "daemonset/"+DaemonSetName+": 2 of 2 nodes updated, 2 available", "rollout done")
	mustContain(t, "stdout", out, "settings (new install):", `+ GCP_PROJECT_ID: "demo-project"`)
	mustContain(t, "stderr", errs, "no key and no Workload Identity Federation configuration", "RuntimeClass kata-remote not found: kata-deploy's chart creates it",
		"kata-deploy not found", "--version "+KataDeployVersion, "kata-deploy-charts/kata-deploy",
		"peer-pods webhook not found", "--branch "+UpstreamRelease, "src/webhook/chart")
	ds := e.daemonSet(t)
	if container(ds, "remediate") != nil {
		t.Error("remediation sidecar on a generic cluster")
	}
	if sel := ds.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel[labelWorker] != "" {
		t.Errorf("nodeSelector %v", sel)
	}
	if _, err := e.cs.NodeV1().RuntimeClasses().Get(t.Context(), RuntimeClassName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("runtimeclass=auto must leave the RuntimeClass to kata-deploy: %v", err)
	}
	// CAA posts start-up Events on a podVM's pod wherever it runs, with or
	// without the remediation component; it never lists them.
	if !e.can(t, "create", "", "events", "", "default") || e.can(t, "list", "", "events", "", "default") {
		t.Error("CAA's ServiceAccount: want create on events, not list")
	}

	before := e.resourceVersions(t)
	code, out, errs = e.install(t)
	if code != 0 {
		t.Fatalf("re-install: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "re-install stdout", out, "0 changed", "settings: no change")
	if after := e.resourceVersions(t); !reflect.DeepEqual(before, after) {
		t.Errorf("re-install with the same settings changed objects:\nbefore %v\nafter  %v", before, after)
	}

	out = e.uninstall(t)
	mustContain(t, "uninstall stdout", out, "deleted DaemonSet/"+Namespace+"/"+DaemonSetName, "deleted Namespace/"+Namespace)
	e.assertNothingLeft(t)
	if _, err := e.cs.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace after uninstall: %v", err)
	}
}

// testGKEUbuntu: a Standard cluster with a labelled Ubuntu pool, a COS
// pool beside it, kata-deploy, the webhook, kata-deploy's RuntimeClass and
// a namespace the CoCo operator created.
func (e *env) testGKEUbuntu(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t,
		gkeNode("gke-c-peer-1", "peer", "ubuntu", true),
		gkeNode("gke-c-peer-2", "peer", "ubuntu", true),
		gkeNode("gke-c-default-1", "default-pool", "cos", false),
	)
	preNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{"owner": "coco-operator"}}}
	mustCreate(t, func() error {
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, preNS, metav1.CreateOptions{})
		return err
	})
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: RuntimeClassName}, Handler: "kata-remote"}
	mustCreate(t, func() error {
		_, err := e.cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
		return err
	})
	kd := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kata-deploy", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "kata-deploy"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"name": "kata-deploy"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-kata", Image: "quay.io/kata-containers/kata-deploy:4.0.0"}}},
			},
		},
	}
	mustCreate(t, func() error {
		_, err := e.cs.AppsV1().DaemonSets("kube-system").Create(ctx, kd, metav1.CreateOptions{})
		return err
	})
	none := admissionv1.SideEffectClassNone
	ignore := admissionv1.Ignore
	path := "/mutate-v1-pod"
	wh := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "peer-pods-webhook-mutating-webhook-configuration"},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    webhookName,
			ClientConfig:            admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: "peer-pods-webhook-system", Name: "peer-pods-webhook-webhook-service", Path: &path}},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	mustCreate(t, func() error {
		_, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, wh, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, wh.Name, metav1.DeleteOptions{})
		_ = e.cs.AppsV1().DaemonSets("kube-system").Delete(ctx, kd.Name, metav1.DeleteOptions{})
		_ = e.cs.NodeV1().RuntimeClasses().Delete(ctx, rc.Name, metav1.DeleteOptions{})
		_ = e.cs.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{})
		e.waitNamespaceGone(t)
	})

	wif := filepath.Join(t.TempDir(), "wif.json")
	if err := os.WriteFile(wif, testWIFConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.install(t, "--wif-credential-config="+wif)
	if code != 0 {
		t.Fatalf("install: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if strings.Contains(errs, "no key and no Workload Identity Federation") {
		t.Errorf("credentials warning with --wif-credential-config:\n%s", errs)
	}
	mustContain(t, "stdout", out,
		"GKE detected", "node-pool label cloud.google.com/gke-nodepool", "gce:// providerID",
		"enabling containerd remediation",
		"gcloud container node-pools update POOL", "--node-labels="+SelectionLabel+"=true", "lost when GKE recreates a node",
		"2 of 2 nodes updated", "rollout done")
	for _, unwanted := range []string{"kata-deploy not found", "webhook not found", "no node carries"} {
		if strings.Contains(errs, unwanted) {
			t.Errorf("stderr has %q with the piece present:\n%s", unwanted, errs)
		}
	}
	ds, err := e.cs.AppsV1().DaemonSets(Namespace).Get(ctx, RemediationDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no remediation DaemonSet on GKE: %v", err)
	}
	rem := container(ds, "remediate")
	if rem == nil {
		t.Fatal("no remediate container")
	}
	if ds.Spec.Template.Spec.HostPID || rem.SecurityContext == nil || rem.SecurityContext.Privileged == nil || *rem.SecurityContext.Privileged {
		t.Error("sidecar privileged or hostPID after the API server's defaulting")
	}
	if container(e.daemonSet(t), "remediate") != nil {
		t.Error("remediate runs in CAA's pod")
	}
	// kata-deploy's RuntimeClass is left alone.
	live, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if live.Labels[PartOfLabel] != "" || live.Overhead != nil {
		t.Errorf("installer took over kata-deploy's RuntimeClass: %+v", live.ObjectMeta.Labels)
	}
	// RBAC, evaluated by the API server.
	for _, c := range []struct {
		verb, group, res, sub, ns string
		want                      bool
	}{
		{"get", "", "nodes", "", "", true},
		{"create", "", "events", "", "default", true}, // start-up Events on the pod a podVM is for
		{"list", "", "events", "", "default", false},
		{"patch", "", "nodes", "status", "", true},
		{"create", "confidentialcontainers.org", "peerpods", "", "ml", true},
		{"get", "", "secrets", "", "ml", true},
		{"list", "", "pods", "", "", true},
		{"patch", "", "nodes", "", "", false},
		{"list", "", "secrets", "", "ml", false},
		{"patch", "", "events", "", "ml", true},
		{"delete", "", "events", "", "ml", false},
		{"delete", "", "pods", "", "ml", false},
	} {
		if got := e.can(t, c.verb, c.group, c.res, c.sub, c.ns); got != c.want {
			t.Errorf("CAA's ServiceAccount %s %s/%s (ns %q): allowed=%v, want %v", c.verb, c.res, c.sub, c.ns, got, c.want)
		}
	}
	// The sidecar's own ServiceAccount: its Node, Events, its DaemonSet.
	for _, c := range []struct {
		verb, group, res, name, ns string
		want                       bool
	}{
		{"get", "", "nodes", "gke-c-peer-1", "", true},
		{"create", "", "events", "", "default", true},
		{"get", "apps", "daemonsets", RemediationDaemonSet, Namespace, true},
		{"get", "apps", "daemonsets", DaemonSetName, Namespace, false},
		{"get", "", "secrets", "", Namespace, false},
		{"get", "", "secrets", "", "ml", false},
		{"patch", "", "nodes", "", "", false},
		{"list", "", "pods", "", "", false},
		{"create", "", "events", "", "kube-system", false},
		{"create", "confidentialcontainers.org", "peerpods", "", "ml", false},
	} {
		if got := e.canAs(t, RemediationDaemonSet, c.verb, c.group, c.res, c.name, c.ns); got != c.want {
			t.Errorf("the sidecar's ServiceAccount %s %s %s (ns %q): allowed=%v, want %v", c.verb, c.res, c.name, c.ns, got, c.want)
		}
	}
	t.Run("SidecarIdentity", func(t *testing.T) { e.testSidecarIdentity(t, "gke-c-peer-1") })

	before := e.resourceVersions(t)
	if code, out, errs := e.install(t, "--wif-credential-config="+wif); code != 0 || !strings.Contains(out, "0 changed") {
		t.Fatalf("re-install: exit %d\n%s\n%s", code, out, errs)
	}
	if after := e.resourceVersions(t); !reflect.DeepEqual(before, after) {
		t.Errorf("re-install changed objects:\nbefore %v\nafter  %v", before, after)
	}

	out = e.uninstall(t)
	mustContain(t, "uninstall stdout", out, "keeping Namespace/"+Namespace+": it existed before install")
	e.assertNothingLeft(t)
	ns, err := e.cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the operator's namespace was deleted: %v", err)
	}
	if ns.DeletionTimestamp != nil || ns.Labels["owner"] != "coco-operator" || ns.Labels["pod-security.kubernetes.io/enforce"] != "" {
		t.Errorf("namespace after uninstall: labels %v, deleting %v; want it as the operator left it", ns.Labels, ns.DeletionTimestamp)
	}
	if _, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassName, metav1.GetOptions{}); err != nil {
		t.Errorf("kata-deploy's RuntimeClass after uninstall: %v", err)
	}
}

func (e *env) waitNamespaceGone(t *testing.T) {
	t.Helper()
	for range 300 {
		if _, err := e.cs.CoreV1().Namespaces().Get(context.Background(), Namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("namespace %s still there 30 s after its deletion", Namespace)
}

func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// refused asserts install exits 1 naming wants and creates nothing.
func (e *env) refused(t *testing.T, wants ...string) {
	t.Helper()
	code, out, errs := e.install(t)
	if code != 1 {
		t.Fatalf("install: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	mustContain(t, "stderr", errs, wants...)
	if left := e.ours(t); len(left) > 0 {
		t.Errorf("a refused install created %v", left)
	}
	if _, err := e.cs.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace exists after a refused install: %v", err)
	}
}

func (e *env) testGKECOS(t *testing.T) {
	e.setNodes(t,
		gkeNode("gke-c-cos-1", "cos-pool", "cos", true),
		gkeNode("gke-c-ubuntu-1", "ubuntu-pool", "ubuntu", false),
	)
	e.refused(t, "Container-Optimized OS node pool selected", "node pool cos-pool (nodes gke-c-cos-1)",
		"cannot hold the kata shim", "--image-type=UBUNTU_CONTAINERD", "remove the label from the COS pool")

	e.setNodes(t, gkeNode("gke-c-cos-1", "cos-pool", "cos", false))
	e.refused(t, "every node pool runs Container-Optimized OS", "--image-type=UBUNTU_CONTAINERD")
}

func (e *env) testAutopilot(t *testing.T) {
	n := gkeNode("gk3-c-pool-2-abc", "pool-2", "cos", false)
	n.Labels[labelGKEAutopilot] = "true"
	e.setNodes(t, n)
	e.refused(t, "GKE Autopilot cluster (node gk3-c-pool-2-abc has label cloud.google.com/gke-autopilot)",
		"use a GKE Standard cluster with an Ubuntu node pool")
}

// testPrune: a re-install with other settings removes what the first
// rendered and the second does not (the remediation RBAC), and only that;
// the fixed-name Secret stays, with the key the upgrade keeps.
func (e *env) testPrune(t *testing.T) {
	e.setNodes(t, gkeNode("gke-c-peer-1", "peer", "ubuntu", true))
	key := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(key, testKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.install(t, "--credentials-file="+key); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	e.assertLiveKeyAsFile(t)
	code, out, errs := e.install(t, "--gke=off")
	if code != 0 {
		t.Fatalf("re-install: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "stdout", out, "pruned ClusterRole/caa-gcp-t4-remediate", "pruned Role/default/caa-gcp-t4-remediate-events")
	mustContain(t, "stderr", errs, "GKE without containerd remediation")
	sec, err := e.cs.CoreV1().Secrets(Namespace).Get(t.Context(), SecretName, metav1.GetOptions{})
	if err != nil || !bytes.Equal(sec.Data[credentialsFile], testKey()) {
		t.Errorf("the key did not survive an upgrade that did not mention it: %v", err)
	}
	if container(e.daemonSet(t), "remediate") != nil {
		t.Error("sidecar kept with --gke=off")
	}
	var inv Inventory
	cm, err := e.cs.CoreV1().ConfigMaps(Namespace).Get(t.Context(), InventoryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cm.Data["objects"]), &inv.Objects); err != nil {
		t.Fatal(err)
	}
	for _, r := range inv.Objects {
		if strings.Contains(r.Name, "remediate") {
			t.Errorf("inventory still lists %s", r)
		}
	}
	// Removing the key takes an explicit flag, and then it is gone.
	if code, out, errs := e.install(t, "--use-adc"); code != 0 || !strings.Contains(out, "~ credentials: service account key for caa@p.iam.gserviceaccount.com") {
		t.Fatalf("--use-adc: exit %d\n%s\n%s", code, out, errs)
	}
	sec, err = e.cs.CoreV1().Secrets(Namespace).Get(t.Context(), SecretName, metav1.GetOptions{})
	if err != nil || len(sec.Data) != 0 {
		t.Errorf("Secret after --use-adc: %v, %v", sec.Data, err)
	}
	// Server-side apply drops what the key component set: no mount, no
	// GOOGLE_APPLICATION_CREDENTIALS at a file that is gone.
	assertNoCAAKeyMount(t, &e.daemonSet(t).Spec.Template.Spec)
	e.uninstall(t)
	e.assertNothingLeft(t)
}

func (e *env) testRolloutTimeout(t *testing.T) {
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	e.dsController.Store(false)
	defer e.dsController.Store(true)
	// The apply keeps requiredFlags' 60 s: only the rollout may time out.
	code, out, errs := e.install(t, "--rollout-timeout=1s")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errs)
	}
	mustContain(t, "stdout", out, "waiting for the DaemonSet controller to see the new spec")
	mustContain(t, "stderr", errs, "rollout of daemonset "+Namespace+"/"+DaemonSetName+" not finished", "kubectl -n "+Namespace+" describe daemonset")
	e.dsController.Store(true)
	e.uninstall(t)
	e.assertNothingLeft(t)
}
