package status

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// DefaultEventTTL is kube-apiserver's --event-ttl default: how long an
// Event outlives what it tells.
const DefaultEventTTL = time.Hour

// state is what the API server holds about the pods asked for.
type state struct {
	events []corev1.Event
	// pods by namespace/name; for a named pod, that pod (if it exists).
	pods map[string]*corev1.Pod
	// order is the pods in the order they are reported without Events.
	order []string
	// named is the pod asked for, "" for a namespace or every one.
	named string
	// missing: the named pod does not exist.
	missing bool
	// unverified counts the start-up Events left out for want of a valid
	// signature, samples names some; keyProblem says why no key was had.
	unverified int
	samples    []string
	keyProblem string
	truncated  bool
}

// signingKey reads the adaptor's Event signing key from the namespace of
// CAA's DaemonSet.
func signingKey(ctx context.Context, cs kubernetes.Interface) ([]byte, error) {
	in, err := caaconfig.Read(ctx, cs, "", caaconfig.DaemonSet)
	if err != nil {
		return nil, fmt.Errorf("finding CAA's namespace for the start-up Events' signing key: %w", err)
	}
	if in.DaemonSet == nil {
		return nil, fmt.Errorf("CAA's DaemonSet %s is not installed, so there is no signing key to verify start-up Events with", caaconfig.DaemonSet)
	}
	return startupevents.Key(ctx, cs, in.Namespace)
}

// gather lists the start-up Events (by their phase label, for one pod by
// its name as well) and the pods they are about: the named pod, or the
// namespace's (every namespace's) pods, page by page.
func gather(ctx context.Context, cs kubernetes.Interface, o options) (*state, error) {
	st := &state{pods: map[string]*corev1.Pod{}, named: o.pod}
	ns := o.namespace
	if o.all {
		ns = ""
	}
	var sel metav1.ListOptions
	if o.pod != "" {
		sel.FieldSelector = fields.OneTermEqualSelector("involvedObject.name", o.pod).String()
	}
	// Only Events the adaptor signed are facts (tenants can write Events);
	// without the key none is, and the report says why.
	key, err := signingKey(ctx, cs)
	if err != nil {
		st.keyProblem = err.Error()
	}
	res, err := startupevents.List(ctx, cs, ns, sel, key)
	if err != nil {
		return nil, err
	}
	st.events, st.unverified, st.samples, st.truncated = res.Events, res.Unverified, res.Samples, res.Truncated
	if o.pod != "" {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, o.pod, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			st.missing = true
		case err != nil:
			return nil, fmt.Errorf("reading pod %s/%s: %w", ns, o.pod, err)
		default:
			st.add(p)
		}
		return st, nil
	}
	popts := metav1.ListOptions{Limit: 500}
	for {
		list, err := cs.CoreV1().Pods(ns).List(ctx, popts)
		if err != nil {
			return nil, fmt.Errorf("listing pods in %s (needs RBAC list on pods): %w", where(ns), err)
		}
		for i := range list.Items {
			st.add(&list.Items[i])
		}
		if list.Continue == "" {
			break
		}
		popts.Continue = list.Continue
	}
	sort.Strings(st.order)
	return st, nil
}

func where(ns string) string {
	if ns == "" {
		return "every namespace"
	}
	return "namespace " + ns
}

func (st *state) add(p *corev1.Pod) {
	k := p.Namespace + "/" + p.Name
	st.pods[k] = p
	st.order = append(st.order, k)
}

// podOf is the live pod a timeline's Events name: same namespace and
// name, and the same pod, not an earlier one of that name (the Events
// carry its UID when the provider could read it).
func (st *state) podOf(tl timeline.Timeline) *corev1.Pod {
	p := st.pods[tl.Namespace+"/"+tl.Pod]
	if p == nil || (tl.PodUID != "" && string(p.UID) != tl.PodUID) {
		return nil
	}
	return p
}

// report is what status prints.
type report struct {
	PodVMs        []podVM    `json:"podVMs"`
	WithoutEvents []noEvents `json:"withoutEvents"`
	// Unverified is what was left out: start-up Events without a valid
	// signature (a tenant's, edited, or older than the adaptor's key).
	Unverified *unverified `json:"unverified,omitempty"`
	GCE        gceResult   `json:"gce"`
	Now        time.Time   `json:"now"`
	// ignored says, per Event or fact not believed (timeline.Options'
	// Ignored), which and why; run logs them.
	ignored []string
}

