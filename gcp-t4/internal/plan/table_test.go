package plan

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// podVM is a group as plan's table prints it: its row's cells by header,
// the fields under the table, its labels.
type podVM struct {
	Cells  map[string]string
	Detail map[string]string
	Labels map[string]string
}

var (
	tableHeads  = []string{"GROUP", "REPLICAS", "VCPU", "MEM(MiB)", "GPU", "MACHINE TYPE", "ACCELERATOR", "$/H EACH", "$/H ALL"}
	detailHeads = []string{"PROFILE", "ZONES (fallback order)", "MODEL", "EXTERNAL IP", "NEXT-CHEAPEST ($/H EACH)"}
)

// podVMs reads plan's table back, as a reader would: each workload's
// name, a row per group cut at its header's columns, the fields under it
// for the groups they name, the labels for the groups they name. The key
// is "workload group".
func podVMs(t *testing.T, out string) map[string]*podVM {
	t.Helper()
	got := map[string]*podVM{}
	var workload string
	var cols []int
	var names []string // the workload's groups
	var under []string // the groups the lines below a heading are for
	mode, key := "", ""
	head, _, ok := strings.Cut(out, "\nestimated total: ")
	if !ok {
		t.Fatalf("no estimated total:\n%s", out)
	}
	for _, l := range strings.Split(head, "\n") {
		indent := len(l) - len(strings.TrimLeft(l, " "))
		switch {
		case l == "":
		case indent == 0:
			workload, names, cols = l, nil, nil
		case strings.HasPrefix(l, "  GROUP "):
			cols = nil
			for _, h := range tableHeads {
				cols = append(cols, strings.Index(l, h))
			}
			if slices.Contains(cols, -1) {
				t.Fatalf("table header %q lacks one of %q", l, tableHeads)
			}
			mode = "rows"
		case indent == 2 && mode == "rows" && !strings.HasSuffix(l, ":"):
			p := &podVM{Cells: map[string]string{}, Detail: map[string]string{}, Labels: map[string]string{}}
			for i, h := range tableHeads {
				end := len(l)
				if i+1 < len(cols) {
					end = min(len(l), cols[i+1])
				}
				p.Cells[h] = strings.TrimSpace(l[min(len(l), cols[i]):end])
			}
			names = append(names, p.Cells["GROUP"])
			got[workload+" "+p.Cells["GROUP"]] = p
		case indent == 2 && strings.HasPrefix(l, "  labels"):
			under = names
			if g, ok := strings.CutPrefix(strings.TrimSuffix(l, ":"), "  labels of "); ok {
				under = strings.Split(g, ", ")
			}
			mode = "labels"
		case indent == 2 && strings.HasSuffix(l, ":"):
			under = strings.Split(strings.TrimSuffix(strings.TrimSpace(l), ":"), ", ")
			mode = "detail"
		case mode == "labels":
			for _, kv := range strings.Split(strings.TrimSpace(l), "  ") {
				k, v, _ := strings.Cut(kv, "=")
				for _, g := range under {
					got[workload+" "+g].Labels[k] = v
				}
			}
		case mode == "detail":
			text := strings.TrimSpace(l)
			if indent == 4 {
				i := slices.IndexFunc(detailHeads, func(h string) bool { return strings.HasPrefix(text, h+"  ") || text == h })
				if i < 0 {
					t.Fatalf("%q: not one of %q", l, detailHeads)
				}
				key, text = detailHeads[i], strings.TrimSpace(strings.TrimPrefix(text, detailHeads[i]))
			}
			for _, g := range under {
				p := got[workload+" "+g]
				if p == nil {
					t.Fatalf("%q: fields for a group with no row: %q", l, g)
				}
				p.Detail[key] = strings.TrimSpace(p.Detail[key] + " " + text)
			}
		default:
			t.Fatalf("a line plan's table does not have: %q", l)
		}
	}
	return got
}

