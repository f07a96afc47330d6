package status

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
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
	stock := s.Phase(podevent.PhaseStockout, 19e9, map[string]string{podevent.ZonesAnnotation: "us-central1-a,us-central1-b"})
	stock.First, stock.Count = s.Start.Add(3e9), 2
	evs := []timelinetest.Event{
		s.Phase(podevent.PhaseRequested, 0, nil), stock,
		s.Phase(podevent.PhaseCreated, 41e9, map[string]string{podevent.ZoneAnnotation: "us-central1-f", podevent.IPAnnotation: "10.128.0.7"}),
		s.Phase(podevent.PhaseBooted, 104e9, map[string]string{podevent.DriverAnnotation: "535.183.01", podevent.GPUCountAnnotation: "1"}),
		s.Phase(podevent.PhaseReachable, 110e9, nil),
		l.Phase(podevent.PhaseRequested, 0, nil),
		l.Phase(podevent.PhaseCreated, 37e9, map[string]string{podevent.IPAnnotation: "10.128.0.9"}),
		tr.Phase(podevent.PhaseRequested, 0, nil),
		tr.Phase(podevent.PhaseQuota, 2e9, map[string]string{podevent.RegionAnnotation: "us-central1", podevent.QuotaMetricAnnotation: "NVIDIA_T4_GPUS", podevent.ZoneAnnotation: "us-central1-a"}),
		{Namespace: "ml", Pod: "train-0", PodUID: tr.PodUID, PodVM: tr.PodVM, Phase: podevent.PhaseFailed, At: tr.Start.Add(2400e6),
			Facts: map[string]string{podevent.FailureAnnotation: podevent.FailureNoCapacity}, Message: msg},
	}
	for _, e := range evs {
		st.events = append(st.events, *e.Object())
	}
	return st, gceResult{Asked: true, vms: map[timeline.Key]timeline.VM{
		{Namespace: "ml", PodVM: cudaVectorAdd.PodVM}: {Exists: true, Status: "RUNNING"}, {Namespace: "ml", PodVM: llm.PodVM}: {Exists: true, Status: "RUNNING"}}}
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

