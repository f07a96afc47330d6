package gc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// StartupListTimeout bounds one listing of the start-up Events: the
// metrics are worth less than the next clean-up pass, which waits for it.
const StartupListTimeout = 20 * time.Second

// startupBuckets cover a start-up from seconds (an agent that answers at
// once) to the provider's create bound (gcpt4.LongestCall, 15 min) and
// beyond, up to 30 min.
var startupBuckets = []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 420, 600, 900, 1200, 1800}

// Startup turns the start-up Events the provider records on pods into
// the reaper's start-up metrics: each pass lists them (label
// gcpt4.EventPhaseLabel, every namespace), builds each podVM's timeline
// and observes what is new since the last pass, once per podVM: a span
// when both its phases are known, each zone of a stockout, a quota
// refusal, a failure. What it observed is remembered per podVM until
// the podVM's Events are gone (the API server's --event-ttl, 1h by
// default), so its memory is bounded by the Events the cluster holds.
type Startup struct {
	Client  kubernetes.Interface
	Metrics *Metrics
	Log     *slog.Logger
	// Since is when this reaper started: what ended before it is taken
	// as seen (a reaper restarted re-reads up to an hour of Events that
	// its predecessor counted; counting them again would inflate every
	// rate, so a start-up that ended while no reaper ran goes uncounted).
	Since time.Time

	mu   sync.Mutex
	seen map[string]*seenPodVM
}

// seenPodVM is what was observed of one podVM.
type seenPodVM struct {
	spans   map[string]bool
	zones   map[string]bool
	quota   bool
	failure bool
}

// Pass lists the start-up Events and observes them. A listing failure is
// logged and counted, never returned: the clean-up pass is done by the
// time this runs, and the next runs whatever happens here.
func (s *Startup) Pass(ctx context.Context) {
	events, err := s.list(ctx)
	if err != nil {
		s.Metrics.startupListFailures.Inc()
		s.Log.Warn("listing start-up Events failed; start-up metrics skip this pass", "err", err)
		return
	}
	s.Observe(timeline.Build(events, timeline.Options{}))
}

func (s *Startup) list(ctx context.Context) ([]corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, StartupListTimeout)
	defer cancel()
	var out []corev1.Event
	opts := metav1.ListOptions{LabelSelector: gcpt4.EventPhaseLabel, Limit: 500}
	for {
		list, err := s.Client.CoreV1().Events("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing Events labelled %s in all namespaces (needs RBAC list on events): %w", gcpt4.EventPhaseLabel, err)
		}
		out = append(out, list.Items...)
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// Observe records what is new in tls and forgets the podVMs tls no
// longer holds.
func (s *Startup) Observe(tls []timeline.Timeline) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]*seenPodVM{}
	}
	current := map[string]bool{}
	for _, tl := range tls {
		key := tl.Namespace + "/" + tl.PodVM
		current[key] = true
		seen := s.seen[key]
		if seen == nil {
			seen = &seenPodVM{spans: map[string]bool{}, zones: map[string]bool{}}
			s.seen[key] = seen
		}
		s.observe(tl, seen)
	}
	for key := range s.seen {
		if !current[key] {
			delete(s.seen, key)
		}
	}
}

// observe counts each fact of tl once: when first seen, unless it
// happened before Since.
func (s *Startup) observe(tl timeline.Timeline, seen *seenPodVM) {
	fresh := func(phase string) bool {
		e, ok := tl.Entry(phase)
		return ok && !e.At.Before(s.Since)
	}
	ends := map[string]string{timeline.Create: gcpt4.PhaseCreated, timeline.Boot: gcpt4.PhaseBooted, timeline.Agent: gcpt4.PhaseReachable,
		timeline.Total: gcpt4.PhaseReachable}
	if tl.State == timeline.StateFailed {
		ends[timeline.Total] = gcpt4.PhaseFailed
	}
	for _, span := range timeline.Spans {
		d, ok := tl.Durations[span]
		if !ok || seen.spans[span] {
			continue
		}
		seen.spans[span] = true
		if fresh(ends[span]) {
			s.Metrics.startup.WithLabelValues(span).Observe(d)
		}
	}
	for _, zone := range tl.StockedOut {
		if seen.zones[zone] {
			continue
		}
		seen.zones[zone] = true
		if fresh(gcpt4.PhaseStockout) {
			s.Metrics.stockouts.WithLabelValues(zone, stockoutGPU(tl)).Inc()
		}
	}
	if tl.Quota != nil && !seen.quota {
		seen.quota = true
		if fresh(gcpt4.PhaseQuota) {
			s.Metrics.quotaRefusals.WithLabelValues(tl.Quota.Region, tl.Quota.Metric).Inc()
		}
	}
	if tl.State == timeline.StateFailed && !seen.failure {
		seen.failure = true
		if fresh(gcpt4.PhaseFailed) {
			s.Metrics.failures.WithLabelValues(orUnknown(tl.Failure)).Inc()
		}
	}
}

// stockoutGPU is the accelerator a stockout was for: the stockout
// phase's own, else the shape's ("" for a podVM without a GPU).
func stockoutGPU(tl timeline.Timeline) string {
	if e, ok := tl.Entry(gcpt4.PhaseStockout); ok {
		if g := e.Facts[gcpt4.EventGPUAnnotation]; g != "" {
			return g
		}
	}
	return tl.GPU
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