// TestPlanFitsTheWidth: over the repository's examples and this
// package's manifests, as the docs and tests run them, every line plan
// prints for people fits 100 columns, -notes included, and the table
// reads back whole: each group's row, its fields and labels.
func TestPlanFitsTheWidth(t *testing.T) {
	for _, args := range [][]string{
		{"-f", examplePodFile},
		{"-f", rayExample, "--weights-size", "24.5GB"},
		{"-f", "../../../install/examples/mistral-tp2/single-podvm/rayservice.yaml"},
		{"-f", "../../../install/examples/mistral-tp2/nccl-check/pods.yaml"},
		{"-k", "../../../install/examples/mistral-tp2", "--weights-size", "24.5GB"},
		{"-k", "../../../install/examples/mistral-tp2/single-podvm"},
		{"-k", "../../../install/examples/mistral-tp2/nccl-check"},
		{"-f", "testdata/deployment.yaml"},
		{"-f", "testdata/rayservice.yaml", "-provisioning-model", "SPOT", "-machine-types", "n1-highmem-8,cpu-2"},
		{"-gpus", "1", "-memory", "40Gi", "-provisioning-model", "SPOT", "-spot-fallback", "-zones", "us-central1-b,us-central1-c,us-central1-f"},
		{"-gpus", "1", "-machine-type", "h100-cc", "-machine-types", "h100-cc"},
	} {
		for _, extra := range [][]string{nil, {"-notes"}} {
			a := append(slices.Clone(args), extra...)
			out, errOut, code := runPlan(t, a...)
			if code > 1 {
				t.Fatalf("%v: exit %d: %s", a, code, errOut)
			}
			for _, l := range strings.Split(out, "\n") {
				if n := utf8.RuneCountInString(l); n > 100 {
					t.Errorf("%v: a line of %d columns:\n%s", a, n, l)
				}
			}
			vms := podVMs(t, out)
			if len(vms) == 0 {
				t.Errorf("%v: no podVM read back from:\n%s", a, out)
			}
			for name, p := range vms {
				for _, h := range detailHeads {
					if p.Detail[h] == "" {
						t.Errorf("%v: %s: no %s", a, name, h)
					}
				}
				if p.Labels["managed-by"] != "caa-gcp-t4" || p.Labels["caa-pod"] == "" || len(p.Labels) < 7 {
					t.Errorf("%v: %s: labels %v", a, name, p.Labels)
				}
			}
		}
	}
}

// TestPlanSharedFieldsOnce: the example's head and worker differ in
// shape only: their other fields and the labels they share are printed
// once, named for both, and each one's own labels under its name.
func TestPlanSharedFieldsOnce(t *testing.T) {
	out, _, _ := runPlan(t, "-k", mistral, "--weights-size", "24.5GB")
	if !strings.Contains(out, "\n  head, worker/gpu:\n    PROFILE   ") || strings.Count(out, "PROFILE") != 1 {
		t.Errorf("the head's and worker's fields are not printed once for both:\n%s", out)
	}
	if strings.Count(out, "caa-cluster=") != 1 || !strings.Contains(out, "\n  labels of head, worker/gpu:\n") ||
		!strings.Contains(out, "\n  labels of head:\n    caa-pod=mistral-tp2-head-0\n") {
		t.Errorf("the shared labels are not printed once, or a group's own not under its name:\n%s", out)
	}
	vms := podVMs(t, out)
	head, worker := vms["RayService/mistral-tp2 head"], vms["RayService/mistral-tp2 worker/gpu"]
	if head == nil || worker == nil || head.Labels["caa-cluster"] != worker.Labels["caa-cluster"] || head.Labels["caa-pod"] == worker.Labels["caa-pod"] ||
		head.Detail["PROFILE"] != "custom" || worker.Detail["PROFILE"] != "custom" || head.Cells["VCPU"] != "6" || worker.Cells["VCPU"] != "7" {
		t.Errorf("head %+v, worker %+v", head, worker)
	}
}

// flat is text with its runs of spaces and line breaks made one space:
// what a sentence says, however plan wrapped it.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestPlanCleansTenantNames: a workload's name and its group's reach the
// table with their control characters escaped.
func TestPlanCleansTenantNames(t *testing.T) {
	var b strings.Builder
	writePodVMs(&b, []Entry{{Workload: "Pod/a\x1b[2Jb", Group: "g\u202e", Replicas: 1, Zones: []string{"z"}, Labels: map[string]string{"k": "v\x07"}}})
	out := b.String()
	if strings.ContainsAny(out, "\x1b\u202e\x07") || !strings.Contains(out, `Pod/a\x1b[2Jb`) || !strings.Contains(out, `g\u202e`) || !strings.Contains(out, `k=v\a`) {
		t.Errorf("tenant text not escaped:\n%q", out)
	}
}

// TestRenderCleansEveryLine: what a manifest or a profile file names
// (the profile, a requirement, a warning), with a screen clear, a bidi
// override and a zero-width space, reaches neither the table nor the
// JSON raw: the table is cleaned line by line as it is written, and the
// JSON escapes what encoding/json leaves raw.
func TestRenderCleansEveryLine(t *testing.T) {
	bad := "\x1b[2J\u202e\u200b\x7f"
	e := Entry{Workload: "Pod/a" + bad, Group: "g", Replicas: 1, Zones: []string{"z"}, Profile: "p" + bad,
		Requirements: []string{"r" + bad}, Warnings: []string{"w" + bad},
		Insert: &computepb.InsertInstanceRequest{Project: "proj" + bad}}
	for _, format := range []string{OutputTable, OutputJSON, OutputRequest} {
		var b strings.Builder
		if err := Render(&b, format, []Entry{e}, Notes{}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(b.String(), "\x1b\u202e\u200b\x7f") {
			t.Errorf("-o %s: a raw control reaches the terminal:\n%q", format, b.String())
		}
		if format == OutputTable && !strings.Contains(flat(b.String()), `(profile p\x1b[2J\u202e\u200b\x7f): r\x1b[2J`) {
			t.Errorf("table: the profile and requirement not escaped:\n%s", b.String())
		}
	}
}
