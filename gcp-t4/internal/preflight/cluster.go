package preflight

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// Cluster runs the Kubernetes checks.
type Cluster struct {
	Client       kubernetes.Interface
	RuntimeClass string
	Namespace    string
	DaemonSet    string
	// GKECluster names the cluster in fix commands.
	GKECluster string
	// MaxImagePull is the longest in-guest image pull the cluster's
	// workloads need: kubelet's runtimeRequestTimeout on every kata node
	// and kata-remote's create_container_timeout must reach it (kubelet.go,
	// createcontainer.go). Zero skips those checks; Main always sets it.
	MaxImagePull time.Duration
	// Remediate names the node sidecar's DaemonSet (RemediateDaemonSet).
	Remediate string
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
	rs := []Result{c.checkOS(ctx, nodes), c.checkContainerd(nodes), c.checkRuntimeClass(ctx), c.checkHandlers(nodes), c.checkDaemonSet(ctx)}
	if r, ok := c.checkRBAC(ctx); ok {
		rs = append(rs, r)
	}
	if r, ok := c.checkEventRBAC(ctx); ok {
		rs = append(rs, r)
	}
	if r, ok := c.checkClusterID(ctx); ok {
		rs = append(rs, r)
	}
	if c.MaxImagePull > 0 && len(nodes) > 0 {
		cat, err := startup.Load()
		if err != nil {
			return append(rs, fail("image pull deadlines", "", "%v", err))
		}
		rs = append(rs, c.checkKubeletTimeouts(ctx, cat, nodes)...)
		rs = append(rs, c.checkCreateContainer(ctx, cat, nodes)...)
	}
	return rs
}

// gke reports whether the cluster's nodes are GKE's.
func (c *Cluster) gke(ctx context.Context) bool {
	l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || len(l.Items) == 0 {
		return false
	}
	_, ok := l.Items[0].Labels[labelNodePool]
	return ok
}

// selectFix is how nodes join the CAA DaemonSet: on GKE a node-pool label
// (a kubectl label is lost when GKE recreates the node), else the label
// upstream's DaemonSet selects.
func (c *Cluster) selectFix(ctx context.Context, selector map[string]string) string {
	if c.gke(ctx) {
		var labels []string
		for k, v := range selector {
			if k == labelOS {
				continue
			}
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		if len(labels) == 0 {
			labels = []string{"caa-gcp-t4/peer-pods=true"}
		}
		return fmt.Sprintf("gcloud container node-pools update POOL --cluster=%s --location=LOCATION --node-labels=%s   # an Ubuntu pool; --node-labels replaces the pool's labels: repeat the ones it has", c.cluster(), strings.Join(labels, ","))
	}
	return "kubectl label node NODE node.kubernetes.io/worker="
}

// checkRBAC asks the API server whether CAA's ServiceAccount, in the
// DaemonSet's namespace, may do what CAA does: a binding whose subject
// names another namespace (a kustomize overlay's namespace: moves the
// ServiceAccount but not the subject) fails here instead of in CAA.
func (c *Cluster) checkRBAC(ctx context.Context) (Result, bool) {
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{})
	if err != nil {
		return Result{}, false
	}
	sa := ds.Spec.Template.Spec.ServiceAccountName
	check := fmt.Sprintf("rbac %s/%s", c.Namespace, sa)
	user := "system:serviceaccount:" + c.Namespace + ":" + sa
	var denied []string
	for _, a := range []authzv1.ResourceAttributes{
		{Verb: "get", Resource: "pods"}, {Verb: "list", Resource: "pods"}, {Verb: "get", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes", Subresource: "status"}, {Verb: "create", Group: "confidentialcontainers.org", Resource: "peerpods"},
	} {
		a := a
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + c.Namespace, "system:authenticated"}, ResourceAttributes: &a}}
		out, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			// The caller may not review access; the other checks stand.
			return Result{}, false
		}
		if !out.Status.Allowed {
			what := a.Verb + " " + a.Resource
			if a.Subresource != "" {
				what += "/" + a.Subresource
			}
			denied = append(denied, what)
		}
	}
	if len(denied) > 0 {
		return fail(check, fmt.Sprintf("kubectl get clusterrolebinding caa-gcp-t4-cloud-api-adaptor -o jsonpath='{.subjects}'   # the subject must be ServiceAccount %s in %s; gcp-t4 install --namespace %s sets it", sa, c.Namespace, c.Namespace),
			"CAA's ServiceAccount may not %s", strings.Join(denied, ", ")), true
	}
	return pass(check, "CAA's ServiceAccount holds what CAA calls"), true
}

