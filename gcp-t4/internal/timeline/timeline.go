// Package timeline turns a pod's start-up Events, as the gcp-t4 provider
// records them (one core/v1 Event per phase per podVM, labelled
// podevent.PhaseLabel; src/cloud-providers/gcpt4/podevent), into one
// timeline per podVM: the phases in order, the time between them, the
// zones that had no capacity, the shape the VM got and what it has cost.
//
// It reads only what the provider writes for tools (labels and
// annotations), never the messages, which are for people. Its functions
// are pure: the caller lists the Events (by label selector), says what
// time it is and, if it asked GCE, whether each VM still exists.
// `gcp-t4 status` prints the result; the reaper turns it into metrics.
//
// Whoever may create Events in a namespace (the stock edit role) can
// write one that looks like the provider's, so a fact is checked as it is
// read: a price that is not a plain decimal within MaxPricePerHour, a GPU
// count that is not an integer within MaxGPUCount, a time past the
// caller's now by more than MaxSkew is dropped (Options.Ignored hears
// of it), and whatever is kept per podVM is kept by its namespace and
// name (Key), so that an Event in one namespace never changes what is
// said of another's podVM.
package timeline

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	corev1 "k8s.io/api/core/v1"
)

// The spans of a start-up, each between two phases. Their names are the
// keys of Timeline.Durations and the reaper's histogram's phase label.
const (
	// Create is requested → created: the insert, its operation and every
	// zone tried on the way.
	Create = "create"
	// Boot is created → booted: firmware, kernel, the GPU driver.
	Boot = "boot"
	// Agent is booted → reachable: the agent up and CAA connected to it.
	Agent = "agent"
	// Total is requested → reachable, or requested → failed.
	Total = "total"
)

// Spans lists the span names in the order a start-up goes through them.
var Spans = []string{Create, Boot, Agent, Total}

// States of a timeline, from its phases.
const (
	// StateStarting: requested, neither reachable nor failed yet.
	StateStarting = "starting"
	// StateReachable: the pod's sandbox is ready on the podVM.
	StateReachable = "reachable"
	// StateFailed: the start-up ended in a failure (Timeline.Failure).
	StateFailed = "failed"
)

// factAnnotations are the annotations an Entry carries as facts: the
// schema's, but the time, which is the Entry's At.
var factAnnotations = []string{
	podevent.ZoneAnnotation, podevent.ZonesAnnotation, podevent.MachineTypeAnnotation,
	podevent.GPUAnnotation, podevent.GPUCountAnnotation, podevent.ProvisioningModelAnnotation,
	podevent.PriceAnnotation, podevent.IPAnnotation, podevent.QuotaMetricAnnotation,
	podevent.RegionAnnotation, podevent.DriverAnnotation, podevent.FailureAnnotation, podevent.CauseAnnotation,
}

// Bounds of the facts read from an Event. A list price above
// MaxPricePerHour is no GCE shape's (the dearest GPU VMs list at some
// hundred USD an hour); no podVM shape has more than MaxGPUCount GPUs
// (a2-megagpu-16g). MaxSkew is how far past the caller's clock a phase's
// time may be: the cluster's clocks and the caller's differ a little.
const (
	MaxPricePerHour = 1000.0
	MaxGPUCount     = 16
	MaxSkew         = 5 * time.Minute
)

// decimal is how the provider writes a price (strconv 'f'): no sign,
// exponent, hex, Inf or NaN, which ParseFloat would take.
var decimal = regexp.MustCompile(`^[0-9]{1,6}(\.[0-9]{1,12})?$`)

// ParsePrice reads a price-per-hour annotation: a plain decimal from 0
// to MaxPricePerHour; false for anything else (unknown, never costed).
func ParsePrice(s string) (float64, bool) {
	if !decimal.MatchString(s) {
		return 0, false
	}
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p < 0 || p > MaxPricePerHour {
		return 0, false
	}
	return p, true
}

