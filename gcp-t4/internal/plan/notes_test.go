package plan

import (
	"strings"
	"testing"
)

// TestPlanSaysSharedNotesOnlyWithNotes: the notes true of every plan (no
// API called, the boot disk, h100-cc without an image) and the price
// table's five-line citation are printed with -notes, not under every
// plan, where they once took eight lines after each table.
func TestPlanSaysSharedNotesOnlyWithNotes(t *testing.T) {
	shared := []string{"no API was called", "the boot disk is ROOT_VOLUME_SIZE", "profile h100-cc has no image", "[karpenter-gcp]", "cloud.google.com/compute/gpus-pricing", "no sustained-use or committed-use discounts"}
	out, errOut, code := runPlan(t, "-f", examplePod)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range shared {
		if strings.Contains(out, s) {
			t.Errorf("plan without -notes says %q:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "prices: us-central1 list prices in USD as of 2026-08-03, an estimate, not a quote (-notes:") {
		t.Errorf("plan without -notes does not name the prices in one line with the flag that says more:\n%s", out)
	}
	// The example pod names no namespace and no settings are given: the
	// notes are about this plan only.
	if notes := lines(out, "note: "); len(notes) != 2 || !strings.HasPrefix(notes[0], "note: not set, so planned with stand-ins:") || !strings.HasPrefix(notes[1], "note: no metadata.namespace in Pod/cuda-vectoradd") {
		t.Errorf("plan of the example pod without settings prints notes %q; want the stand-ins and the namespace it assumed", notes)
	}
	all, errOut, code := runPlan(t, "-f", examplePod, "-notes")
	if code != 0 {
		t.Fatalf("-notes: exit %d: %s", code, errOut)
	}
	for _, s := range shared {
		if !strings.Contains(all, s) {
			t.Errorf("plan -notes does not say %q:\n%s", s, all)
		}
	}
	seen := map[string]bool{}
	for _, n := range lines(all, "note: ") {
		if seen[n] {
			t.Errorf("plan -notes says %q twice", n)
		}
		seen[n] = true
	}
	// JSON carries every note, for tools.
	js, _, code := runPlan(t, "-f", examplePod, "-o", "json")
	if code != 0 || !strings.Contains(js, "no API was called") || !strings.Contains(js, "profile h100-cc has no image") {
		t.Errorf("-o json lacks the notes true of every plan (exit %d):\n%s", code, js)
	}
}

// TestPlanNamesAnImagelessProfileItChose: the h100-cc note is this plan's
// when a pod gets h100-cc, so it shows without -notes.
func TestPlanNamesAnImagelessProfileItChose(t *testing.T) {
	out, errOut, _ := runPlan(t, "-machine-types", "h100-cc", "-machine-type", "h100-cc", "-gpus", "1")
	if !strings.Contains(out, "\nnote: profile h100-cc has no image") {
		t.Errorf("a plan that picks h100-cc does not say it has no image:\n%s%s", out, errOut)
	}
}

const mistral = "../../../install/examples/mistral-tp2"

// TestPlanKustomizationNamespace: -k renders the kustomization, so the
// RayService's podVMs are labelled with the namespace it deploys them to;
// -f on the bare manifest says which namespace it assumed.
func TestPlanKustomizationNamespace(t *testing.T) {
	// The runbook's kubelet timeout: with kubelet's default 2m the modelled
	// image pull does not fit, and plan exits 1 (its own test).
	out, errOut, code := runPlan(t, "-k", mistral, "-kubelet-runtime-request-timeout", "10m")
	if code != 0 {
		t.Fatalf("-k: exit %d: %s\n%s", code, errOut, out)
	}
	vms := podVMs(t, out)
	head, worker := vms["RayService/mistral-tp2 head"], vms["RayService/mistral-tp2 worker/gpu"]
	if len(vms) != 2 || head == nil || worker == nil || head.Labels["caa-namespace"] != "mistral-tp2" ||
		worker.Labels["caa-namespace"] != "mistral-tp2" || strings.Contains(out, "caa-namespace=default") {
		t.Errorf("-k does not label the head and worker podVMs caa-namespace=mistral-tp2:\n%s", out)
	}
	if strings.Contains(out, "no metadata.namespace") || !strings.Contains(out, "skipped Namespace mistral-tp2") {
		t.Errorf("-k: want no assumed namespace and the Namespace skipped:\n%s", out)
	}
	out, errOut, code = runPlan(t, "-f", mistral+"/rayservice.yaml", "-kubelet-runtime-request-timeout", "10m")
	if code != 0 {
		t.Fatalf("-f: exit %d: %s", code, errOut)
	}
	if !strings.Contains(flat(out), "note: no metadata.namespace in RayService/mistral-tp2: planned in namespace default (caa-namespace=default)") || !strings.Contains(out, "-k DIR") {
		t.Errorf("-f does not say the namespace it assumed and how to plan the kustomization:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-k", mistral, "-f", examplePod}, "-f and -k are exclusive"},
		{[]string{"-k", mistral, "-gpus", "1"}, "exclusive"},
		{[]string{"-k", "testdata"}, "-k testdata"},
	} {
		_, errOut, code := runPlan(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("plan %v: exit %d, stderr %q; want an error with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPlanHelpIsShort: plan -h lists its own flags in full, the start-up
// and provider flags by name, and exits 0.
func TestPlanHelpIsShort(t *testing.T) {
	out, errOut, code := runPlan(t, "-h")
	help := out + errOut
	if code != 0 {
		t.Fatalf("plan -h: exit %d\n%s", code, help)
	}
	for _, want := range []string{"usage: gcp-t4 plan", "-k string", "-notes", "-f string", "-insert-time", "-zone", "docs/provider.md"} {
		if !strings.Contains(help, want) {
			t.Errorf("plan -h lacks %q:\n%s", want, help)
		}
	}
	for _, absent := range []string{"Refused: podVMs never get an external IP", "start-up: MB/s"} {
		if strings.Contains(help, absent) {
			t.Errorf("plan -h prints %q: a flag it should list by name only:\n%s", absent, help)
		}
	}
	if n := strings.Count(help, "\n"); n > 45 {
		t.Errorf("plan -h is %d lines:\n%s", n, help)
	}
}

// lines are the lines of text that start with prefix.
func lines(text, prefix string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
