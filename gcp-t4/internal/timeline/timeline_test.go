package timeline

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

var t0 = time.Date(2026, 5, 4, 9, 0, 0, 250_000_000, time.UTC)

var gpuPod = timelinetest.Startup{Namespace: "ml", Pod: "cuda-0", PodUID: "uid-cuda-0", PodVM: "podvm-cuda-0-1a2b3c4d", Start: t0,
	Zone: "us-central1-a", MachineType: "n1-standard-4", GPU: "nvidia-tesla-t4", GPUCount: "1", Model: "SPOT", Price: "0.2"}

func objects(evs ...timelinetest.Event) []corev1.Event {
	out := make([]corev1.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, *e.Object())
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestFullStartup: two zones out of stock, then created in a third,
// booted, reachable: every span, the zones, the zone it got, the shape,
// and the cost from created until now at the created phase's price.
func TestFullStartup(t *testing.T) {
	s := gpuPod
	stock := s.Phase(podevent.PhaseStockout, 5*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-a,us-central1-b"})
	stock.First, stock.Count = t0.Add(2*time.Second), 2
	evs := objects(
		// Listed out of order, as a List may return them.
		s.Phase(podevent.PhaseBooted, 104*time.Second, map[string]string{podevent.DriverAnnotation: "535.183.01", podevent.GPUCountAnnotation: "1"}),
		s.Phase(podevent.PhaseRequested, 0, nil),
		stock,
		s.Phase(podevent.PhaseCreated, 41*time.Second, map[string]string{podevent.ZoneAnnotation: "us-central1-c", podevent.IPAnnotation: "10.0.0.7", podevent.PriceAnnotation: "0.25"}),
		s.Phase(podevent.PhaseReachable, 110*time.Second, nil),
	)
	now := t0.Add(41*time.Second + 2*time.Hour)
	tls := Build(evs, Options{Now: now})
	if len(tls) != 1 {
		t.Fatalf("%d timelines, want 1", len(tls))
	}
	tl := tls[0]
	var phases []string
	for _, e := range tl.Entries {
		phases = append(phases, e.Phase)
	}
	if want := []string{"requested", "stockout", "created", "booted", "reachable"}; !slices.Equal(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
	want := map[string]float64{Create: 41, Boot: 63, Agent: 6, Total: 110}
	for k, v := range want {
		if !near(tl.Durations[k], v) {
			t.Errorf("%s = %vs, want %v", k, tl.Durations[k], v)
		}
	}
	if len(tl.Durations) != len(want) {
		t.Errorf("durations %v", tl.Durations)
	}
	if e, _ := tl.Entry(podevent.PhaseStockout); e.Count != 2 || !e.First.Equal(t0.Add(2*time.Second).Truncate(time.Second)) || e.Offset != 5*time.Second || !e.Warning {
		t.Errorf("stockout entry %+v", e)
	}
	if tl.Namespace != "ml" || tl.Pod != "cuda-0" || tl.PodUID != "uid-cuda-0" || tl.PodVM != s.PodVM || tl.State != StateReachable {
		t.Errorf("identity %s/%s %s %s state %s", tl.Namespace, tl.Pod, tl.PodUID, tl.PodVM, tl.State)
	}
	if !slices.Equal(tl.StockedOut, []string{"us-central1-a", "us-central1-b"}) || tl.Zone != "us-central1-c" {
		t.Errorf("stocked out %v, zone %s; want a, b and the created phase's c", tl.StockedOut, tl.Zone)
	}
	if tl.MachineType != "n1-standard-4" || tl.GPU != "nvidia-tesla-t4" || tl.GPUCount != 1 || tl.ProvisioningModel != "SPOT" || tl.IP != "10.0.0.7" || tl.Driver != "535.183.01" {
		t.Errorf("shape %+v", tl)
	}
	if tl.PricePerHour == nil || *tl.PricePerHour != 0.25 {
		t.Fatalf("price %v, want the created phase's 0.25", tl.PricePerHour)
	}
	if c := tl.Cost; c == nil || !near(c.USD, 0.5) || !c.Ongoing || c.AtLeast || !c.Until.Equal(now) || !c.From.Equal(t0.Add(41*time.Second)) {
		t.Errorf("cost %+v, want 0.5 USD (2 h at 0.25), ongoing", c)
	}
	if tl.VM != nil {
		t.Errorf("VM %+v without asking GCE", tl.VM)
	}
	// JSON carries spans in seconds and the facts by annotation key.
	b, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"durationsSeconds":{`, `"total":110`, `"offsetSeconds":41`, `"` + podevent.IPAnnotation + `":"10.0.0.7"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("JSON lacks %s: %s", s, b)
		}
	}
}

// TestFailedStartup: a quota refusal, then no capacity anywhere: no VM,
// so no cost; total runs to the failure.
func TestFailedStartup(t *testing.T) {
	s := gpuPod
	evs := objects(
		s.Phase(podevent.PhaseRequested, 0, nil),
		s.Phase(podevent.PhaseQuota, 3*time.Second, map[string]string{podevent.RegionAnnotation: "us-central1", podevent.QuotaMetricAnnotation: "NVIDIA_T4_GPUS", podevent.ZoneAnnotation: "us-central1-a"}),
		s.Phase(podevent.PhaseFailed, 9*time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureNoCapacity}),
	)
	tl := Build(evs, Options{Now: t0.Add(time.Hour)})[0]
	if tl.State != StateFailed || tl.Failure != podevent.FailureNoCapacity || !near(tl.Durations[Total], 9) || len(tl.Durations) != 1 {
		t.Errorf("state %s failure %s durations %v", tl.State, tl.Failure, tl.Durations)
	}
	if tl.Quota == nil || *tl.Quota != (Quota{Region: "us-central1", Metric: "NVIDIA_T4_GPUS", Zone: "us-central1-a"}) {
		t.Errorf("quota %+v", tl.Quota)
	}
	if tl.Cost != nil {
		t.Errorf("cost %+v for a VM never created", tl.Cost)
	}
	if tl.Zone != "us-central1-a" {
		t.Errorf("zone %q, want the requested one while none was created", tl.Zone)
	}
}

// TestStartingHasNoSpansYet: only requested: no span, still starting.
func TestStartingHasNoSpansYet(t *testing.T) {
	tl := Build(objects(gpuPod.Phase(podevent.PhaseRequested, 0, nil)), Options{Now: t0})[0]
	if tl.State != StateStarting || len(tl.Durations) != 0 || tl.Cost != nil {
		t.Errorf("%+v", tl)
	}
}

// TestCostEnds: until when a VM billed, by what is known.
func TestCostEnds(t *testing.T) {
	s := gpuPod
	req, created := s.Phase(podevent.PhaseRequested, 0, nil), s.Phase(podevent.PhaseCreated, 30*time.Second, nil)
	booted := s.Phase(podevent.PhaseBooted, 90*time.Second, nil)
	failed := s.Phase(podevent.PhaseFailed, 30*time.Second+30*time.Minute, map[string]string{podevent.FailureAnnotation: podevent.FailureAgentUnreachable})
	now := t0.Add(30*time.Second + 2*time.Hour)
	ended := t0.Add(30*time.Second + time.Hour)
	for _, c := range []struct {
		name    string
		events  []timelinetest.Event
		opts    Options
		usd     float64
		ongoing bool
		atLeast bool
	}{
		{"running, GCE not asked: until now", []timelinetest.Event{req, created, booted}, Options{Now: now}, 0.4, true, false},
		{"failed: until the failure", []timelinetest.Event{req, created, booted, failed}, Options{Now: now}, 0.1, false, false},
		{"failed, but GCE still lists it: until now", []timelinetest.Event{req, created, booted, failed},
			Options{Now: now, VMs: map[Key]VM{keyOf(s): {Exists: true, Status: "RUNNING"}}}, 0.4, true, false},
		{"pod finished: until it ended", []timelinetest.Event{req, created, booted}, Options{Now: now, Ended: map[Key]time.Time{keyOf(s): ended}}, 0.2, false, false},
		{"gone from GCE, end unknown: a floor at the last phase", []timelinetest.Event{req, created, booted},
			Options{Now: now, VMs: map[Key]VM{{s.Namespace, "another"}: {Exists: true}}}, 0.2 * 60 / 3600, false, true},
	} {
		tl := Build(objects(c.events...), c.opts)[0]
		if tl.Cost == nil || !near(tl.Cost.USD, c.usd) || tl.Cost.Ongoing != c.ongoing || tl.Cost.AtLeast != c.atLeast {
			t.Errorf("%s: cost %+v, want %v USD ongoing=%v atLeast=%v", c.name, tl.Cost, c.usd, c.ongoing, c.atLeast)
		}
		if c.opts.VMs != nil && (tl.VM == nil || tl.VM.Exists != (c.opts.VMs[keyOf(s)].Exists)) {
			t.Errorf("%s: VM %+v", c.name, tl.VM)
		}
	}
	noPrice := s
	noPrice.Price = ""
	tl := Build(objects(noPrice.Phase(podevent.PhaseRequested, 0, nil), noPrice.Phase(podevent.PhaseCreated, time.Second, nil)), Options{Now: now})[0]
	if tl.PricePerHour != nil || tl.Cost != nil {
		t.Errorf("without a price: price %v cost %+v, want none", tl.PricePerHour, tl.Cost)
	}
}

// TestGroupsByPodVM: a pod whose sandbox was retried has two podVMs, two
// timelines in the order they started; Events that are not start-up
// Events (another reason, an unknown phase) are not read.
func TestGroupsByPodVM(t *testing.T) {
	first, second := gpuPod, gpuPod
	second.PodVM, second.Start = "podvm-cuda-0-9f8e7d6c", t0.Add(10*time.Minute)
	other := timelinetest.Startup{Namespace: "web", Pod: "api-0", PodVM: "podvm-api-0-00000000", Start: t0.Add(time.Minute)}
	evs := objects(
		second.Phase(podevent.PhaseRequested, 0, nil),
		first.Phase(podevent.PhaseRequested, 0, nil),
		first.Phase(podevent.PhaseFailed, time.Minute, map[string]string{podevent.FailureAnnotation: podevent.FailureBoot}),
		other.Phase(podevent.PhaseRequested, 0, nil),
	)
	unknown := other.Phase(podevent.PhaseCreated, time.Second, nil).Object()
	unknown.Labels[podevent.PhaseLabel] = "teleported"
	kubelet := corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "cuda-0.1", Namespace: "ml"}, Reason: "Scheduled",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "cuda-0", Namespace: "ml"}}
	evs = append(evs, *unknown, kubelet)
	tls := Build(evs, Options{Now: t0.Add(time.Hour)})
	var got []string
	for _, tl := range tls {
		got = append(got, tl.Namespace+"/"+tl.PodVM+":"+tl.State+":"+string(rune('0'+len(tl.Entries))))
	}
	want := []string{"ml/podvm-cuda-0-1a2b3c4d:failed:2", "web/podvm-api-0-00000000:starting:1", "ml/podvm-cuda-0-9f8e7d6c:starting:1"}
	if !slices.Equal(got, want) {
		t.Errorf("timelines %v, want %v", got, want)
	}
}

