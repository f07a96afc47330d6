package startupevents

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// forgedLoad writes n tenant Events of about 1 MB each (a 200 kB
// annotation, a 800 kB message: near etcd's 1.5 MiB object limit) with
// the phase label, beside 10 signed ones, in namespace ml.
func forgedLoad(tb testing.TB, cs kubernetes.Interface, n int) {
	tb.Helper()
	ctx := tb.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	real := timelinetest.Startup{Namespace: "ml", Pod: "llm-0", PodVM: "podvm-llm-0-00000000", Start: start, Zone: "us-central1-a"}
	var evs []timelinetest.Event
	for i, ph := range []string{podevent.PhaseRequested, podevent.PhaseCreated, podevent.PhaseBooted, podevent.PhaseReachable} {
		evs = append(evs, real.Phase(ph, time.Duration(i)*time.Second, nil))
	}
	if err := timelinetest.Record(ctx, cs, evs...); err != nil {
		tb.Fatal(err)
	}
	pad, msg := strings.Repeat("x", 200_000), strings.Repeat("y", 800_000)
	for i := range n {
		ev := &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("forged-%d", i), Namespace: "ml",
				Labels:      map[string]string{podevent.PhaseLabel: podevent.PhaseFailed, podevent.PodVMLabel: fmt.Sprintf("podvm-f-%d", i)},
				Annotations: map[string]string{podevent.FailureAnnotation: podevent.FailureGPU, "pad": pad}},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ml", Name: fmt.Sprintf("f-%d", i)},
			Reason:         podevent.ReasonFailed, Message: msg, Type: corev1.EventTypeWarning,
		}
		if _, err := cs.CoreV1().Events("ml").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkListForged measures what one listing of the start-up Events
// holds when tenants have written 60 Events of about 1 MB each: the way
// the reaper listed before (pages of 500, every Event kept) against List
// (pages of PageSize, only signed Events kept, trimmed). held-MB is the
// heap still in use after the listing with its result alive; peak-MB is
// the most the heap's objects took while it ran, garbage included (what
// the container's memory follows), sampled every millisecond.
func BenchmarkListForged(b *testing.B) {
	cp := controlplane.StartForTest(b, controlplane.Options{})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	if _, err := cs.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "caa"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := timelinetest.InstallKey(b.Context(), cs, "caa"); err != nil {
		b.Fatal(err)
	}
	forgedLoad(b, cs, 60)
	key := timelinetest.Key()
	for _, tc := range []struct {
		name string
		list func() (int, any)
	}{
		{"before", func() (int, any) {
			var out []corev1.Event
			opts := metav1.ListOptions{LabelSelector: podevent.PhaseLabel, Limit: 500}
			for {
				l, err := cs.CoreV1().Events("").List(b.Context(), opts)
				if err != nil {
					b.Fatal(err)
				}
				out = append(out, l.Items...)
				if l.Continue == "" {
					return len(out), out
				}
				opts.Continue = l.Continue
			}
		}},
		{"after", func() (int, any) {
			res, err := List(b.Context(), cs, "", metav1.ListOptions{}, key)
			if err != nil {
				b.Fatal(err)
			}
			if res.Unverified != 60 || len(res.Events) != 4 {
				b.Fatalf("%d unverified, %d kept; want 60 and 4", res.Unverified, len(res.Events))
			}
			return len(res.Events), res
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var held, peak float64
			for b.Loop() {
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				stop, sampled := make(chan struct{}), make(chan uint64)
				go func() {
					sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
					tick := time.NewTicker(time.Millisecond)
					defer tick.Stop()
					var most uint64
					for {
						metrics.Read(sample)
						most = max(most, sample[0].Value.Uint64())
						select {
						case <-stop:
							sampled <- most
							return
						case <-tick.C:
						}
					}
				}()
				_, result := tc.list()
				close(stop)
				peak = max(peak, float64(<-sampled)/1e6)
				var after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&after)
				held = max(held, (float64(after.HeapAlloc)-float64(before.HeapAlloc))/1e6)
				runtime.KeepAlive(result)
			}
			b.ReportMetric(held, "held-MB")
			b.ReportMetric(peak, "peak-MB")
		})
	}
}
