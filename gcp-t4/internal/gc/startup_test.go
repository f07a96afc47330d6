package gc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

func startupOf(ns, pod, podVM string, start time.Time) timelinetest.Startup {
	return timelinetest.Startup{Namespace: ns, Pod: pod, PodVM: podVM, Start: start, Zone: "us-central1-a", MachineType: "n1-standard-4",
		GPU: "nvidia-tesla-t4", GPUCount: "1", Model: "SPOT", Price: "0.17701"}
}

func build(evs ...timelinetest.Event) []timeline.Timeline {
	objs := make([]corev1.Event, 0, len(evs))
	for _, e := range evs {
		objs = append(objs, *e.Object())
	}
	return timeline.Build(objs, timeline.Options{})
}

func histCount(t *testing.T, m *Metrics, span string) (uint64, float64) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gcp_t4_reaper_podvm_startup_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == span {
					return mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no histogram series for phase %s", span)
	return 0, 0
}

// TestStartupObservedOnce: each span of a podVM is observed once however
// many passes see its Events, as each new zone of its stockouts, its
// quota refusal and its failure; a podVM whose Events are gone is
// remembered for startupRetention after its last phase, so Events deleted
// and made again (a namespace's owner may) are not counted twice; what
// ended before the reaper started is not counted.
func TestStartupObservedOnce(t *testing.T) {
	m := NewMetrics()
	clock := t0.Add(30 * time.Minute)
	s := &Startup{Metrics: m, Log: quiet(), Since: t0, Now: func() time.Time { return clock }}
	a := startupOf("ml", "cuda-0", "podvm-cuda-0-aaaa0000", t0.Add(time.Minute))
	b := startupOf("ml", "train-0", "podvm-train-0-bbbb0000", t0.Add(time.Minute))
	old := startupOf("ml", "old-0", "podvm-old-0-cccc0000", t0.Add(-10*time.Minute))

	first := []timelinetest.Event{
		a.Phase(podevent.PhaseRequested, 0, nil),
		a.Phase(podevent.PhaseStockout, 2*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-a"}),
		a.Phase(podevent.PhaseCreated, 40*time.Second, nil),
		b.Phase(podevent.PhaseRequested, 0, nil),
		b.Phase(podevent.PhaseQuota, time.Second, map[string]string{podevent.RegionAnnotation: "us-central1", podevent.QuotaMetricAnnotation: "NVIDIA_T4_GPUS"}),
		b.Phase(podevent.PhaseFailed, 3*time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureNoCapacity}),
		// Reached before this reaper started: its predecessor counted it.
		old.Phase(podevent.PhaseRequested, 0, nil),
		old.Phase(podevent.PhaseStockout, time.Second, map[string]string{podevent.ZonesAnnotation: "us-east1-c"}),
		old.Phase(podevent.PhaseCreated, 30*time.Second, nil),
	}
	for range 3 {
		s.Observe(build(first...))
	}
	if n, sum := histCount(t, m, timeline.Create); n != 1 || sum != 40 {
		t.Errorf("create: %d samples summing %v, want cuda-0's 40 s once (old-0's ended before the reaper started)", n, sum)
	}
	if n, sum := histCount(t, m, timeline.Total); n != 1 || sum != 3 {
		t.Errorf("total: %d samples summing %v, want train-0's failure at 3 s once", n, sum)
	}
	if got := testutil.ToFloat64(m.stockouts.WithLabelValues("us-central1-a", "nvidia-tesla-t4")); got != 1 {
		t.Errorf("stockouts in us-central1-a = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.stockouts.WithLabelValues("us-east1-c", "nvidia-tesla-t4")); got != 0 {
		t.Errorf("stockouts in us-east1-c = %v, want 0 (before this reaper)", got)
	}
	if got := testutil.ToFloat64(m.quotaRefusals.WithLabelValues("us-central1", "NVIDIA_T4_GPUS")); got != 1 {
		t.Errorf("quota refusals = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues(podevent.FailureNoCapacity)); got != 1 {
		t.Errorf("failures no-capacity = %v, want 1", got)
	}

	// cuda-0 goes on: a second zone out (the stockout Event updated, both
	// zones listed), booted, reachable; old-0 boots after the start.
	stock := a.Phase(podevent.PhaseStockout, 9*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-a,us-central1-b"})
	stock.Count = 2
	second := append(first[:1:1], stock, first[2],
		a.Phase(podevent.PhaseBooted, 100*time.Second, nil), a.Phase(podevent.PhaseReachable, 106*time.Second, nil),
		old.Phase(podevent.PhaseRequested, 0, nil), old.Phase(podevent.PhaseCreated, 30*time.Second, nil), old.Phase(podevent.PhaseBooted, 20*time.Minute, nil))
	s.Observe(build(second...))
	s.Observe(build(second...))
	if got := testutil.ToFloat64(m.stockouts.WithLabelValues("us-central1-a", "nvidia-tesla-t4")) + testutil.ToFloat64(m.stockouts.WithLabelValues("us-central1-b", "nvidia-tesla-t4")); got != 2 {
		t.Errorf("stockouts in a and b = %v, want 1 each", got)
	}
	for span, want := range map[string]uint64{timeline.Create: 1, timeline.Boot: 2, timeline.Agent: 1, timeline.Total: 2} {
		if n, _ := histCount(t, m, span); n != want {
			t.Errorf("%s: %d samples, want %d", span, n, want)
		}
	}
	// train-0's Events expired, or were deleted: still remembered, and
	// made again they count nothing.
	if len(s.seen) != 3 || s.seen["ml/podvm-train-0-bbbb0000"] == nil {
		t.Errorf("remembers %d podVMs, want cuda-0, old-0 and train-0", len(s.seen))
	}
	s.Observe(build(first...))
	if n, _ := histCount(t, m, timeline.Total); n != 2 || testutil.ToFloat64(m.failures.WithLabelValues(podevent.FailureNoCapacity)) != 1 {
		t.Errorf("Events made again were counted again: total %d samples, %v failures", n, testutil.ToFloat64(m.failures.WithLabelValues(podevent.FailureNoCapacity)))
	}
	// Past the retention after every last phase: all forgotten, and the
	// same Events, now older than the retention, still count nothing.
	clock = t0.Add(time.Hour + startupRetention)
	s.Observe(nil)
	if len(s.seen) != 0 {
		t.Errorf("remembers %d podVMs past the retention", len(s.seen))
	}
	s.Observe(build(second...))
	if n, _ := histCount(t, m, timeline.Total); n != 2 {
		t.Errorf("Events older than the retention were counted: total %d samples", n)
	}
}

// TestStartupLabelsBounded: metric label values come from closed sets:
// a value not of GCE's form, or beyond a label's cap, is "other"; a
// failure class the provider does not have is "other"; a phase dated in
// the future counts nothing.
func TestStartupLabelsBounded(t *testing.T) {
	m := NewMetrics()
	clock := t0.Add(time.Hour)
	s := &Startup{Metrics: m, Log: quiet(), Since: t0, Now: func() time.Time { return clock }}
	var evs []timelinetest.Event
	for i := range maxSeries + 20 {
		st := startupOf("ml", "p", fmt.Sprintf("podvm-p-%08d", i), t0.Add(time.Minute))
		zone := fmt.Sprintf("us-zone%d-a", i)
		if i == 0 {
			zone = "\x1b]52;c;aGk=\x07"
		}
		evs = append(evs, st.Phase(podevent.PhaseRequested, 0, nil),
			st.Phase(podevent.PhaseStockout, time.Second, map[string]string{podevent.ZonesAnnotation: zone, podevent.GPUAnnotation: fmt.Sprintf("nvidia-x%d", i)}),
			st.Phase(podevent.PhaseFailed, 2*time.Second, map[string]string{podevent.FailureAnnotation: fmt.Sprintf("made-up-%d", i)}))
	}
	future := startupOf("ml", "f", "podvm-f-00000000", clock.Add(time.Hour))
	evs = append(evs, future.Phase(podevent.PhaseRequested, 0, nil), future.Phase(podevent.PhaseFailed, time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureGPU}))
	s.Observe(build(evs...))
	series := func(name string) map[string]float64 {
		out := map[string]float64{}
		mfs, _ := m.Registry.Gather()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, mt := range mf.GetMetric() {
				var parts []string
				for _, l := range mt.GetLabel() {
					parts = append(parts, l.GetValue())
				}
				out[strings.Join(parts, ",")] += mt.GetCounter().GetValue()
			}
		}
		return out
	}
	stock := series("gcp_t4_reaper_podvm_zone_stockouts_total")
	if len(stock) > maxSeries+1 || stock["other,other"] == 0 {
		t.Errorf("%d stockout series (cap %d), other,other = %v", len(stock), maxSeries, stock["other,other"])
	}
	for k := range stock {
		if strings.ContainsAny(k, "\x1b\x07;") {
			t.Errorf("a stockout series carries %q", k)
		}
	}
	fail := series("gcp_t4_reaper_podvm_failures_total")
	if fail[otherLabel] != maxSeries+20 || len(fail) != len(failureClasses) || fail[podevent.FailureGPU] != 0 {
		t.Errorf("failures %v: want every made-up class as other, the classes alone, none from the future", fail)
	}
}

// TestStartupListFailureLeavesThePassAlone: listing the Events refused
// (RBAC without list on events) is logged and counted; the clean-up pass
// deletes its orphan and counts as ok.
func TestStartupListFailureLeavesThePassAlone(t *testing.T) {
	cs := kubefake.NewClientset()
	cs.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", nil)
	})
	m := NewMetrics()
	vms := &recordingVMs{vms: []managed.VM{vmAt("ml", "gone", "cccc3333", t0)}}
	now := func() time.Time { return t0.Add(time.Hour) }
	c := &Collector{VMs: vms, Cluster: newMemCluster(), Policy: DefaultPolicy(), Delete: true, Now: now, Log: quiet(),
		Observer: Report{Metrics: m, Now: now, Startup: &Startup{Client: cs, Metrics: m, Log: quiet(), Since: t0}}}
	p, err := c.Run(context.Background())
	if err != nil || p.Count(Deleted) != 1 || len(vms.deleted) != 1 {
		t.Fatalf("pass: %v, %d deleted; want the orphan deleted", err, p.Count(Deleted))
	}
	if got := testutil.ToFloat64(m.startupListFailures); got != 1 {
		t.Errorf("start-up list failures = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.passes.WithLabelValues("ok")); got != 1 {
		t.Errorf("passes ok = %v, want 1", got)
	}
	var lists int
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "events" {
			lists++
			if sel := a.(k8stesting.ListAction).GetListRestrictions().Labels.String(); sel != podevent.PhaseLabel || a.GetNamespace() != "" {
				t.Errorf("listed events in %q with selector %q, want every namespace by %s", a.GetNamespace(), sel, podevent.PhaseLabel)
			}
		}
	}
	if lists != 1 {
		t.Errorf("%d listings of events, want 1", lists)
	}
}