// TestTimeWithoutAnnotation: an Event without the provider's time
// annotation (edited by hand, or written by an older recorder) falls
// back to its lastTimestamp.
func TestTimeWithoutAnnotation(t *testing.T) {
	ev := gpuPod.Phase(podevent.PhaseRequested, 0, nil).Object()
	delete(ev.Annotations, podevent.AtAnnotation)
	ev.LastTimestamp = metav1.NewTime(t0.Add(7 * time.Second).Truncate(time.Second))
	tl := Build([]corev1.Event{*ev}, Options{Now: t0})[0]
	if !tl.Entries[0].At.Equal(t0.Add(7 * time.Second).Truncate(time.Second)) {
		t.Errorf("at %v, want lastTimestamp", tl.Entries[0].At)
	}
}

// TestLostAfterItRan: a podVM preempted an hour after its agent was
// reached: its start-up stays reachable, the lost phase carries its
// cause, and its cost ends when it was lost, not now.
func TestLostAfterItRan(t *testing.T) {
	s := gpuPod
	evs := objects(
		s.Phase(podevent.PhaseRequested, 0, nil),
		s.Phase(podevent.PhaseCreated, 40*time.Second, map[string]string{podevent.PriceAnnotation: "0.2"}),
		s.Phase(podevent.PhaseReachable, 100*time.Second, nil),
		s.Phase(podevent.PhaseLost, 40*time.Second+time.Hour, map[string]string{podevent.CauseAnnotation: podevent.CausePreempted}),
	)
	now := t0.Add(5 * time.Hour)
	for _, opts := range []Options{{Now: now}, {Now: now, VMs: map[Key]VM{}}} {
		tl := Build(evs, opts)[0]
		e, ok := tl.Entry(podevent.PhaseLost)
		if !ok || e.Facts[podevent.CauseAnnotation] != podevent.CausePreempted || !e.Warning || e.Reason != podevent.ReasonLost {
			t.Fatalf("lost entry %+v", e)
		}
		if tl.State != StateReachable || tl.Failure != "" {
			t.Errorf("state %s, failure %q; want reachable, none", tl.State, tl.Failure)
		}
		if tl.Cost == nil || tl.Cost.Ongoing || !near(tl.Cost.USD, 0.2) {
			t.Errorf("cost %+v, want one hour at $0.2/h, ended", tl.Cost)
		}
	}
}