type unverified struct {
	Count   int      `json:"count"`
	Samples []string `json:"samples,omitempty"`
	// KeyProblem is why no signing key was read ("" when one was).
	KeyProblem string `json:"keyProblem,omitempty"`
	// Truncated: the listing stopped at its bound.
	Truncated bool `json:"truncated,omitempty"`
}

// podVM is one timeline and its pod's phase now.
type podVM struct {
	timeline.Timeline
	// PodPhase is the pod's phase; "Deleted" when the pod (this one, by
	// UID) is gone and only its Events are left.
	PodPhase string `json:"podPhase"`
}

// noEvents is a pod without start-up Events, and why.
type noEvents struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Reason    string `json:"reason"`
}

// report builds the timelines at now and says, for each peer pod (or
// the pod named) without Events, why.
func (st *state) report(now time.Time, gce gceResult) report {
	rep := report{GCE: gce, Now: now, PodVMs: []podVM{}, WithoutEvents: []noEvents{}}
	if st.unverified > 0 || st.keyProblem != "" || st.truncated {
		rep.Unverified = &unverified{Count: st.unverified, Samples: st.samples, KeyProblem: st.keyProblem, Truncated: st.truncated}
	}
	// A finished pod's sandbox was stopped, and its VM deleted, when its
	// last container ended: the end of its cost when no failure says
	// otherwise.
	ended := map[timeline.Key]time.Time{}
	for i := range st.events {
		ev := &st.events[i]
		p := st.pods[ev.Namespace+"/"+ev.InvolvedObject.Name]
		if p == nil || (ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != p.UID) {
			continue
		}
		if t := finishedAt(p); !t.IsZero() {
			// By namespace too: this pod's Event may name any podVM, and
			// only its own namespace's is believed to have ended with it.
			ended[timeline.Key{Namespace: ev.Namespace, PodVM: ev.Labels[podevent.PodVMLabel]}] = t
		}
	}
	ignored := func(ev *corev1.Event, why string) {
		rep.ignored = append(rep.ignored, fmt.Sprintf("Event %s/%s: %s", ev.Namespace, ev.Name, why))
	}
	tls := timeline.Build(st.events, timeline.Options{Now: now, VMs: gce.vms, Ended: ended, Ignored: ignored})
	// By pod, then in the order its podVMs started.
	sort.SliceStable(tls, func(a, b int) bool {
		if tls[a].Namespace != tls[b].Namespace {
			return tls[a].Namespace < tls[b].Namespace
		}
		return tls[a].Pod < tls[b].Pod
	})
	seen := map[string]bool{}
	for _, tl := range tls {
		phase := "Deleted"
		if p := st.podOf(tl); p != nil {
			phase = string(p.Status.Phase)
		}
		rep.PodVMs = append(rep.PodVMs, podVM{Timeline: tl, PodPhase: phase})
		seen[tl.Namespace+"/"+tl.Pod] = true
	}
	for _, k := range st.order {
		p := st.pods[k]
		if seen[k] {
			continue
		}
		// Asked for by name, any pod is answered; in a listing, only
		// peer pods are worth a line.
		if reason, peer := whyNoEvents(p, now); peer || st.named != "" {
			rep.WithoutEvents = append(rep.WithoutEvents, noEvents{Namespace: p.Namespace, Pod: p.Name, Reason: reason})
		}
	}
	return rep
}

// finishedAt is when a finished pod's last container ended; zero for a
// pod that has not finished.
func finishedAt(p *corev1.Pod) time.Time {
	if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		return time.Time{}
	}
	var last time.Time
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
	}
	return last
}

// whyNoEvents says why a pod has no start-up Events, and whether it is
// a peer pod at all.
func whyNoEvents(p *corev1.Pod, now time.Time) (string, bool) {
	rc := "(none)"
	if p.Spec.RuntimeClassName != nil {
		rc = *p.Spec.RuntimeClassName
	}
	if rc != plan.DefaultRuntimeClass {
		return fmt.Sprintf("not a peer pod: runtimeClassName %s, not %s; it runs on its node, not in a podVM", rc, plan.DefaultRuntimeClass), false
	}
	if age := now.Sub(p.CreationTimestamp.Time); age > DefaultEventTTL {
		return fmt.Sprintf("created %s ago: its start-up Events have expired (the API server keeps Events for its --event-ttl, default %s)", human(age), human(DefaultEventTTL)), true
	}
	if p.Spec.NodeName == "" {
		return "not scheduled to a node yet: no podVM has been requested", true
	}
	return fmt.Sprintf("none recorded yet: the adaptor on node %s has not requested a podVM, or cannot record Events (its log says \"recording Event … failed\")", p.Spec.NodeName), true
}
