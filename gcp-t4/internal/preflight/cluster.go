package preflight

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Cluster runs the Kubernetes checks.
type Cluster struct {
	Client       kubernetes.Interface
	RuntimeClass string
	Namespace    string
	DaemonSet    string
	// GKECluster names the cluster in fix commands.
	GKECluster string
}

const (
	labelNodePool = "cloud.google.com/gke-nodepool"
	labelOS       = "cloud.google.com/gke-os-distribution"
)

// Run runs the cluster checks.
func (c *Cluster) Run(ctx context.Context) []Result {
	nodes, err := c.peerPodNodes(ctx)
	if err != nil {
		return []Result{fail("cluster", "kubectl cluster-info", "listing nodes: %v", err)}
	}
	rs := []Result{c.checkOS(nodes), c.checkContainerd(nodes), c.checkRuntimeClass(ctx), c.checkHandlers(nodes), c.checkDaemonSet(ctx)}
	return rs
}

// peerPodNodes are the nodes the CAA DaemonSet selects (all nodes when it
// is not installed yet): where kata-remote pods run.
func (c *Cluster) peerPodNodes(ctx context.Context) ([]corev1.Node, error) {
	sel := labels.Everything().String()
	if ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{}); err == nil && len(ds.Spec.Template.Spec.NodeSelector) > 0 {
		sel = labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).String()
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// NodeCIDRs are the nodes' internal addresses, for the firewall checks.
func (c *Cluster) NodeCIDRs(ctx context.Context) ([]netip.Prefix, error) {
	nodes, err := c.peerPodNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				out = append(out, netip.PrefixFrom(ip, 32))
			}
		}
	}
	return out, nil
}

func pool(n corev1.Node) string {
	if p := n.Labels[labelNodePool]; p != "" {
		return p
	}
	return "node " + n.Name
}

func (c *Cluster) cluster() string {
	if c.GKECluster != "" {
		return c.GKECluster
	}
	return "CLUSTER"
}

func (c *Cluster) checkOS(nodes []corev1.Node) Result {
	const check = "node os image"
	if len(nodes) == 0 {
		return fail(check, "kubectl label node NODE node.kubernetes.io/worker=", "no nodes match the CAA DaemonSet's node selector")
	}
	var cos []string
	for _, n := range nodes {
		if n.Labels[labelOS] == "cos" || strings.Contains(n.Status.NodeInfo.OSImage, "Container-Optimized OS") {
			if p := pool(n); !slices.Contains(cos, p) {
				cos = append(cos, p)
			}
		}
	}
	if len(cos) > 0 {
		sort.Strings(cos)
		return fail(check, fmt.Sprintf("gcloud container clusters upgrade %s --node-pool=%s --image-type=UBUNTU_CONTAINERD", c.cluster(), cos[0]),
			"%s run Container-Optimized OS: its read-only root cannot hold /opt/kata, so kata-remote cannot be installed; use UBUNTU_CONTAINERD", strings.Join(cos, ", "))
	}
	return pass(check, "%d node(s), none on Container-Optimized OS (%s)", len(nodes), nodes[0].Status.NodeInfo.OSImage)
}

func (c *Cluster) checkContainerd(nodes []corev1.Node) Result {
	const check = "node containerd"
	versions := map[string][]string{}
	var bad []string
	for _, n := range nodes {
		v := n.Status.NodeInfo.ContainerRuntimeVersion
		if !strings.HasPrefix(v, "containerd://") {
			bad = append(bad, fmt.Sprintf("%s (%s)", n.Name, v))
			continue
		}
		ver := strings.TrimPrefix(v, "containerd://")
		versions[ver] = append(versions[ver], n.Name)
		if strings.HasPrefix(ver, "1.") && !strings.HasPrefix(ver, "1.7") {
			bad = append(bad, fmt.Sprintf("%s (containerd %s, older than 1.7)", n.Name, ver))
		}
	}
	if len(bad) > 0 {
		return fail(check, fmt.Sprintf("gcloud container clusters upgrade %s --node-pool=POOL --image-type=UBUNTU_CONTAINERD", c.cluster()), "not containerd ≥ 1.7: %s", strings.Join(bad, ", "))
	}
	var vs []string
	for v, ns := range versions {
		schema := "config version 2"
		if !strings.HasPrefix(v, "1.") {
			schema = "config version 3"
		}
		vs = append(vs, fmt.Sprintf("%s on %d node(s) (%s)", v, len(ns), schema))
	}
	sort.Strings(vs)
	return pass(check, "containerd %s", strings.Join(vs, "; "))
}

