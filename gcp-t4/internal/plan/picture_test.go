package plan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

const examplePodFile = "../../../install/examples/gpu-pod/pod.yaml"

// startSection is plan's output from its first start-up on.
func startSection(t *testing.T, out string) string {
	t.Helper()
	i := strings.Index(out, "\nstart-up: ")
	if i < 0 {
		t.Fatalf("no start-up section:\n%s", out)
	}
	return out[i:]
}

// TestStartupFitsTheWidth: over the repository's examples, as the docs
// run them, every line of the start-up section fits 100 columns, and no
// table cell carries a sentence: each deadline's row ends in its verdict.
func TestStartupFitsTheWidth(t *testing.T) {
	for _, args := range [][]string{
		{"-f", examplePodFile},
		{"-f", rayExample},
		{"-f", rayExample, "--weights-size", "24.5GB"},
		{"-k", "../../../install/examples/mistral-tp2", "--weights-size", "24.5GB"},
	} {
		out, _, code := runPlan(t, args...)
		if code > 1 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, l := range strings.Split(startSection(t, out), "\n") {
			if n := utf8.RuneCountInString(l); n > 100 {
				t.Errorf("%v: a line of %d columns:\n%s", args, n, l)
			}
		}
		for _, row := range regexp.MustCompile(`(?m)^  \w  \S.*$`).FindAllString(out, -1) {
			if !regexp.MustCompile(` (met|NOT MET|unknown)$`).MatchString(row) {
				t.Errorf("%v: a deadline row that does not end in its verdict: %q", args, row)
			}
		}
	}
}