// ParseGPUCount reads a gpu-count annotation: digits only, 0 to
// MaxGPUCount.
func ParseGPUCount(s string) (int, bool) {
	if s == "" || len(s) > 2 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxGPUCount {
		return 0, false
	}
	return n, true
}

// Key names a podVM: its namespace and name. The name alone is not
// enough: an Event in another namespace may name any podVM.
type Key struct {
	Namespace string
	PodVM     string
}

// Entry is one phase of a podVM's start-up.
type Entry struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
	// At is when the phase happened; for a phase that repeated (a
	// stockout in a second zone), the last time.
	At time.Time `json:"at"`
	// First is when a repeated phase first happened (the Event's
	// firstTimestamp, whole seconds); zero when it happened once.
	First time.Time `json:"first,omitzero"`
	// Offset is At less the requested phase's time (the first phase's
	// when no requested Event is left).
	Offset  time.Duration `json:"-"`
	Seconds float64       `json:"offsetSeconds"`
	Count   int           `json:"count"`
	Warning bool          `json:"warning,omitempty"`
	// Message is the Event's message, for people: a printer shows facts.
	Message string `json:"message,omitempty"`
	// Facts are the phase's annotations (gcpt4.Event…Annotation), by key.
	Facts map[string]string `json:"facts,omitempty"`
}

