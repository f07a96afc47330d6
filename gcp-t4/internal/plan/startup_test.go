package plan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

const rayExample = "../../../install/examples/mistral-tp2/rayservice.yaml"

// The example as shipped: every phase, the total, every deadline on the
// path with its verdict, the NAT bytes; kubelet's bound on the in-guest
// pull is not met, named with its fix, and plan exits 1.
func TestPlanStartupOfTheExample(t *testing.T) {
	clearEnv(t)
	out, errOut, code := runPlan(t, "-f", rayExample)
	if code != 1 || !strings.Contains(errOut, "start-up does not fit every deadline") {
		t.Fatalf("exit %d, stderr %q: want 1 and the deadline message", code, errOut)
	}
	// The message fits the terminal too, not only the table above it.
	for _, line := range strings.Split(errOut, "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("stderr line of %d columns (over 100): %q", n, line)
		}
	}
	cat, err := startup.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nstart-up: RayService/mistral-tp2 head, worker/gpu: ") {
		t.Errorf("no start-up section for head and worker/gpu:\n%s", out)
	}
	for _, p := range cat.Phases {
		if !regexp.MustCompile(`(?m)^  ` + p.ID + ` +(\d|unknown )`).MatchString(out) {
			t.Errorf("phase %s missing", p.ID)
		}
	}
	for _, d := range cat.Deadlines {
		if !strings.Contains(out, d.Owner+" "+d.Setting) {
			t.Errorf("deadline %s (%s %s) missing", d.ID, d.Owner, d.Setting)
		}
	}
	// The weights' size is not given: the total is a floor.
	if !regexp.MustCompile(`(?m)^  total +at least \d+m\S+ +not counting engine$`).MatchString(out) {
		t.Error("no total, or not said to be a floor")
	}
	// The verdict in a word in the table; what it means and the fix
	// below it, wrapped.
	kubelet := regexp.MustCompile(`(?m)^  (\w)  kubelet runtimeRequestTimeout +image +9m58s +2m0s +NOT MET$`).FindStringSubmatch(out)
	words := strings.Join(strings.Fields(out), " ")
	if kubelet == nil || !regexp.MustCompile(kubelet[1]+` kubelet runtimeRequestTimeout \(StartContainer\) needs 9m58s, has 2m0s \(kubelet default\); retried: the step is tried again\. Fix: raise kubelet runtimeRequestTimeout to at least 11m0s: .*GKE.*When it fires: kubelet records RunContainerError`).MatchString(words) {
		t.Errorf("kubelet's bound on the pull is not reported as not met with its fix:\n%s", out)
	}
	// The weights are the model image's, read at a local path: nothing
	// downloaded, their size (for the engine) given only by
	// --weights-size. As committed both images come from their registries
	// (the Ray image from Docker Hub by tag, the catalogue's 10 GB; the
	// model image, not yet pinned, the catalogue's 24.5 GB), all of it
	// counted through Cloud NAT: 34.5 GB per pod, 69 in all.
	if !strings.Contains(out, "through Cloud NAT: 34.5 GB per start of each pod") || !strings.Contains(out, "through Cloud NAT in all: 69.0 GB") {
		t.Errorf("NAT bytes:\n%s", out)
	}
	if !regexp.MustCompile(`note: model /mnt/model/weights: a local path, read where it lies \(a model image beside the serving container, docs/cache.md "Weights"\): nothing downloaded; give its size with --weights-size`).MatchString(words) ||
		!regexp.MustCompile(`(?m)^  weights +0s +nothing moved \(via local\) +size: unknown$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  engine +unknown +not counted: give --weights-size `).MatchString(out) {
		t.Errorf("the local weights are not said to need --weights-size:\n%s", out)
	}
	// KubeRay's deadline is the annotation's hour, against a floor under
	// it: unknown, not met.
	ray := regexp.MustCompile(`(?m)^  (\w)  KubeRay ray.io/initializing-timeout +insert..engine +unknown +1h0m0s +unknown$`).FindStringSubmatch(out)
	if ray == nil || !regexp.MustCompile(`values from: .*\b`+ray[1]+` annotation ray.io/initializing-timeout`).MatchString(words) {
		t.Errorf("the example's KubeRay annotation is not read:\n%s", out)
	}
	kata := regexp.MustCompile(`(?m)^  (\w)  kata-remote create_container_timeout +image +9m58s +20m0s +met$`).FindStringSubmatch(out)
	if kata == nil || !regexp.MustCompile(`values from: .*\b`+kata[1]+` gcp-t4 install`).MatchString(words) {
		t.Errorf("kata-remote's bound is not what install sets:\n%s", out)
	}
}