// TestForgedFactsAreUnknown: a price that is not a plain decimal within
// MaxPricePerHour (a forged Event's) leaves the price unknown and the
// podVM uncosted, and a GPU count outside 0..MaxGPUCount is not read;
// each is said to Ignored.
func TestForgedFactsAreUnknown(t *testing.T) {
	for _, price := range []string{"1e9", "NaN", "-5", "Inf", "+Inf", "0x1p3", "1000.5", "1_0", " 1", "5e-1", ""} {
		s := gpuPod
		s.Price, s.GPUCount = price, "17"
		var heard []string
		tl := Build(objects(s.Phase(podevent.PhaseRequested, 0, nil), s.Phase(podevent.PhaseCreated, time.Second, nil)),
			Options{Now: t0.Add(time.Hour), Ignored: func(_ *corev1.Event, why string) { heard = append(heard, why) }})[0]
		if tl.PricePerHour != nil || tl.Cost != nil {
			t.Errorf("price %q: price %v cost %+v, want both unknown", price, tl.PricePerHour, tl.Cost)
		}
		if tl.GPUCount != 0 {
			t.Errorf("gpu-count 17 read as %d", tl.GPUCount)
		}
		if price != "" && !slices.ContainsFunc(heard, func(w string) bool { return strings.Contains(w, podevent.PriceAnnotation) }) {
			t.Errorf("price %q: not said to Ignored: %q", price, heard)
		}
	}
	for in, want := range map[string]float64{"0": 0, "0.3500": 0.35, "1000": 1000, "12.5": 12.5} {
		if p, ok := ParsePrice(in); !ok || p != want {
			t.Errorf("ParsePrice(%q) = %v, %v; want %v", in, p, ok, want)
		}
	}
	for in, want := range map[string]bool{"0": true, "16": true, "8": true, "17": false, "-1": false, "+1": false, "1.0": false, "": false, "016": false} {
		if _, ok := ParseGPUCount(in); ok != want {
			t.Errorf("ParseGPUCount(%q) ok = %v, want %v", in, ok, want)
		}
	}
}