// checkEventRBAC: without create, get and patch on Events, CAA still
// creates podVMs but its start-up Events are refused, and a waiting pod
// says only ContainerCreating again: a warning, not a failure.
func (c *Cluster) checkEventRBAC(ctx context.Context) (Result, bool) {
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{})
	if err != nil {
		return Result{}, false
	}
	sa := ds.Spec.Template.Spec.ServiceAccountName
	check := fmt.Sprintf("rbac %s/%s events", c.Namespace, sa)
	user := "system:serviceaccount:" + c.Namespace + ":" + sa
	var denied []string
	for _, verb := range []string{"create", "get", "patch"} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + c.Namespace, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Resource: "events"}}}
		out, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return Result{}, false
		}
		if !out.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	if len(denied) > 0 {
		return warn(check, "gcp-t4 install   # or kubectl apply -k install/overlays/gcp-t4; on the Helm path apply install/helm/caa-provider-rbac.yaml (docs/install.md, \"What the adaptor may do in the cluster\")",
			"CAA's ServiceAccount may not %s events: podVM start-up phases will not show on pods (docs/startup-visibility.md)", strings.Join(denied, ", ")), true
	}
	return pass(check, "CAA may record start-up Events on pods"), true
}

// peerPodNodes are the nodes the CAA DaemonSet selects (all nodes when it
// is not installed yet): where kata-remote pods run.
func (c *Cluster) peerPodNodes(ctx context.Context) ([]corev1.Node, error) {
	sel := labels.Everything().String()
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{})
	switch {
	case err == nil && len(ds.Spec.Template.Spec.NodeSelector) > 0:
		sel = labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).String()
	case err != nil && !apierrors.IsNotFound(err):
		// Not "every node": a DaemonSet that could not be read is no
		// reason to judge nodes outside its selector as kata nodes.
		return nil, fmt.Errorf("reading DaemonSet %s/%s for its node selector: %w", c.Namespace, c.DaemonSet, err)
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// NodeVM is a node's GCE instance, from its gce:// providerID.
type NodeVM struct{ Project, Zone, Name string }

// Nodes returns the peer-pod nodes' internal addresses and GCE
// instances, for the firewall checks (which use the subnets holding the
// addresses and the instances' network tags, never the /32s: GKE
// recreates nodes with new addresses).
func (c *Cluster) Nodes(ctx context.Context) ([]netip.Addr, []NodeVM, error) {
	nodes, err := c.peerPodNodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	var ips []netip.Addr
	var vms []NodeVM
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				ips = append(ips, ip)
			}
		}
		if rest, ok := strings.CutPrefix(n.Spec.ProviderID, "gce://"); ok {
			if parts := strings.Split(rest, "/"); len(parts) == 3 {
				vms = append(vms, NodeVM{parts[0], parts[1], parts[2]})
			}
		}
	}
	return ips, vms, nil
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

func (c *Cluster) checkOS(ctx context.Context, nodes []corev1.Node) Result {
	const check = "node os image"
	if len(nodes) == 0 {
		return fail(check, c.selectFix(ctx, c.selector(ctx)), "no nodes match the CAA DaemonSet's node selector")
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
		// Preflight runs before the install too.
		return warn(check, "gcp-t4 install …   # docs/install.md", "not installed yet")
	case err != nil:
		return fail(check, "", "reading it: %v", err)
	}
	return judgeDaemonSet(check, ds, c.selectFix(ctx, ds.Spec.Template.Spec.NodeSelector))
}

// selector is the CAA DaemonSet's node selector, or upstream's.
func (c *Cluster) selector(ctx context.Context) map[string]string {
	if ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{}); err == nil {
		return ds.Spec.Template.Spec.NodeSelector
	}
	return map[string]string{"node.kubernetes.io/worker": ""}
}

func judgeDaemonSet(check string, ds *appsv1.DaemonSet, selectFix string) Result {
	st := ds.Status
	fix := fmt.Sprintf("kubectl -n %s rollout status ds/%s && kubectl -n %s describe ds/%s", ds.Namespace, ds.Name, ds.Namespace, ds.Name)
	switch {
	case st.DesiredNumberScheduled == 0:
		return fail(check, selectFix, "scheduled on no node: no node matches its node selector %v", ds.Spec.Template.Spec.NodeSelector)
	case st.NumberReady < st.DesiredNumberScheduled:
		return fail(check, fix, "%d of %d pods ready", st.NumberReady, st.DesiredNumberScheduled)
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return warn(check, fix, "ready, but %d of %d pods still run an old revision", st.DesiredNumberScheduled-st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	}
	return pass(check, "%d of %d pods ready", st.NumberReady, st.DesiredNumberScheduled)
}
