package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// RestartPeerPodsFlag is the flag that lets install roll CAA under live
// peer pods.
const RestartPeerPodsFlag = "restart-peer-pods"

// errRollRefused marks install's refusal to roll CAA while peer pods run
// on its nodes: nothing was written. Main exits 2 for it, as for the other
// change install refuses before it writes (a committable key), so a script
// can tell "refused, add a flag" from "failed".
var errRollRefused = errors.New("refusing to restart CAA under running peer pods; nothing was changed")

// rollListMax bounds the pods a refusal names: a cluster with hundreds of
// GPU pods gets a count, not a screenful.
const rollListMax = 20

// KataPod is a pod of the kata-remote RuntimeClass that has not finished.
type KataPod struct {
	Namespace, Name string
	// Node is spec.nodeName, "" while the pod is not scheduled.
	Node  string
	Phase corev1.PodPhase
}

// String is namespace/name, made safe to print: tenants write pod names,
// and what reaches a terminal from them goes through termout.Clean as
// every command's tenant-written text does.
func (p KataPod) String() string {
	return termout.Clean(p.Namespace) + "/" + termout.Clean(p.Name)
}

// KataPods lists every kata-remote pod that has not finished (neither
// Succeeded nor Failed), sorted by namespace and name: the pods that a
// CAA restart or removal takes down. install's roll check and uninstall's
// guard share it. It lists pods cluster-wide, in pages.
func KataPods(ctx context.Context, cs kubernetes.Interface) ([]KataPod, error) {
	var out []KataPod
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := cs.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods cluster-wide to find %s ones: %w", RuntimeClassName, err)
		}
		for _, p := range list.Items {
			if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != RuntimeClassName ||
				p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			out = append(out, KataPod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Phase: p.Status.Phase})
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// rollsCAA tells whether applying ds (the rendered CAA DaemonSet) would
// change the live DaemonSet's pod template, which makes the DaemonSet
// controller replace CAA's pod on every node. A server-side dry run of ds
// alone gives the template the API server would store, defaults and
// other managers' fields included, so a rendering that differs from the
// live object only in what the server fills in is no change. false when
// no DaemonSet is live (a first install), when the result's
// updateStrategy is OnDelete (the template changes, no pod is replaced),
// or when another field manager's fields conflict (Apply then stops at
// the DaemonSet without changing it).
// It writes nothing.
func (c Cluster) rollsCAA(ctx context.Context, ds *unstructured.Unstructured, force bool) (bool, error) {
	r := refOf(ds)
	ri, err := c.resource(r)
	if err != nil {
		return false, err
	}
	live, err := ri.Get(ctx, r.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", r, err)
	}
	after, err := c.applyOne(ctx, ri, ds, ApplyOptions{DryRun: true, ForceConflicts: force})
	if apierrors.IsConflict(err) {
		// Another manager owns fields of the template: Apply stops at
		// this DaemonSet with the same conflict and its fix, leaving it
		// as it is, so this run rolls nothing.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dry-run apply %s to see whether CAA restarts: %w", r, err)
	}
	if t, _, _ := unstructured.NestedString(after.Object, "spec", "updateStrategy", "type"); t == "OnDelete" {
		return false, nil
	}
	before, _, _ := unstructured.NestedMap(live.Object, "spec", "template")
	next, _, _ := unstructured.NestedMap(after.Object, "spec", "template")
	return !equality.Semantic.DeepEqual(before, next), nil
}

// checkRoll is install's guard against restarting peer pods unasked,
// run after the checks and the diff and before anything is written, on
// the one path a first install and an upgrade share. A change that rolls
// CAA (its pod template: the settings hash, the image) ends the sandbox of
// every kata-remote pod running or starting on each node, because kata's
// shim reaches the pod's agent through CAA's process; kubelet makes each
// again on a new podVM and the old one bills until the reaper's pass
// (docs/node-harness.md, TestKataRemoteCAARollingUpdate). So with such
// pods it refuses (errRollRefused) unless restart is set; a dry run
// reports what a real run would refuse and succeeds. Pods not yet
// scheduled have no sandbox to lose and are not counted.
func checkRoll(ctx context.Context, cs kubernetes.Interface, cl Cluster, objs []*unstructured.Unstructured, restart, dryRun, force bool, stdout, stderr io.Writer) error {
	var ds *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" && o.GetName() == DaemonSetName {
			ds = o
		}
	}
	if ds == nil {
		return nil
	}
	rolls, err := cl.rollsCAA(ctx, ds, force)
	if err != nil || !rolls {
		return err
	}
	all, err := KataPods(ctx, cs)
	if err != nil {
		return fmt.Errorf("%w (the installer needs cluster-admin; it lists pods to find the peer pods a CAA restart would restart)", err)
	}
	var pods []KataPod
	for _, p := range all {
		if p.Node != "" {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		fmt.Fprintln(stdout, "CAA restarts on every node (its pod template changes); no kata-remote pod is running or starting, so no peer pod restarts")
		return nil
	}
	grace := gc.DefaultPolicy().Grace
	if v := configOf(objs)["REAPER_GRACE"]; v != "" {
		// Validated with the rest of peer-pods-cm before this runs.
		if d, err := time.ParseDuration(v); err == nil {
			grace = d
		}
	}
	report := rollReport(pods, grace)
	switch {
	case restart:
		fmt.Fprintf(stderr, "warning: --%s: %s\n", RestartPeerPodsFlag, report)
		return nil
	case dryRun:
		fmt.Fprintf(stdout, "dry run: %s\na real run refuses this change unless --%s is given, or until no kata-remote pod runs\n", report, RestartPeerPodsFlag)
		return nil
	}
	return fmt.Errorf("%w: %s\nrerun with --%s to restart them now, or when no kata-remote pod runs (gcp-t4 install --dry-run lists them)", errRollRefused, report, RestartPeerPodsFlag)
}

// rollReport says what a CAA roll costs the pods: how many on how many
// nodes, up to rollListMax of them by name, and what happens to each.
func rollReport(pods []KataPod, grace time.Duration) string {
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Node] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "this change restarts CAA on every node (its pod template changes: the settings' hash or the image), and with it the %d kata-remote pod(s) running or starting on %d node(s):\n", len(pods), len(nodes))
	for i, p := range pods {
		if i == rollListMax {
			fmt.Fprintf(&b, "  … and %d more\n", len(pods)-rollListMax)
			break
		}
		phase := string(p.Phase)
		if phase == "" {
			phase = string(corev1.PodPending)
		}
		fmt.Fprintf(&b, "  pod %s (node %s, %s)\n", p, termout.Clean(p.Node), termout.Clean(phase))
	}
	fmt.Fprintf(&b, "each restarts on a new podVM (its image pull and model load start over), and each old podVM keeps billing until the reaper deletes it, REAPER_GRACE (%s) after (docs/reaper.md)", grace)
	return b.String()
}
