package gc

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// StartupListTimeout bounds one listing of the start-up Events: the
// metrics are worth less than the next clean-up pass, which waits for it.
const StartupListTimeout = 20 * time.Second

// startupRetention is how long what was observed of a podVM is kept after
// its last phase, whether or not its Events are still there: longer than
// the API server's --event-ttl (1h by default), so an Event deleted and
// made again (by its namespace's owner, who may delete Events) is not
// counted twice, and a fact older than this is not counted at all.
const startupRetention = 2 * time.Hour

// clockSkew is how far in the future a phase's time may be and still
// count: the adaptor's and the reaper's nodes' clocks differ a little.
const clockSkew = 5 * time.Minute

// startupBuckets cover a start-up from seconds (an agent that answers at
// once) to the provider's create bound (gcpt4.LongestCall, 15 min) and
// beyond, up to 30 min.
var startupBuckets = []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 420, 600, 900, 1200, 1800}

// failureClasses are the failure label's values: the provider's classes,
// "unknown" for a failure without one, and otherLabel.
var failureClasses = []string{podevent.FailureNotAllowed, podevent.FailureNoCapacity, podevent.FailureQuota, podevent.FailureCreate, podevent.FailureBoot,
	podevent.FailureGPU, podevent.FailureCDH, podevent.FailureAgentUnreachable, podevent.FailureAdaptor, podevent.FailureStopped, podevent.FailureNotReady, "unknown", otherLabel}

// otherLabel is the value a label takes when the fact is outside its set
// or the set is full.
const otherLabel = "other"

