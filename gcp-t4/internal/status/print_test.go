package status

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

var updatePrint = flag.Bool("update-print", false, "rewrite testdata/status-ml.golden from the example built without an API server (TestStatusOnARealAPIServer/DocExample checks the same file against one)")

// exampleState is docs/startup-visibility.md's example as status reads
// it from the API server (TestStatusOnARealAPIServer records the same
// Events there), with GCE's answer, built without one.
func exampleState(t *testing.T, msg string) (*state, gceResult) {
	t.Helper()
	pod := func(name string, peer bool, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0)},
			Spec: corev1.PodSpec{NodeName: timelinetest.Node}, Status: corev1.PodStatus{Phase: phase}}
		if peer {
			rc := "kata-remote"
			p.Spec.RuntimeClassName = &rc
		}
		return p
	}
	st := &state{pods: map[string]*corev1.Pod{}}
	for _, p := range []*corev1.Pod{pod("cuda-vectoradd", true, corev1.PodRunning), pod("llm-0", true, corev1.PodPending),
		pod("train-0", true, corev1.PodPending), pod("web-0", false, corev1.PodRunning)} {
		st.add(p)
	}
	s, l, tr := cudaVectorAdd, llm, train
	s.PodUID, l.PodUID, tr.PodUID = "uid-cuda-vectoradd", "uid-llm-0", "uid-train-0"
	stock := s.Phase(gcpt4.PhaseStockout, 19e9, map[string]string{gcpt4.EventZonesAnnotation: "us-central1-a,us-central1-b"})
	stock.First, stock.Count = s.Start.Add(3e9), 2
	evs := []timelinetest.Event{
		s.Phase(gcpt4.PhaseRequested, 0, nil), stock,
		s.Phase(gcpt4.PhaseCreated, 41e9, map[string]string{gcpt4.EventZoneAnnotation: "us-central1-f", gcpt4.EventIPAnnotation: "10.128.0.7"}),
		s.Phase(gcpt4.PhaseBooted, 104e9, map[string]string{gcpt4.EventDriverAnnotation: "535.183.01", gcpt4.EventGPUCountAnnotation: "1"}),
		s.Phase(gcpt4.PhaseReachable, 110e9, nil),
		l.Phase(gcpt4.PhaseRequested, 0, nil),
		l.Phase(gcpt4.PhaseCreated, 37e9, map[string]string{gcpt4.EventIPAnnotation: "10.128.0.9"}),
		tr.Phase(gcpt4.PhaseRequested, 0, nil),
		tr.Phase(gcpt4.PhaseQuota, 2e9, map[string]string{gcpt4.EventRegionAnnotation: "us-central1", gcpt4.EventQuotaMetricAnnotation: "NVIDIA_T4_GPUS", gcpt4.EventZoneAnnotation: "us-central1-a"}),
		{Namespace: "ml", Pod: "train-0", PodUID: tr.PodUID, PodVM: tr.PodVM, Phase: gcpt4.PhaseFailed, At: tr.Start.Add(2400e6),
			Facts: map[string]string{gcpt4.EventFailureAnnotation: gcpt4.FailureNoCapacity}, Message: msg},
	}
	for _, e := range evs {
		st.events = append(st.events, *e.Object())
	}
	return st, gceResult{Asked: true, vms: map[string]timeline.VM{
		cudaVectorAdd.PodVM: {Exists: true, Status: "RUNNING"}, llm.PodVM: {Exists: true, Status: "RUNNING"}, train.PodVM: {}}}
}

const exampleFailure = "every offering tried was out of capacity or over quota: us-central1 NVIDIA_T4_GPUS quota is below the 4 this pod needs; raise it or allow another region\n(the walk, zone by zone, follows)"

// TestTableDrawsEachStart: each podVM's spans are drawn as bars on one
// time axis (the span under way up to now, the one a failure ended
// marked so), every line fits 100 columns, and the output is the golden
// file the documentation shows.
func TestTableDrawsEachStart(t *testing.T) {
	st, gce := exampleState(t, exampleFailure)
	var out bytes.Buffer
	if err := printTable(&out, st.report(exampleNow, gce)); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if *updatePrint {
		if err := os.WriteFile(goldenPath, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("a line of %d columns, over 100:\n%s", n, l)
		}
	}
	for _, want := range []string{
		"\n  create  █", // cuda-vectoradd's create from 0
		"░  under way",  // llm-0 still booting at now
		"█  failed",     // train-0's create ended by the failure
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	// The failure's detail, wrapped under DETAILS, not cut at the width.
	if words := strings.Join(strings.Fields(text), " "); !strings.Contains(words, "out of capacity or over quota: us-central1 NVIDIA_T4_GPUS quota is below") {
		t.Errorf("the failure's detail is cut:\n%s", text)
	}
	golden, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(golden) {
		t.Errorf("status prints:\n%s\nwant %s (-update-print rewrites it):\n%s", text, goldenPath, golden)
	}
}

// TestTableCleansEventText: an Event's message is written by whoever may
// write Events in the namespace: control and bidirectional characters
// are printed escaped, never raw.
func TestTableCleansEventText(t *testing.T) {
	st, gce := exampleState(t, "quota \x1b[2Jgone\u202e")
	var out bytes.Buffer
	if err := printTable(&out, st.report(exampleNow, gce)); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\u202e") || !strings.Contains(out.String(), `quota \x1b[2Jgone\u202e`) {
		t.Errorf("the message is not printed escaped:\n%q", out.String())
	}
}