// TestFutureTimesAreNotRead: a phase's time annotation later than now by
// over MaxSkew is not believed (its Event's own time is read instead);
// an Event whose every time is that late is not read at all.
func TestFutureTimesAreNotRead(t *testing.T) {
	now := t0.Add(time.Hour)
	s := gpuPod
	req := s.Phase(podevent.PhaseRequested, 0, nil).Object()
	late := s.Phase(podevent.PhaseCreated, 30*time.Second, nil).Object()
	late.Annotations[podevent.AtAnnotation] = now.Add(MaxSkew + time.Second).Format(time.RFC3339Nano)
	var heard []string
	tl := Build([]corev1.Event{*req, *late}, Options{Now: now, Ignored: func(_ *corev1.Event, why string) { heard = append(heard, why) }})[0]
	if e, ok := tl.Entry(podevent.PhaseCreated); !ok || !e.At.Equal(late.LastTimestamp.UTC()) {
		t.Errorf("created at %v, want its lastTimestamp %v", e.At, late.LastTimestamp)
	}
	if len(heard) != 1 || !strings.Contains(heard[0], "later than now") {
		t.Errorf("Ignored heard %q, want one line on the late annotation", heard)
	}
	late.LastTimestamp = metav1.NewTime(now.Add(time.Hour))
	tls := Build([]corev1.Event{*req, *late}, Options{Now: now})
	if _, ok := tls[0].Entry(podevent.PhaseCreated); ok || len(tls) != 1 {
		t.Errorf("an Event whose every time is in the future was read: %+v", tls)
	}
	// Within the skew: read.
	late.Annotations[podevent.AtAnnotation] = now.Add(MaxSkew - time.Second).Format(time.RFC3339Nano)
	if _, ok := Build([]corev1.Event{*req, *late}, Options{Now: now})[0].Entry(podevent.PhaseCreated); !ok {
		t.Error("a time within MaxSkew of now was not read")
	}
	// Without a now (the reaper), no time is too late.
	if _, ok := Build([]corev1.Event{*req, *late}, Options{})[0].Entry(podevent.PhaseCreated); !ok {
		t.Error("without Now, a late time was not read")
	}
}