// Label value sets of the start-up metrics: each value must have the
// form GCE gives it, and each label holds at most so many values, so the
// series a metric can have are bounded whatever the Events say.
var (
	zoneForm   = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	regionForm = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
	gpuForm    = regexp.MustCompile(`^nvidia-[a-z0-9-]{1,40}$`)
	metricForm = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,62}$`)
)

// Most values each label keeps: GCE has about 130 zones and 45 regions;
// a handful of accelerator types and quota metrics apply to podVMs.
const (
	maxZones   = 150
	maxRegions = 60
	maxGPUs    = 24
	maxMetrics = 24
	// maxSeries caps a metric's label combinations beyond the labels'
	// own caps: past it, a new combination is counted as all "other".
	maxSeries = 300
)

// labelSet admits a label's values: of form, while fewer than max are
// held; otherLabel beyond.
type labelSet struct {
	form *regexp.Regexp
	max  int
	held map[string]bool
}

func newLabelSet(form *regexp.Regexp, max int) *labelSet {
	return &labelSet{form: form, max: max, held: map[string]bool{}}
}

func (l *labelSet) value(v string) string {
	if l.held[v] {
		return v
	}
	if !l.form.MatchString(v) || len(l.held) >= l.max {
		return otherLabel
	}
	l.held[v] = true
	return v
}

// Startup turns the start-up Events the provider records on pods into
// the reaper's start-up metrics: each pass lists them (label
// podevent.PhaseLabel, every namespace, through startupevents: only
// Events signed with the adaptor's key count), builds each podVM's
// timeline and observes what is new since the last pass, once per podVM:
// a span when both its phases are known, each zone of a stockout, a quota
// refusal, a failure. What it observed is remembered per podVM for
// startupRetention after its last phase, so its memory is bounded by the
// signed Events of that time.
type Startup struct {
	Client  kubernetes.Interface
	Metrics *Metrics
	Log     *slog.Logger
	// Key is the adaptor's signing key.
	Key *startupevents.KeySource
	// Since is when this reaper started: what ended before it is taken
	// as seen (a reaper restarted re-reads up to an hour of Events that
	// its predecessor counted; counting them again would inflate every
	// rate, so a start-up that ended while no reaper ran goes uncounted).
	Since time.Time
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu      sync.Mutex
	seen    map[string]*seenPodVM
	zones   *labelSet
	regions *labelSet
	gpus    *labelSet
	metrics *labelSet
	// series holds each metric's label combinations so far.
	series map[string]map[string]bool
}

// seenPodVM is what was observed of one podVM.
type seenPodVM struct {
	spans   map[string]bool
	zones   map[string]bool
	quota   bool
	failure bool
	// last is its latest phase's time.
	last time.Time
}

// Pass lists the start-up Events and observes them. A listing failure is
// logged and counted, never returned: the clean-up pass is done by the
// time this runs, and the next runs whatever happens here.
func (s *Startup) Pass(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, StartupListTimeout)
	defer cancel()
	var key []byte
	if s.Key != nil {
		var err error
		if key, err = s.Key.Get(ctx); err != nil {
			// Nothing verifies without the key: the listing still runs, to
			// count the unverified Events. No key yet is a new install's
			// normal state (CAA makes it at its first Event), not a fault.
			log := s.Log.Warn
			if errors.Is(err, startupevents.ErrNoKey) {
				log = s.Log.Info
			}
			log("start-up Events are not counted until the signing key can be read", "err", err)
		}
	}
	res, err := startupevents.List(ctx, s.Client, "", metav1.ListOptions{}, key)
	if err != nil {
		s.Metrics.startupListFailures.Inc()
		s.Log.Warn("listing start-up Events failed; start-up metrics skip this pass", "err", err)
		return
	}
	if res.Unverified > 0 {
		s.Metrics.startupUnverified.Add(float64(res.Unverified))
		s.Log.Warn("start-up Events without a valid signature were not counted: a tenant's, an edited one, or written before CAA had its key",
			"count", res.Unverified, "some", res.Samples)
	}
	if res.Truncated {
		s.Metrics.startupTruncated.Inc()
		s.Log.Warn("the start-up Events' listing stopped at its bound; the rest waits for the next pass", "bound", startupevents.MaxEvents)
	}
	s.Observe(timeline.Build(res.Events, timeline.Options{}))
}

func (s *Startup) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Observe records what is new in tls and forgets the podVMs whose last
// phase is past startupRetention.
func (s *Startup) Observe(tls []timeline.Timeline) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]*seenPodVM{}
		s.zones = newLabelSet(zoneForm, maxZones)
		s.regions = newLabelSet(regionForm, maxRegions)
		s.gpus = newLabelSet(gpuForm, maxGPUs)
		s.metrics = newLabelSet(metricForm, maxMetrics)
		s.series = map[string]map[string]bool{}
	}
	now := s.now()
	for _, tl := range tls {
		key := tl.Namespace + "/" + tl.PodVM
		seen := s.seen[key]
		if seen == nil {
			seen = &seenPodVM{spans: map[string]bool{}, zones: map[string]bool{}}
			s.seen[key] = seen
		}
		for _, e := range tl.Entries {
			if e.At.After(seen.last) && !e.At.After(now.Add(clockSkew)) {
				seen.last = e.At
			}
		}
		s.observe(tl, seen, now)
	}
	for key, seen := range s.seen {
		if seen.last.Before(now.Add(-startupRetention)) {
			delete(s.seen, key)
		}
	}
}

// observe counts each fact of tl once: when first seen, unless it
// happened before Since, longer ago than startupRetention, or later than
// now allows.
func (s *Startup) observe(tl timeline.Timeline, seen *seenPodVM, now time.Time) {
	fresh := func(phase string) bool {
		e, ok := tl.Entry(phase)
		return ok && !e.At.Before(s.Since) && !e.At.Before(now.Add(-startupRetention)) && !e.At.After(now.Add(clockSkew))
	}
	ends := map[string]string{timeline.Create: podevent.PhaseCreated, timeline.Boot: podevent.PhaseBooted, timeline.Agent: podevent.PhaseReachable,
		timeline.Total: podevent.PhaseReachable}
	if tl.State == timeline.StateFailed {
		ends[timeline.Total] = podevent.PhaseFailed
	}
	for _, span := range timeline.Spans {
		d, ok := tl.Durations[span]
		if !ok || seen.spans[span] {
			continue
		}
		seen.spans[span] = true
		if fresh(ends[span]) && d >= 0 {
			s.Metrics.startup.WithLabelValues(span).Observe(d)
		}
	}
	for _, zone := range tl.StockedOut {
		if seen.zones[zone] {
			continue
		}
		seen.zones[zone] = true
		if fresh(podevent.PhaseStockout) {
			s.Metrics.stockouts.WithLabelValues(s.capped("stockouts", s.zones.value(zone), s.gpuLabel(stockoutGPU(tl)))...).Inc()
		}
	}
	if tl.Quota != nil && !seen.quota {
		seen.quota = true
		if fresh(podevent.PhaseQuota) {
			s.Metrics.quotaRefusals.WithLabelValues(s.capped("quota", s.regions.value(tl.Quota.Region), s.metrics.value(tl.Quota.Metric))...).Inc()
		}
	}
	if tl.State == timeline.StateFailed && !seen.failure {
		seen.failure = true
		if fresh(podevent.PhaseFailed) {
			s.Metrics.failures.WithLabelValues(failureLabel(tl.Failure)).Inc()
		}
	}
}

// capped is values, or all otherLabel when metric already holds
// maxSeries combinations and values is not one of them.
func (s *Startup) capped(metric string, values ...string) []string {
	held := s.series[metric]
	if held == nil {
		held = map[string]bool{}
		s.series[metric] = held
	}
	k := strings.Join(values, "\x00")
	if held[k] || len(held) < maxSeries {
		held[k] = true
		return values
	}
	out := make([]string, len(values))
	for i := range out {
		out[i] = otherLabel
	}
	return out
}

// gpuLabel is "" for a podVM without a GPU, else the accelerator type.
func (s *Startup) gpuLabel(gpu string) string {
	if gpu == "" {
		return ""
	}
	return s.gpus.value(gpu)
}

// failureLabel is the failure's class when it is one of failureClasses.
func failureLabel(f string) string {
	switch {
	case f == "":
		return "unknown"
	case slices.Contains(failureClasses, f):
		return f
	default:
		return otherLabel
	}
}

// stockoutGPU is the accelerator a stockout was for: the stockout
// phase's own, else the shape's ("" for a podVM without a GPU).
func stockoutGPU(tl timeline.Timeline) string {
	if e, ok := tl.Entry(podevent.PhaseStockout); ok {
		if g := e.Facts[podevent.GPUAnnotation]; g != "" {
			return g
		}
	}
	return tl.GPU
}