// With the cluster's own figures every deadline is met and plan exits 0;
// -o json carries the same verdicts.
func TestPlanStartupWithTheClustersSettings(t *testing.T) {
	clearEnv(t)
	out, errOut, code := runPlan(t, "-f", rayExample, "--kubelet-runtime-request-timeout=30m")
	if code != 0 || strings.Contains(out, "NOT MET") {
		t.Fatalf("exit %d (%s): want every deadline met:\n%s", code, errOut, out)
	}
	if !regexp.MustCompile(`(?m)^  d  kubelet runtimeRequestTimeout +image +9m58s +30m0s +met$`).MatchString(out) ||
		!strings.Contains(strings.Join(strings.Fields(out), " "), "a, d --kubelet-runtime-request-timeout") {
		t.Errorf("the flag's value is not shown as the cluster's:\n%s", out)
	}
	out, _, code = runPlan(t, "-f", rayExample, "-o", "json", "--pull-rate=400", "--unpack-rate=400", "--weights-size=24.5GB")
	if code != 0 {
		t.Fatalf("-o json with a 400 MB/s pull: exit %d, want 0 (61 s fits kubelet's 2m)", code)
	}
	var doc struct {
		Startups []struct {
			Group string `json:"group"`
			Start struct {
				Phases []struct {
					ID    string `json:"id"`
					Route string `json:"route"`
					Bytes int64  `json:"bytes"`
				} `json:"phases"`
				NATBytes  int64 `json:"natBytes"`
				Deadlines []struct {
					ID  string `json:"id"`
					Met bool   `json:"met"`
				} `json:"deadlines"`
			} `json:"start"`
		} `json:"startups"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	// 34.5 GB of images through Cloud NAT; the weights read in place.
	if len(doc.Startups) != 2 || doc.Startups[0].Start.NATBytes != 34_500_000_000 {
		t.Fatalf("startups: %+v", doc.Startups)
	}
	for _, p := range doc.Startups[0].Start.Phases {
		if p.ID == "weights" && (p.Route != startup.RouteLocal || p.Bytes != 0) {
			t.Errorf("weights %+v: want nothing downloaded, read in place", p)
		}
		if p.ID == "engine" && p.Bytes != 24_500_000_000 {
			t.Errorf("engine %+v: want --weights-size's 24.5 GB loaded", p)
		}
	}
	for _, s := range doc.Startups {
		for _, d := range s.Start.Deadlines {
			if !d.Met {
				t.Errorf("%s: %s not met", s.Group, d.ID)
			}
		}
	}
}

// A pod annotation sets kata-remote's bound for its pod, in whole seconds
// as kata reads it; another form is refused naming the annotation.
func TestPlanStartupReadsThePodsAnnotation(t *testing.T) {
	clearEnv(t)
	pod := func(v string) string {
		p := filepath.Join(t.TempDir(), "pod.yaml")
		if err := os.WriteFile(p, []byte(`apiVersion: v1
kind: Pod
metadata:
  name: big
  annotations:
    io.katacontainers.config.runtime.create_container_timeout: "`+v+`"
spec:
  runtimeClassName: kata-remote
  containers:
    - name: main
      image: rayproject/ray-llm:2.52.0-py311-cu128
      resources:
        limits: {nvidia.com/gpu: 1}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out, _, code := runPlan(t, "-f", pod("60"), "--kubelet-runtime-request-timeout=30m")
	if code != 1 || !regexp.MustCompile(`(?m)^  e  kata-remote create_container_timeout +image +\S+ +1m0s +NOT MET$`).MatchString(out) ||
		!strings.Contains(strings.Join(strings.Fields(out), " "), "e annotation io.katacontainers.config.runtime.create_container_timeout") {
		t.Fatalf("exit %d: the annotation's 60 s is not the bound:\n%s", code, out)
	}
	_, errOut, code := runPlan(t, "-f", pod("20m"))
	if code != 1 || !strings.Contains(errOut, "annotation io.katacontainers.config.runtime.create_container_timeout") || !strings.Contains(errOut, "whole seconds") {
		t.Fatalf("exit %d, %q: want the annotation named and whole seconds asked for", code, errOut)
	}
	// No model: no weights, no engine phase time; a catalogued image only.
	if strings.Contains(out, "weights  0s") == false {
		t.Errorf("a pod without a model downloads no weights:\n%s", out)
	}
}

// The runbook's plan command, run as written from the repository root,
// prints the start-up the runbook quotes: each phase's time, the total,
// the NAT bytes and every deadline value it names; and it exits 1, as
// the runbook says it does on GKE.
func TestRunbookStartupIsPlans(t *testing.T) {
	clearEnv(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runbook-mistral-tp2.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	// The command as written: -f FILE or -k DIR and any start-up flags
	// (--weights-size for a model in a bucket).
	cmd := regexp.MustCompile(`(?m)^gcp-t4 plan (-[fk] \S+(?: -{1,2}[a-z-]+(?:[ =][^\s-]\S*)?)*)$`).FindStringSubmatch(text)
	if cmd == nil {
		t.Fatal("the runbook has no `gcp-t4 plan -f FILE` or `-k DIR` command")
	}
	t.Chdir(root)
	out, _, code := runPlan(t, strings.Fields(cmd[1])...)
	if code != 1 || !strings.Contains(text, "it exits 1") {
		t.Fatalf("plan exits %d; the runbook says it exits 1 on GKE", code)
	}
	i := strings.Index(text, "Expected start-up, from step 4's `gcp-t4 plan`")
	if i < 0 {
		t.Fatal("the runbook's start-up section is gone")
	}
	section := text[i:]
	section = section[:strings.Index(section, "\n## ")]
	// The figures with the cache come from the second command, below.
	a, b := strings.Index(section, "<!-- startup-cache -->"), strings.Index(section, "<!-- /startup-cache -->")
	if a < 0 || b < a {
		t.Fatal("the runbook's start-up section has no <!-- startup-cache --> region")
	}
	section = section[:a] + section[b:]
	rows := regexp.MustCompile(`(?m)^\| ([A-Za-z][^|]*?) \| (?:\*\*)?([0-9hms.]+)(?:\*\*)? \|`).FindAllStringSubmatch(section, -1)
	phases := map[string]string{"insert (GCE)": "insert", "boot to readiness": "boot", "CAA reaches the forwarder": "agent",
		"image pulled inside the podVM": "image", "weights downloaded": "weights", "engine load": "engine"}
	if len(rows) != len(phases) {
		t.Fatalf("the runbook's table has %d phase rows, plan has %d phases", len(rows), len(phases))
	}
	for _, r := range rows {
		id := phases[r[1]]
		if !regexp.MustCompile(`(?m)^  ` + id + ` +` + regexp.QuoteMeta(r[2]) + ` `).MatchString(out) {
			t.Errorf("runbook: %s takes %s; plan says otherwise:\n%s", r[1], r[2], out)
		}
	}
	total := regexp.MustCompile(`\*\*total, each pod\*\* \| \*\*(\S+)\*\*`).FindStringSubmatch(section)
	if total == nil || !regexp.MustCompile(`(?m)^  total +`+regexp.QuoteMeta(total[1])+`\b`).MatchString(out) {
		t.Errorf("runbook total %v does not match plan:\n%s", total, out)
	}
	for _, v := range regexp.MustCompile(`\b\d+h\d+m\d+s|\b\d+m\d+s\b|\d+\.\d GB`).FindAllString(section, -1) {
		if !strings.Contains(out, v) {
			t.Errorf("the runbook quotes %s; plan does not print it", v)
		}
	}

	// The second command, with the cache: runbook_cache_test.go.
}
