package remediate

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Metrics are the sidecar's Prometheus series, in a registry of their own.
type Metrics struct {
	Registry      *prometheus.Registry
	Drift         prometheus.Counter
	FilesWritten  prometheus.Counter
	Restarts      prometheus.Counter
	Failures      *prometheus.CounterVec
	LastConverged prometheus.Gauge
	Converged     prometheus.Gauge
}

// NewMetrics registers the series.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry:      prometheus.NewRegistry(),
		Drift:         prometheus.NewCounter(prometheus.CounterOpts{Name: "gcpt4_remediate_drift_detected_total", Help: "Reconciles that found the containerd config without the desired handler settings."}),
		FilesWritten:  prometheus.NewCounter(prometheus.CounterOpts{Name: "gcpt4_remediate_files_written_total", Help: "Config files replaced."}),
		Restarts:      prometheus.NewCounter(prometheus.CounterOpts{Name: "gcpt4_remediate_containerd_restarts_total", Help: "containerd restarts requested."}),
		Failures:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gcpt4_remediate_failures_total", Help: "Failed reconciles by reason."}, []string{"reason"}),
		LastConverged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gcpt4_remediate_last_converged_timestamp_seconds", Help: "When the node was last seen converged."}),
		Converged:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "gcpt4_remediate_converged", Help: "1 when the config and the running containerd have the handler."}),
	}
	m.Registry.MustRegister(m.Drift, m.FilesWritten, m.Restarts, m.Failures, m.LastConverged, m.Converged)
	return m
}

// Events records Kubernetes Events on this node; the zero value (no
// client) only logs.
type Events struct {
	Client   API
	NodeName string
	Logger   *slog.Logger
}

// Emit records one event; a failure to record is logged, never fatal.
func (e Events) Emit(ctx context.Context, warning bool, reason, msg string) {
	typ := corev1.EventTypeNormal
	level := slog.LevelInfo
	if warning {
		typ, level = corev1.EventTypeWarning, slog.LevelWarn
	}
	if e.Logger != nil {
		e.Logger.Log(ctx, level, msg, "reason", reason, "node", e.NodeName)
	}
	if e.Client == nil || e.NodeName == "" {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		// Node events live in the default namespace and carry the node's
		// name as UID, as kubelet's do; `kubectl describe node` finds them
		// that way.
		ObjectMeta:          metav1.ObjectMeta{GenerateName: e.NodeName + ".gcp-t4-remediate.", Namespace: metav1.NamespaceDefault},
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", Name: e.NodeName, UID: types.UID(e.NodeName), APIVersion: "v1"},
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Source:              corev1.EventSource{Component: "gcp-t4-remediate", Host: e.NodeName},
		ReportingController: "caa-gcp-t4/remediate",
		ReportingInstance:   e.NodeName,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Client.CreateEvent(ctx, ev); err != nil && e.Logger != nil {
		e.Logger.Warn("recording node event failed", "reason", reason, "err", fmt.Sprint(err))
	}
}
