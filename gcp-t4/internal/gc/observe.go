package gc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
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

	// Start-ups, from the provider's Events (Startup).
	startup             *prometheus.HistogramVec
	stockouts           *prometheus.CounterVec
	quotaRefusals       *prometheus.CounterVec
	failures            *prometheus.CounterVec
	startupListFailures prometheus.Counter

	mu   sync.Mutex
	seen map[string]bool
}

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
		seen: map[string]bool{},
	}
	m.Registry.MustRegister(m.podVMs, m.orphansSeen, m.deleted, m.deleteFailures, m.released, m.passes, m.lastSuccess, m.otherClusters, m.unownedAge,
		m.startup, m.stockouts, m.quotaRefusals, m.failures, m.startupListFailures)
	// Every span and failure class from zero, so that rate() and
	// increase() see the first one.
	for _, span := range timeline.Spans {
		m.startup.WithLabelValues(span)
	}
	for _, class := range []string{gcpt4.FailureNotAllowed, gcpt4.FailureNoCapacity, gcpt4.FailureQuota, gcpt4.FailureCreate, gcpt4.FailureBoot,
		gcpt4.FailureGPU, gcpt4.FailureCDH, gcpt4.FailureAgentUnreachable, gcpt4.FailureNotReady} {
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
	m.unownedAge.Set(oldest.Seconds())
	m.released.Add(float64(len(p.Released)))
	for _, v := range []Verdict{InUse, Creating, TooYoung, Orphan, Unowned, Unidentified, Deleted, DeleteErr} {
		m.podVMs.WithLabelValues(string(v)).Set(float64(counts[v]))
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
	}
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
