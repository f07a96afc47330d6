package uninstall

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/nodeevents"
)

// Events the sidecar records on its Node when its uninstall pass ran or
// failed (named in nodeevents, which the node binary uses too).
const (
	reasonNodeRestored = nodeevents.ConfigRemoved
	reasonCleanupFail  = nodeevents.CleanupFailed
)

// restoreNodes is the per-node uninstall of the remediation sidecar, run
// before anything else is deleted (its RBAC included): the remediate
// DaemonSet goes first, each of its pods gets SIGTERM, sees its DaemonSet
// gone and restores its node's containerd configuration (restarting
// containerd only where a byte changed), as kata-deploy's pods do on
// removal. It waits for the pods to go and reports each node from the
// Event its sidecar recorded.
func restoreNodes(ctx context.Context, cs kubernetes.Interface, ns string, dryRun bool, stdout io.Writer) error {
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, install.RemediationDaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read daemonset %s/%s: %w", ns, install.RemediationDaemonSet, err)
	}
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	nodes, err := podNodes(ctx, cs, ns, sel)
	if err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(stdout, "would delete DaemonSet/%s/%s first and wait while its pods restore containerd's configuration on %s\n", ns, install.RemediationDaemonSet, orNoNodes(nodes))
		return nil
	}
	since := metav1.NewTime(time.Now().Add(-time.Second).Truncate(time.Second))
	bg := metav1.DeletePropagationBackground
	uid := ds.UID
	if err := cs.AppsV1().DaemonSets(ns).Delete(ctx, install.RemediationDaemonSet, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete daemonset %s/%s: %w", ns, install.RemediationDaemonSet, err)
	}
	fmt.Fprintf(stdout, "deleted DaemonSet/%s/%s; its pods restore containerd's configuration on %s\n", ns, install.RemediationDaemonSet, orNoNodes(nodes))
	var left []string
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		left, err = podNodes(ctx, cs, ns, sel)
		return len(left) == 0, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("remediation pods still running on %s: %w; see `kubectl -n %s logs -l %s`", strings.Join(left, ", "), ctx.Err(), ns, sel)
		}
		return err
	}
	for _, n := range nodes {
		ev, err := lastCleanupEvent(ctx, cs, n, since)
		switch {
		case err != nil:
			return err
		case ev == nil:
			fmt.Fprintf(stdout, "node %s: its sidecar reported no cleanup; on that node run `gcp-t4-node remediate --cleanup` (docs/remediation.md)\n", n)
		case ev.Reason == reasonCleanupFail:
			fmt.Fprintf(stdout, "node %s: cleanup failed: %s\n", n, ev.Message)
		default:
			fmt.Fprintf(stdout, "node %s: %s\n", n, ev.Message)
		}
	}
	return nil
}

func podNodes(ctx context.Context, cs kubernetes.Interface, ns, selector string) ([]string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list remediation pods: %w", err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			out = append(out, p.Spec.NodeName)
		}
	}
	sort.Strings(out)
	return out, nil
}

func lastCleanupEvent(ctx context.Context, cs kubernetes.Interface, node string, since metav1.Time) (*corev1.Event, error) {
	l, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Node", "involvedObject.name": node, "source": "gcp-t4-remediate",
	}.AsSelector().String()})
	if err != nil {
		return nil, fmt.Errorf("list events of node %s: %w", node, err)
	}
	var last *corev1.Event
	for i := range l.Items {
		ev := &l.Items[i]
		if (ev.Reason != reasonNodeRestored && ev.Reason != reasonCleanupFail) || ev.LastTimestamp.Before(&since) {
			continue
		}
		if last == nil || !ev.LastTimestamp.Before(&last.LastTimestamp) {
			last = ev
		}
	}
	return last, nil
}

func orNoNodes(nodes []string) string {
	if len(nodes) == 0 {
		return "no node (none runs it)"
	}
	return "nodes " + strings.Join(nodes, ", ")
}