// forged is what a tenant with the edit role can put in an Event: an OSC
// 52 clipboard write, a screen clear, a bidi override, a zero-width space
// and a word joiner.
const forged = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[2J\x1b[H\u202eevil\u200b\u2060\x9b2J"

// rawControl is the first character in out a terminal acts on or hides:
// C0 and C1 controls but the newline, DEL, bidi marks, overrides and
// isolates, and format characters. Spelled out here, not termout's
// predicate, so that the test checks it.
func rawControl(out string) (rune, bool) {
	for _, r := range out {
		switch {
		case r == '\n':
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, unicode.Is(unicode.Cf, r), r == 0x2028, r == 0x2029:
			return r, true
		}
	}
	return 0, false
}

// TestForgedEventPrintsNoRawControl: a forged Event with terminal
// escapes and bidi and format characters in its pod's name, reason,
// message and every annotation the table shows is printed with each of
// them escaped, in the table and in -o json (checked byte by byte), and
// the escaped form is there to see.
func TestForgedEventPrintsNoRawControl(t *testing.T) {
	st, gce := exampleState(t, exampleFailure)
	f := timelinetest.Startup{Namespace: "ml", Pod: "cuda-vectoradd" + forged, PodUID: "uid-x", PodVM: "podvm-forged-00000000", Start: t0,
		Zone: "us-central1-a" + forged, MachineType: "n1" + forged, GPU: "t4" + forged, GPUCount: "1", Model: "SPOT" + forged, Price: "0.2"}
	failed := f.Phase(podevent.PhaseFailed, time.Second, map[string]string{podevent.FailureAnnotation: "gpu" + forged, podevent.IPAnnotation: "10.0.0.1" + forged})
	failed.Message = "boom" + forged + "\nsecond line"
	for _, e := range []timelinetest.Event{f.Phase(podevent.PhaseRequested, 0, nil), f.Phase(podevent.PhaseCreated, 0, map[string]string{podevent.IPAnnotation: "10.0.0.1" + forged}),
		f.Phase(podevent.PhaseBooted, time.Second, map[string]string{podevent.DriverAnnotation: "550" + forged, podevent.GPUCountAnnotation: "1"}), failed} {
		ev := e.Object()
		ev.Reason += forged
		st.events = append(st.events, *ev)
	}
	var table, js bytes.Buffer
	if err := printTable(&table, st.report(exampleNow, gce)); err != nil {
		t.Fatal(err)
	}
	if err := printJSON(&js, st.report(exampleNow, gce)); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"table": table.String(), "json": js.String()} {
		if r, ok := rawControl(out); ok {
			t.Errorf("%s: a raw %U reaches the terminal:\n%q", name, r, out)
		}
	}
	// Long cells wrap: compare without the white space.
	flat := strings.Join(strings.Fields(table.String()), "")
	for _, want := range []string{`n1\x1b]52;c;`, `\x1b[2J`, `\u202eevil\u200b\u2060\x9b2J`, `cuda-vectoradd\x1b]52`, `boom\x1b]52`, `driver550\x1b]52`} {
		if !strings.Contains(flat, want) {
			t.Errorf("table lacks %s:\n%s", want, table.String())
		}
	}
	var back report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || !strings.Contains(js.String(), `\u202e`) {
		t.Errorf("-o json is not the same document, escaped: %v\n%s", err, js.String())
	}
}

// TestForgedPriceIsUnknown: a price-per-hour that is not a plain decimal
// within timeline.MaxPricePerHour is printed as unknown, with no cost.
func TestForgedPriceIsUnknown(t *testing.T) {
	for _, price := range []string{"1e9", "NaN", "-5", "Inf", "2000"} {
		f := timelinetest.Startup{Namespace: "ml", Pod: "priced", PodVM: "podvm-priced-00000000", Start: t0, MachineType: "n1-standard-4", Price: price}
		st := &state{pods: map[string]*corev1.Pod{}}
		for _, e := range []timelinetest.Event{f.Phase(podevent.PhaseRequested, 0, nil), f.Phase(podevent.PhaseCreated, time.Second, nil)} {
			st.events = append(st.events, *e.Object())
		}
		var out bytes.Buffer
		if err := printTable(&out, st.report(exampleNow, gceResult{})); err != nil {
			t.Fatal(err)
		}
		head := strings.SplitN(out.String(), "\n", 2)[0]
		if !strings.Contains(head, "price unknown") || !strings.Contains(head, "cost unknown") || strings.Contains(out.String(), "$") {
			t.Errorf("price %q: %s", price, out.String())
		}
	}
}

// TestOtherNamespaceEventKeepsCost: a finished pod in namespace B whose
// Event names namespace A's podVM does not end A's cost, and B's
// timeline does not get GCE's word on A's VM.
func TestOtherNamespaceEventKeepsCost(t *testing.T) {
	a := timelinetest.Startup{Namespace: "ml", Pod: "train", PodUID: "uid-a", PodVM: "podvm-train-00000000", Start: t0, MachineType: "n1-standard-4", Price: "1"}
	b := a
	b.Namespace, b.Pod, b.PodUID = "tenant-b", "done", "uid-b"
	st := &state{pods: map[string]*corev1.Pod{}}
	for _, p := range []struct {
		s     timelinetest.Startup
		phase corev1.PodPhase
	}{{a, corev1.PodRunning}, {b, corev1.PodSucceeded}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.s.Namespace, Name: p.s.Pod, UID: types.UID(p.s.PodUID)}, Status: corev1.PodStatus{Phase: p.phase}}
		if p.phase == corev1.PodSucceeded {
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(t0.Add(time.Minute))}}}}
		}
		st.add(pod)
		for _, e := range []timelinetest.Event{p.s.Phase(podevent.PhaseRequested, 0, nil), p.s.Phase(podevent.PhaseCreated, 0, nil)} {
			st.events = append(st.events, *e.Object())
		}
	}
	now := t0.Add(2 * time.Hour)
	for _, gce := range []gceResult{{}, {Asked: true, vms: map[timeline.Key]timeline.VM{{Namespace: "ml", PodVM: a.PodVM}: {Exists: true, Status: "RUNNING"}}}} {
		rep := st.report(now, gce)
		for _, p := range rep.PodVMs {
			switch p.Namespace {
			case "ml":
				if p.Cost == nil || !p.Cost.Ongoing || p.Cost.USD != 2 {
					t.Errorf("GCE asked %v: A's cost %+v, want 2 USD so far (2 h at $1/h)", gce.Asked, p.Cost)
				}
			case "tenant-b":
				if p.VM != nil && p.VM.Exists {
					t.Errorf("B's podVM has A's VM: %+v", p.VM)
				}
			}
		}
	}
}
