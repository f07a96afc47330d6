package gc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// Metrics are the reaper's Prometheus metrics (docs/reaper.md
// has the alert rules that read them).
type Metrics struct {
	Registry *prometheus.Registry

	podVMs         *prometheus.GaugeVec
	orphansSeen    prometheus.Counter
	deleted        prometheus.Counter
	deleteFailures prometheus.Counter
	released       prometheus.Counter
	passes         *prometheus.CounterVec
	lastSuccess    prometheus.Gauge
	otherClusters  prometheus.Gauge
	unownedAge     prometheus.Gauge
	lost           *prometheus.CounterVec

	// Start-ups, from the provider's Events (Startup).
	startup             *prometheus.HistogramVec
	stockouts           *prometheus.CounterVec
	quotaRefusals       *prometheus.CounterVec
	failures            *prometheus.CounterVec
	startupListFailures prometheus.Counter
	startupUnverified   prometheus.Counter
	startupTruncated    prometheus.Counter

	mu   sync.Mutex
	seen map[string]bool
	// lostSeen are the lost and gone VMs counted, kept while a pass still
	// shows them (a lost VM the reaper deleted is gone at the next pass).
	lostSeen map[string]bool
}

// lostCauses are the label values of the lost counter.
var lostCauses = []string{podevent.CausePreempted, podevent.CauseHostMaintenance, podevent.CauseHostError, podevent.CauseGuestShutdown,
	podevent.CauseStopped, podevent.CauseDeleted, podevent.CauseUnknown}

// NewMetrics registers the reaper's metrics on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		podVMs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gcp_t4_reaper_podvms",
			Help: "This cluster's podVMs (and unidentified ones) at the last pass, by verdict."}, []string{"verdict"}),
		orphansSeen: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_orphans_seen_total",
			Help: "Distinct podVMs first judged orphans (within the grace period or past it)."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_deleted_total",
			Help: "Orphan podVMs deleted."}),
		deleteFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_delete_failures_total",
			Help: "Deletes of orphan podVMs that failed (retried next pass)."}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_peerpods_released_total",
			Help: "PeerPod finalizers removed once their podVM was gone."}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gcp_t4_reaper_passes_total",
			Help: "Reaper passes, by result (ok, error: a list failed and nothing was deleted)."}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gcp_t4_reaper_last_success_timestamp_seconds",
			Help: "When the last pass that read every list ended (Unix time)."}),
		otherClusters: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gcp_t4_reaper_other_cluster_podvms",
			Help: "PodVMs in the project labelled with another cluster's ID (never touched)."}),
		unownedAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gcp_t4_reaper_unowned_oldest_age_seconds",
			Help: "Age of the oldest unowned podVM (a live pod's VM that no PeerPod names) at the last pass; 0 when there is none."}),
		startup: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gcp_t4_reaper_podvm_startup_seconds",
			Help:    "PodVM start-ups from the provider's Events, by span: create (requested to created), boot (created to booted), agent (booted to reachable), total (requested to reachable or failed).",
			Buckets: startupBuckets}, []string{"phase"}),
		stockouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gcp_t4_reaper_podvm_zone_stockouts_total",
			Help: "Zones a podVM's create found out of capacity, by zone and accelerator (\"\" for none)."}, []string{"zone", "gpu"}),
		quotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gcp_t4_reaper_podvm_quota_refusals_total",
			Help: "PodVM creates a GCE quota refused, by region and quota metric."}, []string{"region", "metric"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gcp_t4_reaper_podvm_failures_total",
			Help: "PodVM start-ups that failed, by failure class."}, []string{"failure"}),
		startupListFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_startup_event_list_failures_total",
			Help: "Listings of the start-up Events that failed (the start-up metrics skipped that pass; clean-up is not affected)."}),
		startupUnverified: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_startup_events_unverified_total",
			Help: "Start-up Events (label caa-gcp-t4/phase) without a valid signature, summed over passes: a tenant's, an edited one, or one CAA wrote before it had its key. Never counted in the start-up metrics."}),
		startupTruncated: prometheus.NewCounter(prometheus.CounterOpts{Name: "gcp_t4_reaper_startup_event_lists_truncated_total",
			Help: "Listings of the start-up Events that stopped at their bound (startupevents.MaxEvents) before the end."}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gcp_t4_reaper_podvms_lost_total",
			Help: "PodVMs lost while their pod used them (found stopped, or gone from GCE), by cause from GCE's operations."}, []string{"cause"}),
		seen:     map[string]bool{},
		lostSeen: map[string]bool{},
	}
	m.Registry.MustRegister(m.podVMs, m.orphansSeen, m.deleted, m.deleteFailures, m.released, m.passes, m.lastSuccess, m.otherClusters, m.unownedAge,
		m.startup, m.stockouts, m.quotaRefusals, m.failures, m.startupListFailures, m.startupUnverified, m.startupTruncated, m.lost)
	for _, c := range lostCauses {
		m.lost.WithLabelValues(c)
	}
	// Every span and failure class from zero, so that rate() and
	// increase() see the first one.
	for _, span := range timeline.Spans {
		m.startup.WithLabelValues(span)
	}
	for _, class := range failureClasses {
		m.failures.WithLabelValues(class)
	}
	for _, v := range []Verdict{InUse, Creating, TooYoung, Orphan, Unowned, Unidentified, Deleted, DeleteErr} {
		m.podVMs.WithLabelValues(string(v))
	}
	m.passes.WithLabelValues("ok")
	m.passes.WithLabelValues("error")
	return m
}