// TestStartupDocsNameRegisteredMetrics: every gcp_t4_reaper_ series the
// docs name (tables, PromQL, alert rules) is one the reaper registers, a
// histogram's _bucket, _sum and _count included; and reaper.md's table
// lists every metric the reaper registers.
func TestStartupDocsNameRegisteredMetrics(t *testing.T) {
	m := NewMetrics()
	// A series in each vector, so that Gather returns every family.
	m.stockouts.WithLabelValues("us-central1-a", "nvidia-tesla-t4").Inc()
	m.quotaRefusals.WithLabelValues("us-central1", "NVIDIA_T4_GPUS").Inc()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, mf := range mfs {
		registered[mf.GetName()] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				registered[mf.GetName()+suffix] = true
			}
		}
	}
	name := regexp.MustCompile(`gcp_t4_reaper_[a-z0-9_]*[a-z0-9]`)
	for _, doc := range []string{"startup-visibility.md", "reaper.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, found := range name.FindAllString(string(data), -1) {
			n++
			if !registered[found] {
				t.Errorf("docs/%s names %s, which the reaper does not serve", doc, found)
			}
		}
		if n == 0 {
			t.Errorf("docs/%s names no reaper metric", doc)
		}
		if doc != "reaper.md" {
			continue
		}
		for _, mf := range mfs {
			if !strings.Contains(string(data), "| `"+mf.GetName()) {
				t.Errorf("docs/reaper.md's metrics table lacks %s", mf.GetName())
			}
		}
	}
}