func (c *Cluster) checkRuntimeClass(ctx context.Context) Result {
	check := "runtimeclass " + c.RuntimeClass
	fix := fmt.Sprintf(`kubectl apply -f - <<<'{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"%[1]s"},"handler":"%[1]s","overhead":{"podFixed":{"cpu":"250m","memory":"120Mi"}}}'`, c.RuntimeClass)
	rc, err := c.Client.NodeV1().RuntimeClasses().Get(ctx, c.RuntimeClass, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fail(check, fix, "missing: pods with runtimeClassName %s are rejected", c.RuntimeClass)
	case err != nil:
		return fail(check, "", "reading it: %v", err)
	case rc.Handler != c.RuntimeClass:
		return fail(check, fix, "handler is %q; containerd's runtime is named %s", rc.Handler, c.RuntimeClass)
	}
	return pass(check, "handler %s", rc.Handler)
}

func (c *Cluster) checkHandlers(nodes []corev1.Node) Result {
	check := "runtime handler " + c.RuntimeClass
	var with, without, unreported []string
	for _, n := range nodes {
		reports := len(n.Status.RuntimeHandlers) > 0
		found := false
		for _, h := range n.Status.RuntimeHandlers {
			found = found || h.Name == c.RuntimeClass
		}
		switch {
		case found:
			with = append(with, n.Name)
		case !reports:
			// containerd 1.7 publishes no runtimeHandlers.
			unreported = append(unreported, n.Name)
		default:
			without = append(without, n.Name)
		}
	}
	diag := fmt.Sprintf("kubectl -n %s logs ds/%s --all-containers   # the remediate sidecar (gcp-t4-node remediate) adds the handler to containerd", c.Namespace, c.DaemonSet)
	switch {
	case len(without) > 0:
		return fail(check, diag, "nodes without %s in status.runtimeHandlers: %s", c.RuntimeClass, strings.Join(without, ", "))
	case len(with) == 0 && len(unreported) > 0:
		return warn(check, "kubectl get nodes -o custom-columns=NAME:.metadata.name,RUNTIME:.status.nodeInfo.containerRuntimeVersion", "nodes report no runtime handlers (containerd 1.7): %s; cannot confirm %s", strings.Join(unreported, ", "), c.RuntimeClass)
	case len(with) == 0:
		return fail(check, diag, "no node")
	}
	return pass(check, "on %d node(s)", len(with))
}

func (c *Cluster) checkDaemonSet(ctx context.Context) Result {
	check := fmt.Sprintf("daemonset %s/%s", c.Namespace, c.DaemonSet)
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fail(check, "kubectl apply -k install/overlays/gcp-t4", "not installed")
	case err != nil:
		return fail(check, "", "reading it: %v", err)
	}
	return judgeDaemonSet(check, ds)
}

func judgeDaemonSet(check string, ds *appsv1.DaemonSet) Result {
	st := ds.Status
	fix := fmt.Sprintf("kubectl -n %s rollout status ds/%s && kubectl -n %s describe ds/%s", ds.Namespace, ds.Name, ds.Namespace, ds.Name)
	switch {
	case st.DesiredNumberScheduled == 0:
		return fail(check, "kubectl label node NODE node.kubernetes.io/worker=", "scheduled on no node: no node matches its node selector")
	case st.NumberReady < st.DesiredNumberScheduled:
		return fail(check, fix, "%d of %d pods ready", st.NumberReady, st.DesiredNumberScheduled)
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return warn(check, fix, "ready, but %d of %d pods still run an old revision", st.DesiredNumberScheduled-st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	}
	return pass(check, "%d of %d pods ready", st.NumberReady, st.DesiredNumberScheduled)
}