// Record updates the metrics from a pass.
func (m *Metrics) Record(p Pass, err error, now time.Time) {
	if err != nil {
		m.passes.WithLabelValues("error").Inc()
		return
	}
	m.passes.WithLabelValues("ok").Inc()
	m.lastSuccess.Set(float64(now.Unix()))
	m.otherClusters.Set(float64(p.OtherClusters))
	counts := map[Verdict]int{}
	m.mu.Lock()
	defer m.mu.Unlock()
	current := map[string]bool{}
	var oldest time.Duration
	for _, f := range p.Findings {
		counts[f.Verdict]++
		if f.Verdict == Unowned && !f.VM.Created.IsZero() {
			oldest = max(oldest, now.Sub(f.VM.Created))
		}
		current[f.VM.ID] = true
		switch f.Verdict {
		case TooYoung, Orphan, Deleted, DeleteErr:
			if !m.seen[f.VM.ID] {
				m.seen[f.VM.ID] = true
				m.orphansSeen.Inc()
			}
		}
		switch f.Verdict {
		case Deleted:
			m.deleted.Inc()
		case DeleteErr:
			m.deleteFailures.Inc()
		}
	}
	for id := range m.seen {
		if !current[id] {
			delete(m.seen, id)
		}
	}
	m.recordLost(p)
	m.unownedAge.Set(oldest.Seconds())
	m.released.Add(float64(len(p.Released)))
	for _, v := range []Verdict{InUse, Creating, TooYoung, Orphan, Unowned, Unidentified, Deleted, DeleteErr} {
		m.podVMs.WithLabelValues(string(v)).Set(float64(counts[v]))
	}
}

// recordLost counts each lost or gone VM once, by cause; m.mu is held.
func (m *Metrics) recordLost(p Pass) {
	current := map[string]bool{}
	count := func(id string, in *podevent.Interruption) {
		current[id] = true
		if m.lostSeen[id] {
			return
		}
		m.lostSeen[id] = true
		cause := podevent.CauseUnknown
		if in != nil && in.Cause != "" {
			cause = in.Cause
		}
		m.lost.WithLabelValues(cause).Inc()
	}
	for _, f := range p.Findings {
		if f.Lost {
			count(f.VM.ID, f.Interruption)
		}
	}
	for _, g := range p.Gone {
		count(g.ID, g.Interruption)
	}
	for id := range m.lostSeen {
		if !current[id] {
			delete(m.lostSeen, id)
		}
	}
}

// Events reports what the reaper did as Kubernetes Events on its own pod
// (kubectl describe pod, kubectl get events): deletions and their
// failures every time, and VMs it keeps but cannot account for once per
// VM and process. An unowned VM is also told on the pod it was made for,
// where the pod's author and kubectl describe see it.
type Events struct {
	Client kubernetes.Interface
	// Pod is the reaper's own pod (the downward API's metadata.name,
	// metadata.namespace and metadata.uid).
	Pod corev1.ObjectReference
	Now func() time.Time
	Log *slog.Logger
	// Key signs the PodVMLost Events (start-up Events, which the reaper
	// and status verify) and verifies the failed phase that makes one
	// needless; nil leaves them unsigned.
	Key *startupevents.KeySource

	mu   sync.Mutex
	told map[string]bool
	seq  int
}

