package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeletstandin"
	"github.com/caa-gcp-t4/test/controlplane"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestClusterChecksOnARealAPIServer runs `gcp-t4 preflight -kubeconfig`
// end to end against a real kube-apiserver and the GCE emulator: objects
// go through the server's validation and defaulting, node status (with
// runtimeHandlers) and DaemonSet status through their status subresources.
func TestClusterChecksOnARealAPIServer(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	c := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var kubelets []*kubeletstandin.Kubelet
	for _, spec := range []struct {
		name, ip, runtime string
		handlers          []string
	}{
		{"gke-pool-1", "10.128.0.21", "containerd://2.0.6", []string{"runc", "kata-remote"}},
		{"gke-pool-2", "10.128.0.22", "containerd://2.0.6", []string{"runc"}},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.name, Labels: map[string]string{
			labelNodePool: "peer-pods", labelOS: "ubuntu", "node.kubernetes.io/worker": ""}}}
		n, err := cs.CoreV1().Nodes().Create(c, n, metav1.CreateOptions{})
		must(err)
		n.Status.NodeInfo.ContainerRuntimeVersion = spec.runtime
		n.Status.NodeInfo.OSImage = "Ubuntu 22.04.5 LTS"
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: spec.ip}}
		for _, h := range spec.handlers {
			n.Status.RuntimeHandlers = append(n.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{Name: h})
		}
		_, err = cs.CoreV1().Nodes().UpdateStatus(c, n, metav1.UpdateOptions{})
		must(err)
		// Its kubelet, behind the node proxy, at a Hostname address (which
		// the API server prefers), so the firewall checks keep the
		// InternalIP. Its configuration leaves runtimeRequestTimeout at
		// kubelet's default, 2m.
		k := kubeletstandin.Start(t, "")
		must(k.Attach(c, cs, spec.name, corev1.NodeHostName))
		kubelets = append(kubelets, k)
	}
	_, err := cs.NodeV1().RuntimeClasses().Create(c, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata-remote"}, Handler: "kata-remote"}, metav1.CreateOptions{})
	must(err)
	_, err = cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	labels := map[string]string{"app": "cloud-api-adaptor"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: dsName, Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector:       map[string]string{"node.kubernetes.io/worker": ""},
			ServiceAccountName: "cloud-api-adaptor",
			Containers:         []corev1.Container{{Name: "cloud-api-adaptor-con", Image: "cloud-api-adaptor"}},
		}},
	}}
	ds, err = cs.AppsV1().DaemonSets(ns).Create(c, ds, metav1.CreateOptions{})
	must(err)
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2, NumberAvailable: 1}
	_, err = cs.AppsV1().DaemonSets(ns).UpdateStatus(c, ds, metav1.UpdateOptions{})
	must(err)

	// CAA's RBAC as a kustomize overlay with `namespace: peer-pods` leaves
	// it: the binding's subject still names the base's namespace.
	_, err = cs.RbacV1().ClusterRoles().Create(c, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "caa"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"confidentialcontainers.org"}, Resources: []string{"peerpods"}, Verbs: []string{"create", "patch", "update"}},
	}}, metav1.CreateOptions{})
	must(err)
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "caa"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "caa"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "cloud-api-adaptor", Namespace: "some-other-namespace"}}}
	binding, err = cs.RbacV1().ClusterRoleBindings().Create(c, binding, metav1.CreateOptions{})
	must(err)

	project := readyProject(t)
	// CAA's own key: its permissions are the ones testIamPermissions tests.
	key := filepath.Join(t.TempDir(), "key.json")
	must(os.WriteFile(key, []byte(caaKey()), 0o600))
	preflightMain := func() (int, []Result) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), []string{"-kubeconfig", cp.Kubeconfig, "-o", "json",
			"-gcp-project-id", project.Project(), "-zone", "us-central1-a", "-image-name", "podvm-t4",
			"-network", "default", "-subnetwork", "default", "-gcp-endpoint", project.URL(), "-credentials-file", key}, &out, &errOut, quiet())
		var doc struct {
			Results []Result `json:"results"`
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatalf("preflight output: %v\n%s%s", err, out.String(), errOut.String())
		}
		return code, doc.Results
	}
	code, rs := preflightMain()
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	expect(t, rs, "node os image", Pass, "2 node(s)", "")
	expect(t, rs, "node containerd", Pass, "2.0.6 on 2 node(s)", "")
	expect(t, rs, "runtimeclass kata-remote", Pass, "handler kata-remote", "")
	expect(t, rs, "runtime handler kata-remote", Fail, "gke-pool-2", "logs ds/cloud-api-adaptor-daemonset")
	expect(t, rs, "daemonset", Fail, "1 of 2 pods ready", "rollout status")
	expect(t, rs, "rbac "+ns+"/cloud-api-adaptor", Fail, "may not get pods, list pods, get nodes, patch nodes/status, create peerpods", "gcp-t4 install --namespace "+ns)
	expect(t, rs, "rbac "+ns+"/cloud-api-adaptor events", Warn, "may not create, get, patch events: podVM start-up phases will not show on pods", "caa-provider-rbac.yaml")
	// The firewall checks used the subnet of the nodes' InternalIPs.
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Pass, "default-allow-internal (nodes: node subnet default 10.128.0.0/20)", "")
	if r, _ := find(rs, "firewall tcp:15150"); strings.Contains(r.Detail, "assumed") {
		t.Errorf("firewall check assumed node addresses despite the kubeconfig: %s", r.Detail)
	}
	// The in-guest image pull's deadlines against -max-image-pull's
	// default, kubelet's own 2m (GKE's, which it cannot raise): a stock
	// kubelet passes, kata's 60 s does not, and the fix is install's value.
	for _, n := range []string{"gke-pool-1", "gke-pool-2"} {
		expect(t, rs, "kubelet runtimeRequestTimeout "+n, Pass, "2m0s (kubelet's default: its configuration does not set it) ≥ --max-image-pull 2m0s", "")
	}
	expect(t, rs, "kata-remote create_container_timeout", Fail, "1m0s (kata's default", "gcp-t4 install --create-container-timeout=20m0s")

	// Repair what failed, through the API, and preflight passes.
	n, err := cs.CoreV1().Nodes().Get(c, "gke-pool-2", metav1.GetOptions{})
	must(err)
	n.Status.RuntimeHandlers = append(n.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{Name: "kata-remote"})
	_, err = cs.CoreV1().Nodes().UpdateStatus(c, n, metav1.UpdateOptions{})
	must(err)
	ds, err = cs.AppsV1().DaemonSets(ns).Get(c, dsName, metav1.GetOptions{})
	must(err)
	ds.Status.NumberReady, ds.Status.NumberAvailable = 2, 2
	_, err = cs.AppsV1().DaemonSets(ns).UpdateStatus(c, ds, metav1.UpdateOptions{})
	must(err)
	binding.Subjects[0].Namespace = ns
	role, err := cs.RbacV1().ClusterRoles().Get(c, "caa", metav1.GetOptions{})
	must(err)
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "get", "patch"}})
	_, err = cs.RbacV1().ClusterRoles().Update(c, role, metav1.UpdateOptions{})
	must(err)
	_, err = cs.RbacV1().ClusterRoleBindings().Update(c, binding, metav1.UpdateOptions{})
	must(err)
	// The authorizer learns RBAC changes from a watch: wait until it has.
	must(cp.WaitForAccess(c, "system:serviceaccount:"+ns+":cloud-api-adaptor", authzv1.ResourceAttributes{Verb: "patch", Resource: "events", Namespace: "default"}, authzv1.ResourceAttributes{Verb: "list", Resource: "pods"}))
	for _, k := range kubelets {
		k.Set("30m0s")
	}
	// The node sidecar with install's create_container_timeout, Ready on
	// both nodes (as a kubelet reports it).
	sidecarLabels := map[string]string{"app": RemediateDaemonSet}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: RemediateDaemonSet}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.AppsV1().DaemonSets(ns).Create(c, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: RemediateDaemonSet, Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: sidecarLabels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sidecarLabels}, Spec: corev1.PodSpec{ServiceAccountName: RemediateDaemonSet,
			Containers: []corev1.Container{{Name: "remediate", Image: "caa-gcp-t4", Args: []string{"--host-root=/host", "--create-container-timeout=20m"}}}}},
	}}, metav1.CreateOptions{})
	must(err)
	for _, node := range []string{"gke-pool-1", "gke-pool-2"} {
		p, err := cs.CoreV1().Pods(ns).Create(c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: RemediateDaemonSet + "-" + node, Labels: sidecarLabels},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: RemediateDaemonSet, Containers: []corev1.Container{{Name: "remediate", Image: "caa-gcp-t4"}}}}, metav1.CreateOptions{})
		must(err)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(c, p, metav1.UpdateOptions{})
		must(err)
	}
	code, rs = preflightMain()
	for _, r := range rs {
		// The emulator's default network keeps default-allow-internal,
		// which preflight warns about (exposure_test.go).
		if r.Status != Pass && !strings.Contains(r.Check, "others→podVMs") {
			t.Errorf("%s: %s %s", r.Check, r.Status, r.Detail)
		}
	}
	if code != 0 {
		t.Errorf("exit %d after the repairs, want 0", code)
	}
}
