package preflight

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// RemediateDaemonSet is the node sidecar's DaemonSet
// (install/components/gke-remediation).
const RemediateDaemonSet = "gcp-t4-remediate"

// createContainerArg is the sidecar's argument that it writes into
// kata-remote's config.d as create_container_timeout; the sidecar is Ready
// only when kata-remote's effective value on its node is at least it.
const createContainerArg = startup.SidecarFlag

// sidecarTimeout is the sidecar's --create-container-timeout; ok is false
// when no container passes it.
func sidecarTimeout(cs []corev1.Container) (d time.Duration, ok bool, err error) {
	for _, c := range cs {
		val, found, err := startup.SidecarTimeoutArg(append(append([]string(nil), c.Command...), c.Args...))
		if err != nil {
			return 0, false, err
		}
		if !found {
			continue
		}
		d, err := time.ParseDuration(val)
		if err != nil {
			return 0, false, fmt.Errorf("--%s=%s: %w", createContainerArg, val, err)
		}
		return d, true, nil
	}
	return 0, false, nil
}

// checkCreateContainer holds kata-remote's create_container_timeout, as
// the sidecar sets it, to -max-image-pull, and checks the sidecar is
// Ready (its effective value in place) on every kata node.
func (c *Cluster) checkCreateContainer(ctx context.Context, cat *startup.Catalog, nodes []corev1.Node) []Result {
	const check = "kata-remote create_container_timeout"
	row, _ := cat.Deadline(startup.KataCreateContainer)
	// The fix names install's own value unless the admin asks for more.
	fix := fmt.Sprintf("gcp-t4 install --create-container-timeout=%s", max(c.MaxImagePull, cat.InstallCreateContainerTimeout()))
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.Remediate, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, caaErr := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{}); apierrors.IsNotFound(caaErr) && row.Default.Duration < c.MaxImagePull {
			// Preflight before the install: nothing to hold yet.
			return []Result{warn(check, fix, "not installed yet: kata's default %s is below --max-image-pull %s until gcp-t4 install sets it", row.Default.Duration, c.MaxImagePull)}
		}
	} else if err != nil {
		return []Result{fail(check, "", "reading DaemonSet %s/%s: %v", c.Namespace, c.Remediate, err)}
	}
	d, set := row.Default.Duration, false
	if ds != nil && err == nil {
		var perr error
		if d, set, perr = sidecarTimeout(ds.Spec.Template.Spec.Containers); perr != nil {
			return []Result{fail(check, fix, "DaemonSet %s/%s: %v", c.Namespace, c.Remediate, perr)}
		}
		if !set {
			d = row.Default.Duration
		}
	}
	what := fmt.Sprintf("%s (--%s of DaemonSet %s/%s)", d, createContainerArg, c.Namespace, c.Remediate)
	if !set {
		what = fmt.Sprintf("%s (kata's default: no DaemonSet %s/%s passes --%s, and nothing else raises it)", d, c.Namespace, c.Remediate, createContainerArg)
	}
	var rs []Result
	if d < c.MaxImagePull {
		rs = append(rs, fail(check, fix, "%s < --max-image-pull %s: it bounds the agent's CreateContainer, which pulls the image in the guest; a longer pull fails (%s)", what, c.MaxImagePull, row.OnExpiry))
	} else {
		rs = append(rs, pass(check, "%s ≥ --max-image-pull %s", what, c.MaxImagePull))
	}
	if ds == nil || err != nil {
		return rs
	}
	return append(rs, c.checkSidecarReady(ctx, ds.Spec.Selector, nodes, d)...)
}

// checkSidecarReady: the sidecar's pod on each kata node is Ready, which
// it is only with kata-remote's effective create_container_timeout there
// at least its argument.
func (c *Cluster) checkSidecarReady(ctx context.Context, sel *metav1.LabelSelector, nodes []corev1.Node, want time.Duration) []Result {
	check := "sidecar " + c.Remediate
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return []Result{fail(check, "", "DaemonSet %s/%s selector: %v", c.Namespace, c.Remediate, err)}
	}
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return []Result{fail(check, "", "listing its pods: %v", err)}
	}
	onNode := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil {
			onNode[p.Spec.NodeName] = p
		}
	}
	var rs []Result
	for _, n := range nodes {
		p := onNode[n.Name]
		if p == nil {
			rs = append(rs, fail(check+" on "+n.Name, fmt.Sprintf("kubectl -n %s describe ds/%s   # its Events say why no pod runs on %s", c.Namespace, c.Remediate, n.Name),
				"no %s pod on kata node %s: nothing there keeps kata-remote's create_container_timeout at %s", c.Remediate, n.Name, want))
			continue
		}
		if !podReady(p) {
			rs = append(rs, fail(check+" on "+n.Name, fmt.Sprintf("kubectl -n %s describe pod %s   # its Events (the readiness probe's message) say why", c.Namespace, p.Name),
				"pod %s on kata node %s is not Ready: it is Ready only when kata-remote's effective create_container_timeout there is at least %s", p.Name, n.Name, want))
		}
	}
	if len(rs) == 0 {
		rs = append(rs, pass(check, "Ready on %d kata node(s): kata-remote's create_container_timeout is at least %s there", len(nodes), want))
	}
	return rs
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