// Emit writes the Events of one pass.
func (e *Events) Emit(ctx context.Context, p Pass) {
	for _, f := range p.Findings {
		var typ, reason string
		once := false
		switch f.Verdict {
		case Deleted:
			typ, reason = corev1.EventTypeNormal, "PodVMReaped"
		case DeleteErr:
			typ, reason = corev1.EventTypeWarning, "PodVMReapFailed"
		case Unowned:
			typ, reason, once = corev1.EventTypeWarning, "PodVMUnowned", true
		case Unidentified:
			typ, reason, once = corev1.EventTypeWarning, "PodVMUnidentified", true
		case TooYoung:
			typ, reason, once = corev1.EventTypeNormal, "PodVMOrphanSeen", true
		default:
			continue
		}
		e.emit(ctx, e.Pod, typ, reason, fmt.Sprintf("podVM %s (pod %s/%s, sandbox %.12s, node %s): %s", f.VM.ID, f.VM.Namespace, f.VM.Pod, f.VM.Sandbox, f.VM.Node, f.Reason), once, f.VM.ID)
		if f.Verdict == Unowned && f.Pod != nil {
			ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: f.Pod.Namespace, Name: f.Pod.Name, UID: f.Pod.UID}
			e.emit(ctx, ref, corev1.EventTypeWarning, reason, UnownedPodMessage(f), true, "pod/"+f.VM.ID)
		}
		if f.Verdict == Deleted && f.Lost && f.Pod != nil {
			e.tellLost(ctx, *f.Pod, f.VM.ID, f.Interruption, true)
		}
	}
	for _, g := range p.Gone {
		e.tellLost(ctx, g.Pod, g.ID, g.Interruption, false)
	}
}

// LostPodMessage is the Event a lost podVM's pod gets: which VM, what
// ended it, what the reaper did and what happens to the pod.
func LostPodMessage(podVM, zone string, in *podevent.Interruption, deleted bool) string {
	cause := "the reaper cannot say what ended it (its provider does not read GCE's operations)"
	if in != nil {
		cause = in.Text()
	}
	what := fmt.Sprintf("podVM %s (%s) stopped while this pod still used it: %s. A stopped podVM never runs its sandbox again, so the reaper deleted it, freeing its disk and address", podVM, zone, cause)
	if !deleted {
		what = fmt.Sprintf("podVM %s (%s) no longer exists on GCE while this pod still used it: %s", podVM, zone, cause)
	}
	return what + ". The pod's sandbox is gone with it: kata's shim notices the lost agent within seconds and the kubelet makes a new sandbox on a new podVM; a pod left without one (kubectl describe shows no newer podVM Events) recovers when it is deleted and its controller makes it again."
}

// tellLost records a lost or gone podVM on its pod, once per podVM: with
// the provider's start-up Event schema (phase lost, gcpt4/podevent) under
// the phase's fixed name, so that a restarted reaper finds it already
// told. A gone VM whose start-up the provider reported failed is not
// told: the adaptor deleted it itself, after that failure, and the pod's
// Events already say so.
func (e *Events) tellLost(ctx context.Context, pod Pod, instanceID string, in *podevent.Interruption, deleted bool) {
	zone, podVM := splitInstanceID(instanceID)
	key := "lost/" + pod.Namespace + "/" + podVM
	e.mu.Lock()
	told := e.told[key]
	e.mu.Unlock()
	if told {
		return
	}
	if !deleted {
		failed, err := e.startupFailed(ctx, pod, podVM)
		if err != nil {
			e.Log.Warn("reading a gone podVM's start-up Events failed; telling its pod next pass", "pod", pod.Namespace+"/"+pod.Name, "vm", instanceID, "err", err)
			return
		}
		if failed {
			e.markTold(key)
			return
		}
	}
	at := e.Now()
	if in != nil && !in.At.IsZero() {
		at = in.At
	}
	cause := podevent.CauseUnknown
	if in != nil && in.Cause != "" {
		cause = in.Cause
	}
	now := metav1.NewTime(e.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: podevent.Name(pod.Name, podVM, podevent.PhaseLost), Namespace: pod.Namespace,
			Labels: map[string]string{podevent.PhaseLabel: podevent.PhaseLost, podevent.PodVMLabel: gcpt4.LabelValue(podVM)},
			Annotations: map[string]string{podevent.AtAnnotation: at.UTC().Format(time.RFC3339Nano), podevent.ZoneAnnotation: zone,
				podevent.CauseAnnotation: cause},
		},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         podevent.ReasonLost,
		Message:        LostPodMessage(podVM, zone, in, deleted),
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "gcp-t4-reaper"},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if key := e.key(ctx); key != nil {
		startupevents.Sign(key, ev)
	}
	_, err := e.Client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.Log.Warn("recording a lost podVM's Event failed; retried next pass", "pod", pod.Namespace+"/"+pod.Name, "vm", instanceID, "err", err)
		return
	}
	e.markTold(key)
}

