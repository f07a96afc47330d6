package preflight

import (
	"net/netip"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func mustPrefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range s {
		out = append(out, netip.MustParsePrefix(v))
	}
	return out
}

const ns, dsName = "confidential-containers-system", "cloud-api-adaptor-daemonset"

func gkeNode(name, os, runtime, ip string, handlers ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		labelNodePool: "peer-pods", labelOS: os, "node.kubernetes.io/worker": "",
	}}}
	n.Status.NodeInfo.ContainerRuntimeVersion = runtime
	n.Status.NodeInfo.OSImage = "Ubuntu 22.04.5 LTS"
	if os == "cos" {
		n.Status.NodeInfo.OSImage = "Container-Optimized OS from Google"
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	for _, h := range handlers {
		n.Status.RuntimeHandlers = append(n.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{Name: h})
	}
	return n
}

func caaDaemonSet(desired, ready, updated int32) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: dsName, Namespace: ns}}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"node.kubernetes.io/worker": ""}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberReady: ready, UpdatedNumberScheduled: updated}
	return ds
}

func runtimeClass(handler string) *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata-remote"}, Handler: handler}
}

func readyCluster() []runtime.Object {
	return []runtime.Object{
		gkeNode("n1", "ubuntu", "containerd://2.0.6", "10.128.0.10", "runc", "kata-remote"),
		gkeNode("n2", "ubuntu", "containerd://2.0.6", "10.128.0.11", "runc", "kata-remote"),
		// Outside the DaemonSet's selector: not checked.
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "system", Labels: map[string]string{labelOS: "cos"}}},
		runtimeClass("kata-remote"),
		caaDaemonSet(2, 2, 2),
	}
}

func clusterChecks(t *testing.T, objs ...runtime.Object) []Result {
	c := &Cluster{Client: fake.NewClientset(objs...), RuntimeClass: "kata-remote", Namespace: ns, DaemonSet: dsName, GKECluster: "gpu"}
	return c.Run(ctx(t))
}

func TestReadyClusterPasses(t *testing.T) {
	rs := clusterChecks(t, readyCluster()...)
	if len(rs) != 5 {
		t.Fatalf("results = %v", rs)
	}
	for _, r := range rs {
		if r.Status != Pass {
			t.Errorf("%s: %s %s", r.Check, r.Status, r.Detail)
		}
	}
	expect(t, rs, "node containerd", Pass, "2.0.6 on 2 node(s) (config version 3)", "")
}

func TestClusterChecksFail(t *testing.T) {
	replace := func(objs []runtime.Object, i int, o runtime.Object) []runtime.Object {
		out := append([]runtime.Object(nil), objs...)
		if o == nil {
			return append(out[:i], out[i+1:]...)
		}
		out[i] = o
		return out
	}
	base := readyCluster()
	cases := []struct {
		name   string
		objs   []runtime.Object
		check  string
		status Status
		detail string
		fix    string
	}{
		{"COS node pool", replace(base, 1, gkeNode("n2", "cos", "containerd://1.7.24", "10.128.0.11")), "node os image", Fail, "Container-Optimized OS", "gcloud container clusters upgrade gpu --node-pool=peer-pods --image-type=UBUNTU_CONTAINERD"},
		{"docker runtime", replace(base, 1, gkeNode("n2", "ubuntu", "docker://20.10", "10.128.0.11")), "node containerd", Fail, "docker://20.10", "UBUNTU_CONTAINERD"},
		{"old containerd", replace(base, 1, gkeNode("n2", "ubuntu", "containerd://1.6.9", "10.128.0.11")), "node containerd", Fail, "older than 1.7", ""},
		{"no runtime class", replace(base, 3, nil), "runtimeclass kata-remote", Fail, "missing", `kubectl apply -f - <<<'{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass"`},
		{"wrong handler", replace(base, 3, runtimeClass("kata")), "runtimeclass kata-remote", Fail, `handler is "kata"`, "kubectl apply"},
		{"node without handler", replace(base, 1, gkeNode("n2", "ubuntu", "containerd://2.0.6", "10.128.0.11", "runc")), "runtime handler kata-remote", Fail, "n2", "kubectl -n confidential-containers-system logs ds/cloud-api-adaptor-daemonset"},
		{"containerd 1.7 reports none", replace(replace(base, 0, gkeNode("n1", "ubuntu", "containerd://1.7.24", "10.128.0.10")), 1, gkeNode("n2", "ubuntu", "containerd://1.7.24", "10.128.0.11")), "runtime handler kata-remote", Warn, "containerd 1.7", ""},
		{"no daemonset", replace(base, 4, nil), "daemonset", Warn, "not installed yet", "gcp-t4 install"},
		{"daemonset not ready", replace(base, 4, caaDaemonSet(2, 1, 2)), "daemonset", Fail, "1 of 2 pods ready", "kubectl -n confidential-containers-system rollout status ds/cloud-api-adaptor-daemonset"},
		{"daemonset rolling", replace(base, 4, caaDaemonSet(2, 2, 1)), "daemonset", Warn, "old revision", "rollout status"},
		// GKE nodes: select a node pool (a kubectl label dies with the node).
		{"daemonset on no node", replace(base, 4, caaDaemonSet(0, 0, 0)), "daemonset", Fail, "no node", "gcloud container node-pools update POOL --cluster=gpu --location=LOCATION --node-labels=node.kubernetes.io/worker="},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, clusterChecks(t, c.objs...), c.check, c.status, c.detail, c.fix)
		})
	}
}

// With a cluster, the firewall checks use the subnets that hold the
// nodes' addresses (the node pool's range), never their /32s, and name a
// node outside the podVMs' network.
func TestClusterNodeAddressesFeedFirewallChecks(t *testing.T) {
	project := readyProject(t)
	if err := project.DeleteFirewall("default-allow-internal"); err != nil {
		t.Fatal(err)
	}
	objs := readyCluster()
	objs[1] = gkeNode("n2", "ubuntu", "containerd://2.0.6", "192.168.7.3", "kata-remote")
	o := Options{Cfg: baseConfig(project), Kube: fake.NewClientset(objs...), Cluster: &Cluster{RuntimeClass: "kata-remote", Namespace: ns, DaemonSet: dsName}}
	rs := Run(ctx(t), o, quiet())
	expect(t, rs, "nodes in network default", Fail, "192.168.7.3", "")
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Fail, "10.128.0.0/20: no rule (nodes: node subnet default 10.128.0.0/20)", "--source-tags=NODE_TAG --target-tags=caa-gcp-t4-podvm")
	for _, r := range rs {
		if strings.Contains(r.Fix, "/32") {
			t.Errorf("%s: fix pins node addresses: %s", r.Check, r.Fix)
		}
	}
	expect(t, rs, "daemonset", Pass, "2 of 2", "")
}
