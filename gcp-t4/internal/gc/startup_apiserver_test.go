package gc

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// TestStartupMetricsOnARealAPIServer: the reaper, as its own
// ServiceAccount with install/components/reaper/rbac.yaml, lists the
// start-up Events of every namespace each pass and serves the start-up
// metrics; a scrape of /metrics shows each podVM's spans once, its zones
// out of stock, its quota refusal and its failure, however many passes
// ran.
func TestStartupMetricsOnARealAPIServer(t *testing.T) {
	k := startKube(t)
	k.applyRBAC(t, "install/components/reaper/rbac.yaml")
	api := k.podAPI(t, "caa-gcp-t4-reaper")
	reaper := kubernetes.NewForConfigOrDie(&rest.Config{Host: api.URL, BearerToken: api.Token, TLSClientConfig: rest.TLSClientConfig{CAData: api.CAPEM}})

	start := time.Now().UTC().Truncate(time.Second)
	cuda := startupOf("ml", "cuda-0", "podvm-cuda-0-aaaa0000", start)
	train := startupOf("research", "train-0", "podvm-train-0-bbbb0000", start)
	cpu := timelinetest.Startup{Namespace: "web", Pod: "api-0", PodVM: "podvm-api-0-cccc0000", Start: start, Zone: "us-east1-c", MachineType: "e2-standard-4", Model: "STANDARD", Price: "0.134"}
	for _, ns := range []string{"ml", "research", "web"} {
		k.namespace(t, ns)
	}
	record := func(evs ...timelinetest.Event) {
		t.Helper()
		if err := timelinetest.Record(t.Context(), k.cs, evs...); err != nil {
			t.Fatal(err)
		}
	}
	record(
		cuda.Phase(podevent.PhaseRequested, 0, nil),
		cuda.Phase(podevent.PhaseStockout, 3*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-a"}),
		cuda.Phase(podevent.PhaseStockout, 9*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-b"}),
		cuda.Phase(podevent.PhaseCreated, 41*time.Second, map[string]string{podevent.ZoneAnnotation: "us-central1-f"}),
		cuda.Phase(podevent.PhaseBooted, 104*time.Second, nil),
		cuda.Phase(podevent.PhaseReachable, 110*time.Second, nil),
		train.Phase(podevent.PhaseRequested, 0, nil),
		train.Phase(podevent.PhaseQuota, 2*time.Second, map[string]string{podevent.RegionAnnotation: "us-central1", podevent.QuotaMetricAnnotation: "NVIDIA_T4_GPUS"}),
		train.Phase(podevent.PhaseFailed, 3*time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureNoCapacity}),
		cpu.Phase(podevent.PhaseRequested, 0, nil),
		cpu.Phase(podevent.PhaseStockout, time.Second, map[string]string{podevent.ZonesAnnotation: "us-east1-c"}),
		cpu.Phase(podevent.PhaseCreated, 20*time.Second, map[string]string{podevent.ZoneAnnotation: "us-east1-d"}),
	)
	if err := timelinetest.InstallKey(t.Context(), k.cs, caaNamespace); err != nil {
		t.Fatal(err)
	}
	// What a tenant with the edit role can write: Events with the phase
	// labels and made-up facts (a failure, a stockout, a control sequence
	// as a zone, a phase in the future), and an edit of a real Event. None
	// may count.
	forged := startupOf("research", "evil-0", "podvm-evil-0-eeee0000", start)
	for i := range 5 {
		f := forged
		f.Pod, f.PodVM = fmt.Sprintf("evil-%d", i), fmt.Sprintf("podvm-evil-%d-eeee0000", i)
		for _, e := range []timelinetest.Event{
			f.Phase(podevent.PhaseRequested, 0, nil),
			f.Phase(podevent.PhaseStockout, time.Second, map[string]string{podevent.ZonesAnnotation: "\x1b]52;c;aGk=\x07"}),
			f.Phase(podevent.PhaseFailed, 2*time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureGPU, podevent.AtAnnotation: start.Add(24 * time.Hour).Format(time.RFC3339Nano)}),
		} {
			obj := e.Object()
			delete(obj.Annotations, eventsig.SignatureAnnotation)
			if _, err := k.cs.CoreV1().Events(obj.Namespace).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	edited, err := k.cs.CoreV1().Events("ml").Get(t.Context(), podevent.Name("cuda-0", "podvm-cuda-0-aaaa0000", podevent.PhaseReachable), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edited.Annotations[podevent.AtAnnotation] = start.Add(time.Second).Format(time.RFC3339Nano)
	if _, err := k.cs.CoreV1().Events("ml").Update(t.Context(), edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet's Events on the same pod: not the reaper's to read.
	if _, err := k.cs.CoreV1().Events("ml").Create(t.Context(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "cuda-0.scheduled", Namespace: "ml"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ml", Name: "cuda-0"}, Reason: "Scheduled", Message: "assigned", Type: corev1.EventTypeNormal},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	m := NewMetrics()
	now := func() time.Time { return start.Add(time.Hour) }
	c := &Collector{VMs: &recordingVMs{}, Cluster: newMemCluster(), Policy: DefaultPolicy(), Delete: true, Now: now, Log: quiet(),
		Observer: Report{Metrics: m, Now: now, Startup: &Startup{Client: reaper, Metrics: m, Log: quiet(), Since: start.Add(-time.Minute), Now: now,
			Key: &startupevents.KeySource{Client: reaper, Namespace: caaNamespace}}}}
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	for range 3 {
		if _, err := c.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	const counters = `
# HELP gcp_t4_reaper_podvm_quota_refusals_total PodVM creates a GCE quota refused, by region and quota metric.
# TYPE gcp_t4_reaper_podvm_quota_refusals_total counter
gcp_t4_reaper_podvm_quota_refusals_total{metric="NVIDIA_T4_GPUS",region="us-central1"} 1
# HELP gcp_t4_reaper_podvm_zone_stockouts_total Zones a podVM's create found out of capacity, by zone and accelerator ("" for none).
# TYPE gcp_t4_reaper_podvm_zone_stockouts_total counter
gcp_t4_reaper_podvm_zone_stockouts_total{gpu="",zone="us-east1-c"} 1
gcp_t4_reaper_podvm_zone_stockouts_total{gpu="nvidia-tesla-t4",zone="us-central1-a"} 1
gcp_t4_reaper_podvm_zone_stockouts_total{gpu="nvidia-tesla-t4",zone="us-central1-b"} 1
# HELP gcp_t4_reaper_startup_event_list_failures_total Listings of the start-up Events that failed (the start-up metrics skipped that pass; clean-up is not affected).
# TYPE gcp_t4_reaper_startup_event_list_failures_total counter
gcp_t4_reaper_startup_event_list_failures_total 0
`
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(counters), "gcp_t4_reaper_podvm_quota_refusals_total",
		"gcp_t4_reaper_podvm_zone_stockouts_total", "gcp_t4_reaper_startup_event_list_failures_total"); err != nil {
		t.Error(err)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	scrape := string(body)
	for _, line := range []string{
		// cuda-0 (41 s) and api-0 (20 s) were created.
		`gcp_t4_reaper_podvm_startup_seconds_count{phase="create"} 2`,
		`gcp_t4_reaper_podvm_startup_seconds_sum{phase="create"} 61`,
		`gcp_t4_reaper_podvm_startup_seconds_bucket{phase="create",le="20"} 1`,
		`gcp_t4_reaper_podvm_startup_seconds_bucket{phase="create",le="45"} 2`,
		`gcp_t4_reaper_podvm_startup_seconds_count{phase="boot"} 1`,
		`gcp_t4_reaper_podvm_startup_seconds_sum{phase="boot"} 63`,
		`gcp_t4_reaper_podvm_startup_seconds_count{phase="agent"} 0`,
		// train-0 failed at 3 s; cuda-0's reachable Event was edited, so
		// neither its agent span nor its total counts.
		`gcp_t4_reaper_podvm_startup_seconds_count{phase="total"} 1`,
		`gcp_t4_reaper_podvm_startup_seconds_sum{phase="total"} 3`,
		`gcp_t4_reaper_podvm_startup_seconds_bucket{phase="total",le="5"} 1`,
		`gcp_t4_reaper_podvm_failures_total{failure="no-capacity"} 1`,
		`gcp_t4_reaper_podvm_failures_total{failure="boot-failed"} 0`,
		`gcp_t4_reaper_podvm_failures_total{failure="gpu-failed"} 0`,
		// 15 forged and 1 edited, on each of 3 passes.
		`gcp_t4_reaper_startup_events_unverified_total 48`,
		`gcp_t4_reaper_passes_total{result="ok"} 3`,
	} {
		if !strings.Contains(scrape, line+"\n") {
			t.Errorf("the scrape lacks %s", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", scrape)
	}
}