// TestStartupDrawsTheStart: each phase is a bar after the one before it,
// with a column at each deadline on the axis; a deadline the pull
// crosses is drawn inside the image's bar.
func TestStartupDrawsTheStart(t *testing.T) {
	// A 2-minute insert keeps kubelet's bound on the pull (d) off the
	// column of its bound on the sandbox (a), so both letters show.
	out, _, _ := runPlan(t, "-f", rayExample, "--weights-size", "24.5GB", "--insert-time", "2m")
	sec := startSection(t, out)
	bar := func(id string) (int, int) {
		m := regexp.MustCompile(`(?m)^  `+id+` +([^\n]*)$`).FindAllStringSubmatch(sec, -1)
		if len(m) < 2 {
			t.Fatalf("no bar for %s:\n%s", id, sec)
		}
		row := []rune(m[len(m)-1][0]) // the table's row comes first, the chart's last
		first, last := -1, -1
		for i, r := range row {
			if r == '█' {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		return first, last
	}
	// The weights, read in place, take no time and draw no bar.
	if first, _ := bar("weights"); first >= 0 {
		t.Errorf("the weights read in place draw a bar:\n%s", sec)
	}
	var prev int
	for _, id := range []string{"insert", "boot", "image", "engine"} {
		first, last := bar(id)
		if first < 0 || first < prev-1 || last < first {
			t.Errorf("%s's bar %d..%d does not follow the phase before (ending at %d):\n%s", id, first, last, prev, sec)
		}
		prev = last
	}
	// kubelet's bound on the pull: its column lies inside the image's bar.
	key := regexp.MustCompile(`(?m)^  (\w)  kubelet runtimeRequestTimeout +image `).FindStringSubmatch(sec)
	lines := strings.Split(sec, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  timeline (") {
			continue
		}
		head, img := []rune(lines[i+1]), []rune(lines[i+5])
		c := slices.Index(head, []rune(key[1])[0])
		if !strings.HasPrefix(string(img), "  image ") || c < 0 || c >= len(img) || img[c] != '┃' ||
			!slices.Contains(img[:c], '█') || !slices.Contains(img[c:], '█') {
			t.Errorf("deadline %s is not drawn across the image's bar:\n%s\n%s", key[1], lines[i+1], lines[i+5])
		}
		return
	}
	t.Errorf("no timeline:\n%s", sec)
}

// TestStartupOfAPlainPod: a Pod is bounded by neither KubeRay's nor Ray
// Serve's deadline; its image, not in the catalogue, has an unknown pull
// time, shown as unknown (not 0s, not met) with the flag that gives it,
// and plan does not fail for it.
func TestStartupOfAPlainPod(t *testing.T) {
	out, errOut, code := runPlan(t, "-f", examplePodFile)
	if code != 0 {
		t.Fatalf("exit %d (%s): an unknown is not a deadline missed", code, errOut)
	}
	sec := startSection(t, out)
	if strings.Contains(sec, "KubeRay") || strings.Contains(sec, "Ray Serve") {
		t.Errorf("a Pod's start lists Ray's deadlines:\n%s", sec)
	}
	if !regexp.MustCompile(`(?m)^  image +unknown +not counted: give --image-size +unknown \(--image-size\)$`).MatchString(sec) {
		t.Errorf("the image's time is not unknown:\n%s", sec)
	}
	for _, d := range []string{"kubelet runtimeRequestTimeout", "kata-remote create_container_timeout", "kata-agent agent.image_pull_timeout"} {
		if !regexp.MustCompile(`(?m)^  \w  ` + d + ` +image +unknown +\S+ +unknown$`).MatchString(sec) {
			t.Errorf("%s is not unknown:\n%s", d, sec)
		}
	}
	if !regexp.MustCompile(`(?m)^  total +at least 1m58s +not counting image$`).MatchString(sec) {
		t.Errorf("the total is not a floor:\n%s", sec)
	}
	var doc struct {
		Startups []GroupStart `json:"startups"`
	}
	jout, _, _ := runPlan(t, "-f", examplePodFile, "-o", "json")
	if err := json.Unmarshal([]byte(jout), &doc); err != nil || len(doc.Startups) != 1 {
		t.Fatalf("%v\n%s", err, jout)
	}
	for _, c := range doc.Startups[0].Start.Checks {
		if c.Owner == "KubeRay" || c.Owner == "Ray Serve LLM" {
			t.Errorf("-o json: a Pod is checked against %s", c.ID)
		}
		if c.From == "image" && (c.Met || !c.Unknown) {
			t.Errorf("-o json: %s: met %v, unknown %v; want unknown, not met", c.ID, c.Met, c.Unknown)
		}
	}
	if s := doc.Startups[0].Sizes["image"]; s.From != "unknown" {
		t.Errorf("-o json: the image's size from %+v", s)
	}
}

// TestStartupSaysWhereEachFigureCameFrom: a size given by flag is the
// flag's, not an assumption; the image's pull cites the image's size and
// the rates it moved at, not kata's configuration.
func TestStartupSaysWhereEachFigureCameFrom(t *testing.T) {
	out, _, _ := runPlan(t, "-f", rayExample, "--weights-size", "24.5GB", "--insert-time", "50s")
	sec := startSection(t, out)
	if !regexp.MustCompile(`(?m)^  weights +0s +nothing moved \(via local\) +size: flag --weights-size$`).MatchString(sec) ||
		!regexp.MustCompile(`(?m)^    engine +.*weights size: flag\s`).MatchString(sec) {
		t.Errorf("the weights' size is not shown as given:\n%s", sec)
	}
	if !regexp.MustCompile(`(?m)^  insert +50s +50s +flag --insert-time$`).MatchString(sec) {
		t.Errorf("the insert time is not shown as given:\n%s", sec)
	}
	image := regexp.MustCompile(`(?s)\n    image    (.*?)\n    weights `).FindStringSubmatch(sec)
	if image == nil {
		t.Fatalf("no sources for the image:\n%s", sec)
	}
	src := strings.Join(strings.Fields(image[1]), " ")
	if strings.Contains(src, "configuration-remote.toml") || !strings.Contains(src, "image size (assumption): docs/cache.md") ||
		!strings.Contains(src, "registry rate, assumption (--pull-rate): docs/benchmarks.md") || !strings.Contains(src, "unpack rate, measured (--unpack-rate)") {
		t.Errorf("the image's sources: %s", src)
	}
}

// TestStartupOfSameGroupsOnce: the head and worker of the example start
// alike: one section names both.
func TestStartupOfSameGroupsOnce(t *testing.T) {
	out, _, _ := runPlan(t, "-f", rayExample, "--weights-size", "24.5GB")
	if n := strings.Count(out, "\nstart-up: "); n != 1 || !strings.Contains(out, "\nstart-up: RayService/mistral-tp2 head, worker/gpu: ") {
		t.Errorf("%d start-up sections, want one for head, worker/gpu:\n%s", n, out)
	}
	if n := regexp.MustCompile(`(?m)^  PHASE `).FindAllStringIndex(out, -1); len(n) != 1 {
		t.Errorf("%d phase tables, want 1", len(n))
	}
	// Different starts stay apart: the head has no GPU in a Pod with one.
	dir := t.TempDir()
	two := filepath.Join(dir, "two.yaml")
	pod := func(name, gpus string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: ml}\nspec:\n  runtimeClassName: kata-remote\n  containers:\n    - name: main\n      image: rayproject/ray-llm:2.52.0-py311-cu128\n      resources: {limits: {nvidia.com/gpu: " + gpus + "}}\n"
	}
	if err := os.WriteFile(two, []byte(pod("a", "1")+"---\n"+pod("b", "2")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runPlan(t, "-f", two)
	if strings.Count(out, "\nstart-up: ") != 2 {
		t.Errorf("two workloads' starts merged:\n%s", out)
	}
}

// TestStartupJSONCarriesTheFix: -o json says what to do about a deadline
// not met in the deadline itself, and the error points there, not at a
// table it did not print.
func TestStartupJSONCarriesTheFix(t *testing.T) {
	out, errOut, code := runPlan(t, "-f", rayExample, "--weights-size", "24.5GB", "-o", "json")
	if code != 1 || strings.Contains(errOut, "above") || !strings.Contains(errOut, "the deadlines with met false and their fix") {
		t.Errorf("exit %d, %q: want 1 and the JSON path", code, errOut)
	}
	var doc struct {
		Startups []GroupStart `json:"startups"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range doc.Startups {
		for _, c := range s.Start.Checks {
			switch {
			case !c.Met && !strings.HasPrefix(c.Fix, "raise "+c.Owner+" "+c.Setting+" to at least "):
				t.Errorf("%s %s: not met, fix %q", s.Group, c.ID, c.Fix)
			case c.Met && c.Fix != "":
				t.Errorf("%s %s: met, with a fix %q", s.Group, c.ID, c.Fix)
			}
		}
	}
	if strings.Contains(out, "NOT MET") {
		t.Error("-o json carries the table's words")
	}
}

// TestStartupCleansTenantText: a manifest's names reach the terminal with
// their control characters escaped.
func TestStartupCleansTenantText(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: evil, namespace: ml}\nspec:\n  runtimeClassName: kata-remote\n  containers:\n    - name: main\n      image: \"example.com/x\\e[2J:1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runPlan(t, "-f", p)
	if code > 1 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	sec := startSection(t, out)
	if strings.ContainsRune(sec, '\x1b') || !strings.Contains(sec, `example.com/x\x1b[2J:1`) {
		t.Errorf("the image's name is not escaped:\n%q", sec)
	}
}