// TestOtherNamespaceDoesNotChangeCost: an Event in namespace B naming
// namespace A's podVM makes a timeline of B's; A's cost and GCE's word
// on A's podVM are A's alone, and what is known of B's (its end, its VM)
// does not reach A's.
func TestOtherNamespaceDoesNotChangeCost(t *testing.T) {
	a := gpuPod
	b := a
	b.Namespace, b.Pod, b.PodUID, b.Price = "tenant-b", "forger", "uid-forger", "999"
	now := t0.Add(2 * time.Hour)
	evs := objects(a.Phase(podevent.PhaseRequested, 0, nil), a.Phase(podevent.PhaseCreated, 0, nil),
		b.Phase(podevent.PhaseRequested, 0, nil), b.Phase(podevent.PhaseCreated, 0, nil),
		b.Phase(podevent.PhaseFailed, time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureBoot}))
	opts := Options{Now: now, VMs: map[Key]VM{keyOf(a): {Exists: true, Status: "RUNNING"}}, Ended: map[Key]time.Time{keyOf(b): t0.Add(time.Minute)}}
	tls := Build(evs, opts)
	if len(tls) != 2 {
		t.Fatalf("%d timelines, want A's and B's", len(tls))
	}
	for _, tl := range tls {
		switch tl.Namespace {
		case a.Namespace:
			if tl.Cost == nil || !near(tl.Cost.USD, 0.4) || !tl.Cost.Ongoing || tl.State != StateStarting || tl.PricePerHour == nil || *tl.PricePerHour != 0.2 {
				t.Errorf("A's timeline changed by B's Events: state %s price %v cost %+v", tl.State, tl.PricePerHour, tl.Cost)
			}
		case b.Namespace:
			if tl.VM == nil || tl.VM.Exists {
				t.Errorf("B's timeline has A's VM: %+v", tl.VM)
			}
		}
	}
}

func keyOf(s timelinetest.Startup) Key { return Key{s.Namespace, s.PodVM} }