func (e *Events) markTold(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.told == nil {
		e.told = map[string]bool{}
	}
	e.told[key] = true
}

// startupFailed: the provider recorded the podVM's start-up as failed
// (its failed Event, by its fixed name; listed, as the reaper may list
// Events but not get them).
func (e *Events) startupFailed(ctx context.Context, pod Pod, podVM string) (bool, error) {
	list, err := e.Client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + podevent.Name(pod.Name, podVM, podevent.PhaseFailed),
	})
	if err != nil {
		return false, fmt.Errorf("listing pod %s/%s's Events: %w", pod.Namespace, pod.Name, err)
	}
	// Only a failure the adaptor signed stands: a tenant's forged one
	// would otherwise silence the loss of its own pod's VM.
	key := e.key(ctx)
	for i := range list.Items {
		if eventsig.Verify(key, startupevents.FieldsOf(&list.Items[i])) {
			return true, nil
		}
	}
	return false, nil
}

// key is the signing key, nil (logged) while it cannot be read.
func (e *Events) key(ctx context.Context) []byte {
	if e.Key == nil {
		return nil
	}
	key, err := e.Key.Get(ctx)
	if err != nil {
		e.Log.Warn("the start-up Events' signing key cannot be read: PodVMLost goes unsigned", "err", err)
	}
	return key
}

// splitInstanceID reads zones/ZONE/instances/NAME (gcpt4.InstanceID).
func splitInstanceID(id string) (zone, name string) {
	parts := strings.Split(id, "/")
	if len(parts) == 4 && parts[0] == "zones" && parts[2] == "instances" {
		return parts[1], parts[3]
	}
	return "", id
}

// UnownedPodMessage is the Event an unowned VM's pod gets: what the VM is,
// what keeps it, and what the user can do.
func UnownedPodMessage(f Finding) string {
	return fmt.Sprintf("podVM %s (node %s, sandbox %.12s) was created for this pod, but no PeerPod records it. "+
		"If this pod is Running and `kubectl get peerpods -n %s` shows none for it, its sandbox runs on that VM: leave it, it is deleted when the pod ends. "+
		"If the pod is stuck ContainerCreating, the adaptor on node %s died inside the create; the kubelet retries the sandbox and the reaper deletes the VM once a newer sandbox is recorded. "+
		"The VM bills until then; to end it now, delete the pod.", f.VM.ID, f.VM.Node, f.VM.Sandbox, f.Pod.Namespace, f.VM.Node)
}

func (e *Events) emit(ctx context.Context, obj corev1.ObjectReference, typ, reason, msg string, once bool, key string) {
	e.mu.Lock()
	if e.told == nil {
		e.told = map[string]bool{}
	}
	k := reason + "/" + key
	if once && e.told[k] {
		e.mu.Unlock()
		return
	}
	e.told[k] = true
	e.seq++
	seq := e.seq
	e.mu.Unlock()
	now := metav1.NewTime(e.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x.%d", obj.Name, now.UnixNano(), seq), Namespace: obj.Namespace},
		InvolvedObject: obj,
		Reason:         reason,
		Message:        msg,
		Type:           typ,
		Source:         corev1.EventSource{Component: "gcp-t4-reaper"},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if _, err := e.Client.CoreV1().Events(obj.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		e.Log.Warn("recording an Event failed", "reason", reason, "err", err)
	}
}

// Report is the Observer of the reaper Deployment: metrics, then Events,
// then the start-up metrics (after the pass's deletes, so that a slow or
// refused listing of Events never holds up a clean-up).
type Report struct {
	Metrics *Metrics
	Events  *Events
	Startup *Startup
	Now     func() time.Time
}

// Pass records one pass.
func (r Report) Pass(ctx context.Context, p Pass, err error) {
	if r.Metrics != nil {
		r.Metrics.Record(p, err, r.Now())
	}
	if r.Events != nil && err == nil {
		r.Events.Emit(ctx, p)
	}
	if r.Startup != nil {
		r.Startup.Pass(ctx)
	}
}