// Quota is a quota refusal the create met (the quota phase).
type Quota struct {
	Region string `json:"region,omitempty"`
	Metric string `json:"metric,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// VM is what GCE says of a podVM, when the caller asked it.
type VM struct {
	// Exists: the instance is listed now.
	Exists bool `json:"exists"`
	// Status is GCE's (RUNNING, STOPPING, …) when it exists.
	Status string `json:"status,omitempty"`
}

// Cost is what a podVM has cost at its list price.
type Cost struct {
	USD float64 `json:"usd"`
	// From is the created phase; Until is now, or when the VM ended.
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Ongoing: the VM still bills (Until is now).
	Ongoing bool `json:"ongoing"`
	// AtLeast: GCE no longer lists the VM and nothing says when it went,
	// so Until is the last phase the VM was known in and the cost a floor.
	AtLeast bool `json:"atLeast,omitempty"`
}

// Timeline is one podVM's start-up.
type Timeline struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// PodUID is the pod the Events name (empty when the provider could
	// not read it).
	PodUID  string  `json:"podUID,omitempty"`
	PodVM   string  `json:"podVM"`
	Entries []Entry `json:"entries"`
	// Durations are the spans (Create, Boot, Agent, Total) whose two
	// phases are both known, in seconds.
	Durations map[string]float64 `json:"durationsSeconds"`
	// StockedOut are the zones that had no capacity, in the order tried.
	StockedOut []string `json:"stockedOut,omitempty"`
	Quota      *Quota   `json:"quota,omitempty"`
	// The shape: from the created phase, else the latest phase that says.
	Zone              string `json:"zone,omitempty"`
	MachineType       string `json:"machineType,omitempty"`
	GPU               string `json:"gpu,omitempty"`
	GPUCount          int    `json:"gpuCount,omitempty"`
	ProvisioningModel string `json:"provisioningModel,omitempty"`
	IP                string `json:"ip,omitempty"`
	Driver            string `json:"driver,omitempty"`
	// PricePerHour is the list price in USD; nil when the provider's
	// price table does not know the shape.
	PricePerHour *float64 `json:"pricePerHour,omitempty"`
	State        string   `json:"state"`
	Failure      string   `json:"failure,omitempty"`
	// Cost is nil until the VM was created, or without a price.
	Cost *Cost `json:"cost,omitempty"`
	// VM is GCE's word on the podVM, when the caller asked.
	VM *VM `json:"vm,omitempty"`
}

// Entry returns the entry of a phase.
func (t Timeline) Entry(phase string) (Entry, bool) {
	for _, e := range t.Entries {
		if e.Phase == phase {
			return e, true
		}
	}
	return Entry{}, false
}

// Start is when the start-up began: the requested phase, else the first
// entry's time.
func (t Timeline) Start() time.Time {
	if e, ok := t.Entry(podevent.PhaseRequested); ok {
		return e.At
	}
	if len(t.Entries) > 0 {
		return t.Entries[0].At
	}
	return time.Time{}
}

// Key is the timeline's podVM.
func (t Timeline) Key() Key { return Key{t.Namespace, t.PodVM} }

// Options are what the caller knows beyond the Events.
type Options struct {
	// Now ends the cost of a VM that still bills; a time later than Now
	// by over MaxSkew is not believed. Zero: no time is too late.
	Now time.Time
	// VMs is GCE's word by podVM (the namespace its labels name); nil
	// when GCE was not asked, and a podVM missing from a non-nil map is
	// gone.
	VMs map[Key]VM
	// Ended is when a podVM stopped billing, when the caller learned it
	// elsewhere (its pod's containers finished).
	Ended map[Key]time.Time
	// Ignored, when set, hears of each Event or fact not believed, and
	// why, so that the caller can log it.
	Ignored func(ev *corev1.Event, why string)
}

func (o Options) ignored(ev *corev1.Event, format string, a ...any) {
	if o.Ignored != nil {
		o.Ignored(ev, fmt.Sprintf(format, a...))
	}
}

// IsStartupEvent reports whether ev is one of the provider's start-up
// Events: labelled with a known phase and a podVM.
func IsStartupEvent(ev *corev1.Event) bool {
	return slices.Contains(podevent.Phases, ev.Labels[podevent.PhaseLabel]) && ev.Labels[podevent.PodVMLabel] != ""
}

// Build groups the start-up Events among events by podVM and returns one
// timeline each, in the order they started (then namespace, podVM).
// Events that are not start-up Events are ignored, as is a second Event
// of a phase already seen for a podVM (the newest wins).
func Build(events []corev1.Event, opts Options) []Timeline {
	type key struct{ namespace, podVM string }
	groups := map[key][]*corev1.Event{}
	var order []key
	for i := range events {
		ev := &events[i]
		if !IsStartupEvent(ev) {
			continue
		}
		if _, ok := eventTime(ev, opts); !ok {
			continue
		}
		k := key{ev.Namespace, ev.Labels[podevent.PodVMLabel]}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], ev)
	}
	out := make([]Timeline, 0, len(order))
	for _, k := range order {
		out = append(out, build(k.namespace, k.podVM, groups[k], opts))
	}
	slices.SortStableFunc(out, func(a, b Timeline) int {
		return cmp.Or(a.Start().Compare(b.Start()), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.PodVM, b.PodVM))
	})
	return out
}

func build(namespace, podVM string, events []*corev1.Event, opts Options) Timeline {
	t := Timeline{Namespace: namespace, PodVM: podVM, Durations: map[string]float64{}}
	byPhase := map[string]Entry{}
	var newest time.Time
	for _, ev := range events {
		e := entry(ev, opts)
		// The pod is the one the newest Event names (a podVM is one
		// pod's; this only makes the choice independent of list order).
		if t.Pod == "" || e.At.After(newest) {
			t.Pod, t.PodUID, newest = ev.InvolvedObject.Name, string(ev.InvolvedObject.UID), e.At
		}
		if prev, ok := byPhase[e.Phase]; ok && !e.At.After(prev.At) {
			continue
		}
		byPhase[e.Phase] = e
	}
	for _, ph := range podevent.Phases {
		if e, ok := byPhase[ph]; ok {
			t.Entries = append(t.Entries, e)
		}
	}
	// Phases in time order; the schema's order breaks ties (a stockout and
	// the next insert's quota refusal can share a timestamp).
	slices.SortStableFunc(t.Entries, func(a, b Entry) int { return a.At.Compare(b.At) })
	start := t.Start()
	for i := range t.Entries {
		t.Entries[i].Offset = t.Entries[i].At.Sub(start)
		t.Entries[i].Seconds = t.Entries[i].Offset.Seconds()
	}

	span := func(name, from, to string) {
		a, okA := byPhase[from]
		b, okB := byPhase[to]
		if okA && okB && !b.At.Before(a.At) {
			t.Durations[name] = b.At.Sub(a.At).Seconds()
		}
	}
	span(Create, podevent.PhaseRequested, podevent.PhaseCreated)
	span(Boot, podevent.PhaseCreated, podevent.PhaseBooted)
	span(Agent, podevent.PhaseBooted, podevent.PhaseReachable)
	switch {
	case has(byPhase, podevent.PhaseReachable):
		t.State = StateReachable
		span(Total, podevent.PhaseRequested, podevent.PhaseReachable)
	case has(byPhase, podevent.PhaseFailed):
		t.State = StateFailed
		span(Total, podevent.PhaseRequested, podevent.PhaseFailed)
	default:
		t.State = StateStarting
	}
	if f, ok := byPhase[podevent.PhaseFailed]; ok {
		t.Failure = f.Facts[podevent.FailureAnnotation]
	}
	if s, ok := byPhase[podevent.PhaseStockout]; ok {
		t.StockedOut = splitZones(s.Facts[podevent.ZonesAnnotation])
	}
	if q, ok := byPhase[podevent.PhaseQuota]; ok {
		t.Quota = &Quota{Region: q.Facts[podevent.RegionAnnotation], Metric: q.Facts[podevent.QuotaMetricAnnotation], Zone: q.Facts[podevent.ZoneAnnotation]}
	}

	// The shape the VM got is the created phase's; before it (or without
	// it) the latest phase that names one: the requested insert, or a
	// later try in another zone or model.
	fact := func(key string) string {
		if e, ok := byPhase[podevent.PhaseCreated]; ok && e.Facts[key] != "" {
			return e.Facts[key]
		}
		for i := len(t.Entries) - 1; i >= 0; i-- {
			if v := t.Entries[i].Facts[key]; v != "" {
				return v
			}
		}
		return ""
	}
	if _, ok := byPhase[podevent.PhaseCreated]; ok {
		t.Zone = fact(podevent.ZoneAnnotation)
	} else if e, ok := byPhase[podevent.PhaseRequested]; ok {
		t.Zone = e.Facts[podevent.ZoneAnnotation]
	}
	t.MachineType = fact(podevent.MachineTypeAnnotation)
	t.GPU = fact(podevent.GPUAnnotation)
	t.GPUCount, _ = ParseGPUCount(fact(podevent.GPUCountAnnotation))
	t.ProvisioningModel = fact(podevent.ProvisioningModelAnnotation)
	t.IP = fact(podevent.IPAnnotation)
	t.Driver = fact(podevent.DriverAnnotation)
	if p, ok := ParsePrice(fact(podevent.PriceAnnotation)); ok {
		t.PricePerHour = &p
	}

	if opts.VMs != nil {
		vm := opts.VMs[t.Key()] // missing: gone, the zero VM
		t.VM = &vm
	}
	t.Cost = cost(t, byPhase, opts)
	return t
}

// cost is the price times the time the VM billed: from created until now
// while it still bills, or until it ended. GCE's word wins: a VM GCE
// still lists bills even after a failed phase (its delete failed, and the
// reaper collects it). Otherwise it ended at the failed or lost phase (the earlier), else when
// the caller says (its pod finished); one GCE no longer lists, with no end
// known, went at some time after its last phase (a floor); without GCE's
// word a VM that has not failed still bills.
func cost(t Timeline, byPhase map[string]Entry, opts Options) *Cost {
	created, ok := byPhase[podevent.PhaseCreated]
	if !ok || t.PricePerHour == nil {
		return nil
	}
	c := &Cost{From: created.At}
	failed, isFailed := byPhase[podevent.PhaseFailed]
	if l, isLost := byPhase[podevent.PhaseLost]; isLost && (!isFailed || l.At.Before(failed.At)) {
		// Lost: it stopped billing its run when it stopped or vanished.
		failed, isFailed = l, true
	}
	ended := opts.Ended[t.Key()]
	switch {
	case t.VM != nil && t.VM.Exists:
		c.Until, c.Ongoing = opts.Now, true
	case isFailed:
		c.Until = failed.At
	case !ended.IsZero():
		c.Until = ended
	case t.VM != nil:
		c.Until, c.AtLeast = t.Entries[len(t.Entries)-1].At, true
	default:
		c.Until, c.Ongoing = opts.Now, true
	}
	if c.Until.Before(c.From) {
		c.Until = c.From
	}
	c.USD = *t.PricePerHour * c.Until.Sub(c.From).Hours()
	return c
}

func has(m map[string]Entry, phase string) bool {
	_, ok := m[phase]
	return ok
}

// entry reads a start-up Event that Build kept; what it ignored of its
// time was said there.
func entry(ev *corev1.Event, opts Options) Entry {
	quiet := opts
	quiet.Ignored = nil
	at, _ := eventTime(ev, quiet)
	e := Entry{
		Phase:   ev.Labels[podevent.PhaseLabel],
		Reason:  ev.Reason,
		At:      at,
		Count:   max(int(ev.Count), 1),
		Warning: ev.Type == corev1.EventTypeWarning,
		Message: ev.Message,
	}
	if e.Count > 1 && !ev.FirstTimestamp.IsZero() {
		e.First = ev.FirstTimestamp.UTC()
	}
	for _, k := range factAnnotations {
		if v := ev.Annotations[k]; v != "" {
			if !validFact(k, v) {
				opts.ignored(ev, "annotation %s %q: not a %s", k, v, factForm[k])
				continue
			}
			if e.Facts == nil {
				e.Facts = map[string]string{}
			}
			e.Facts[k] = v
		}
	}
	return e
}

// factForm says what a checked fact must be, for the Ignored line.
var factForm = map[string]string{
	podevent.PriceAnnotation:    fmt.Sprintf("plain decimal from 0 to %g (USD an hour)", MaxPricePerHour),
	podevent.GPUCountAnnotation: fmt.Sprintf("whole number from 0 to %d", MaxGPUCount),
}

func validFact(key, v string) bool {
	switch key {
	case podevent.PriceAnnotation:
		_, ok := ParsePrice(v)
		return ok
	case podevent.GPUCountAnnotation:
		_, ok := ParseGPUCount(v)
		return ok
	}
	return true
}

// eventTime is the phase's time: the provider's annotation (RFC 3339,
// nanoseconds; the Event's own timestamps hold whole seconds), else the
// Event's last time it happened. A time later than opts.Now by over
// MaxSkew is not believed and the next one is tried; false when none is
// left (the Event is not read).
func eventTime(ev *corev1.Event, opts Options) (time.Time, bool) {
	late := func(t time.Time) bool { return !opts.Now.IsZero() && t.After(opts.Now.Add(MaxSkew)) }
	if a, ok := ev.Annotations[podevent.AtAnnotation]; ok {
		t, err := time.Parse(time.RFC3339Nano, a)
		switch {
		case err != nil:
			opts.ignored(ev, "annotation %s %q: not an RFC 3339 time", podevent.AtAnnotation, a)
		case late(t):
			opts.ignored(ev, "annotation %s %s: later than now (%s) by over %s", podevent.AtAnnotation, a, opts.Now.UTC().Format(time.RFC3339), MaxSkew)
		default:
			return t.UTC(), true
		}
	}
	for _, t := range []time.Time{ev.LastTimestamp.Time, ev.EventTime.Time, ev.FirstTimestamp.Time, ev.CreationTimestamp.Time} {
		if t.IsZero() {
			continue
		}
		if late(t) {
			opts.ignored(ev, "its time %s is later than now (%s) by over %s: the Event is not read", t.UTC().Format(time.RFC3339), opts.Now.UTC().Format(time.RFC3339), MaxSkew)
			return time.Time{}, false
		}
		return t.UTC(), true
	}
	return time.Time{}, true
}

func splitZones(s string) []string {
	var out []string
	for z := range strings.SplitSeq(s, ",") {
		if z = strings.TrimSpace(z); z != "" && !slices.Contains(out, z) {
			out = append(out, z)
		}
	}
	return out
}
