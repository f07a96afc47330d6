package gc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

func pass(verdicts map[string]Verdict) Pass {
	var p Pass
	for sb, v := range verdicts {
		p.Findings = append(p.Findings, Finding{VM: vmAt("ml", "p", sb, t0), Verdict: v, Reason: "because"})
	}
	return p
}

// TestMetricsCountOrphansDeletesAndFailures: an orphan is counted once
// however many passes see it; deletes and failures every time.
func TestMetricsCountOrphansDeletesAndFailures(t *testing.T) {
	m := NewMetrics()
	m.Record(pass(map[string]Verdict{"aaaa0000": TooYoung, "bbbb0000": InUse}), nil, t0)
	m.Record(pass(map[string]Verdict{"aaaa0000": DeleteErr, "bbbb0000": InUse, "cccc0000": Unowned}), nil, t0)
	m.Record(pass(map[string]Verdict{"aaaa0000": Deleted, "bbbb0000": InUse}), nil, t0)
	m.Record(Pass{}, context.DeadlineExceeded, t0)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"orphans seen", testutil.ToFloat64(m.orphansSeen), 1},
		{"deleted", testutil.ToFloat64(m.deleted), 1},
		{"delete failures", testutil.ToFloat64(m.deleteFailures), 1},
		{"passes ok", testutil.ToFloat64(m.passes.WithLabelValues("ok")), 3},
		{"passes error", testutil.ToFloat64(m.passes.WithLabelValues("error")), 1},
		{"in use now", testutil.ToFloat64(m.podVMs.WithLabelValues(string(InUse))), 1},
		{"unowned now", testutil.ToFloat64(m.podVMs.WithLabelValues(string(Unowned))), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(m.Registry); err != nil || n == 0 {
		t.Errorf("registry gathers %d metrics: %v", n, err)
	}
}

// TestEventsOnTheReapersPod: a deletion and its failure are told every
// time; a VM the reaper keeps but cannot account for, once.
func TestEventsOnTheReapersPod(t *testing.T) {
	cs := kubefake.NewClientset()
	e := &Events{Client: cs, Now: func() time.Time { return t0 }, Log: quiet(),
		Pod: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "caa-gcp-t4-reaper-x", Namespace: "confidential-containers-system"}}
	for i := 0; i < 2; i++ {
		e.Emit(context.Background(), pass(map[string]Verdict{"aaaa0000": Deleted, "bbbb0000": Unowned, "cccc0000": InUse}))
	}
	evs, err := cs.CoreV1().Events("confidential-containers-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, ev := range evs.Items {
		reasons[ev.Reason]++
		if ev.InvolvedObject.Name != "caa-gcp-t4-reaper-x" || !strings.Contains(ev.Message, "podVM zones/us-central1-a/instances/") {
			t.Errorf("event %+v", ev)
		}
	}
	if reasons["PodVMReaped"] != 2 || reasons["PodVMUnowned"] != 1 || len(reasons) != 2 {
		t.Errorf("events by reason %v, want 2 PodVMReaped and 1 PodVMUnowned", reasons)
	}
}

// TestUnownedIsToldOnItsPod: the pod an unowned VM was made for gets one
// Warning Event saying what to do; the metric gives the oldest's age.
func TestUnownedIsToldOnItsPod(t *testing.T) {
	cs := kubefake.NewClientset()
	e := &Events{Client: cs, Now: func() time.Time { return t0 }, Log: quiet(),
		Pod: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "caa-gcp-t4-reaper-x", Namespace: "confidential-containers-system"}}
	pod := podAt("ml", "p", "uid-p", corev1.PodRunning, t0.Add(-2*time.Hour))
	p := Pass{Findings: []Finding{{VM: vmAt("ml", "p", "bbbb0000", t0.Add(-90*time.Minute)), Verdict: Unowned, Reason: "because", Pod: &pod}}}
	for i := 0; i < 3; i++ {
		e.Emit(context.Background(), p)
	}
	evs, err := cs.CoreV1().Events("ml").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("%d Events in the pod's namespace, want 1", len(evs.Items))
	}
	ev := evs.Items[0]
	if ev.InvolvedObject.Name != "p" || ev.InvolvedObject.UID != "uid-p" || ev.Type != corev1.EventTypeWarning || ev.Reason != "PodVMUnowned" ||
		!strings.Contains(ev.Message, "delete the pod") || !strings.Contains(ev.Message, "kubectl get peerpods -n ml") {
		t.Errorf("event on the pod: %+v", ev)
	}
	m := NewMetrics()
	m.Record(p, nil, t0)
	if got := testutil.ToFloat64(m.unownedAge); got != 90*60 {
		t.Errorf("oldest unowned age = %v s, want 5400", got)
	}
	m.Record(Pass{}, nil, t0)
	if got := testutil.ToFloat64(m.unownedAge); got != 0 {
		t.Errorf("oldest unowned age with none = %v, want 0", got)
	}
}
