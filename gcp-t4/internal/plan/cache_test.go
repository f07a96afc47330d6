package plan

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/initdata"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// madeUp is a digest no registry serves: the cache layouts these tests
// write name images by it, as cache build names them, without their
// blobs (so their sizes come from the start-up catalogue).
func madeUp(s string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(s))) }

var (
	cachedDigest = madeUp("the ray-llm image in the cache")
	otherDigest  = madeUp("a ray-llm image not in the cache")
)

// writeLayout writes an OCI image layout whose index.json names refs, each
// pinned by digest, as gcp-t4 cache build -o DIR writes it.
func writeLayout(t *testing.T, refs ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var ms []map[string]any
	for _, r := range refs {
		_, dg, _ := strings.Cut(r, "@")
		ms = append(ms, map[string]any{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": dg, "size": 1024,
			"annotations": map[string]string{cachemirror.RefNameAnnotation: r}})
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": ms})
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "index.json": index} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mirrorInitdata is a pod's initdata annotation that points image-rs at
// the podVM's mirror for the repository paths given, in the form cache
// initdata writes its mirror entries (layout_test.go checks plan against
// the generator's own output).
func mirrorInitdata(t *testing.T, paths ...string) string {
	t.Helper()
	var text strings.Builder
	text.WriteString("algorithm = \"sha256\"\nversion = \"0.1.0\"\n\n[data]\n\"cdh.toml\" = '''\n")
	for _, p := range paths {
		fmt.Fprintf(&text, "[[image.registry_config.registry.mirror]]\nlocation = \"%s/%s\"\ninsecure = true\n", cachemirror.Listen, p)
	}
	text.WriteString("'''\n")
	v, err := initdata.Encode(text.String())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gpuPod is a one-GPU pod whose containers pull images, in order, with
// the initdata that points image-rs at the mirror for rayproject/ray-llm.
func gpuPod(t *testing.T, images ...string) string {
	t.Helper()
	return gpuPodWith(t, mirrorInitdata(t, "rayproject/ray-llm"), images...)
}

// gpuPodWith is gpuPod with the initdata annotation given ("" for none).
func gpuPodWith(t *testing.T, ann string, images ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: cached\n  namespace: default\n")
	if ann != "" {
		fmt.Fprintf(&b, "  annotations:\n    %s: %s\n", initdata.Annotation, ann)
	}
	b.WriteString("spec:\n  runtimeClassName: kata-remote\n  containers:\n")
	for i, im := range images {
		fmt.Fprintf(&b, "    - name: c%d\n      image: %s\n", i, im)
		if i == 0 {
			b.WriteString("      resources:\n        limits: {nvidia.com/gpu: 1}\n")
		}
	}
	p := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// planStart is what -o json says of a plan's starts.
type planStart struct {
	Group string `json:"group"`
	Start struct {
		Phases []struct {
			ID       string `json:"id"`
			Took     string `json:"took"`
			Bytes    int64  `json:"bytes"`
			Rate     string `json:"rate"`
			Route    string `json:"route"`
			Pace     string `json:"pace"`
			NATBytes int64  `json:"natBytes"`
			Figure   string `json:"figure"`
		} `json:"phases"`
		Total    string `json:"total"`
		NATBytes int64  `json:"natBytes"`
	} `json:"start"`
	Cache *struct {
		Layout       string   `json:"layout"`
		Cached       []string `json:"cached"`
		FromRegistry []string `json:"fromRegistry"`
		Total        string   `json:"total"`
		WithoutCache string   `json:"withoutCache"`
		Goal         string   `json:"goal"`
		Met          bool     `json:"met"`
		Over         string   `json:"over"`
		Causes       []string `json:"causes"`
	} `json:"cache"`
	Notes []string `json:"notes"`
}

func planJSON(t *testing.T, args ...string) []planStart {
	t.Helper()
	out, errOut, code := runPlan(t, append(args, "-o", "json")...)
	if code != 0 && code != 1 {
		t.Fatalf("plan %v: exit %d: %s", args, code, errOut)
	}
	var doc struct {
		Startups []planStart `json:"startups"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("plan %v: %v\n%s%s", args, err, out, errOut)
	}
	return doc.Startups
}

func (s planStart) phase(t *testing.T, id string) struct {
	ID       string `json:"id"`
	Took     string `json:"took"`
	Bytes    int64  `json:"bytes"`
	Rate     string `json:"rate"`
	Route    string `json:"route"`
	Pace     string `json:"pace"`
	NATBytes int64  `json:"natBytes"`
	Figure   string `json:"figure"`
} {
	t.Helper()
	for _, p := range s.Start.Phases {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no phase %s", id)
	return s.Start.Phases[0]
}

// With --cache, each of the pod's images is pulled from the cache disk
// when the layout holds it by the digest the manifest pins, at the
// cache-disk and unpack rates and with no bytes through Cloud NAT; an
// image pinned to another digest falls back to its registry through
// Cloud NAT, and an image by tag is never taken from the cache, each
// with a note that says so and what to do.
func TestPlanStartupWithTheCache(t *testing.T) {
	const repo = "rayproject/ray-llm"
	layout := writeLayout(t, "docker.io/"+repo+":2.52.0-py311-cu128@"+cachedDigest)
	cached, other, tagged := repo+"@"+cachedDigest, repo+"@"+otherDigest, repo+":2.52.0-py311-cu128"
	const image = 10_000_000_000 // the catalogue's ray-llm
	for _, tc := range []struct {
		name     string
		images   []string
		extra    []string // flags
		route    string   // of the image phase
		took     string   // of the image phase
		bytes    int64    // of the image phase
		nat      int64
		notes    []string
		cached   []string
		registry []string
	}{
		{"a cached image is read from the cache disk", []string{cached}, nil, startup.RouteCache, "3m20s", image, 0,
			[]string{"image " + cached + ": 10.0 GB", "in the cache (docker.io/" + repo + ":2.52.0-py311-cu128@" + cachedDigest + "): read from the cache disk, not through Cloud NAT"},
			[]string{cached}, nil},
		{"--image-size sizes a cached image", []string{cached}, []string{"--image-size", "5GB"}, startup.RouteCache, "1m40s", 5e9, 0,
			[]string{"image " + cached + ": 5.0 GB (--image-size), in the cache"},
			[]string{cached}, nil},
		{"an image the cache does not hold falls back to its registry", []string{other}, nil, "", "4m4s", image, image,
			[]string{"image " + other + ": 10.0 GB", "not in the cache: it falls back to its registry through Cloud NAT"},
			nil, []string{other}},
		{"an image by tag is never taken from the cache", []string{tagged}, nil, "", "4m4s", image, image,
			[]string{"referenced by tag", "pin it by digest", "the cache holds docker.io/" + repo + ":2.52.0-py311-cu128@" + cachedDigest},
			nil, []string{tagged}},
		{"a pod with both: the longer pull is modelled, the uncached bytes cross NAT", []string{cached, other}, nil, "", "4m4s", image, image,
			[]string{"in the cache", "not in the cache"},
			[]string{cached}, []string{other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			starts := planJSON(t, append([]string{"-f", gpuPod(t, tc.images...), "--cache", layout}, tc.extra...)...)
			if len(starts) != 1 {
				t.Fatalf("starts: %+v", starts)
			}
			s := starts[0]
			img := s.phase(t, "image")
			wantRate := "registry,unpack"
			if tc.route == startup.RouteCache {
				wantRate = "cache-disk,unpack"
			}
			if img.Route != tc.route || img.Rate != wantRate || img.Took != tc.took || img.Bytes != tc.bytes {
				t.Errorf("image phase %+v: want route %q, rates %s, %s for %d bytes", img, tc.route, wantRate, tc.took, tc.bytes)
			}
			if tc.route == startup.RouteCache && (img.Pace != "unpack" || !strings.Contains(img.Figure, "via cache")) {
				t.Errorf("a cached image still unpacks in the guest, and that paces it: %+v", img)
			}
			if img.NATBytes != tc.nat || s.Start.NATBytes != tc.nat {
				t.Errorf("through Cloud NAT: image %d, start %d; want %d", img.NATBytes, s.Start.NATBytes, tc.nat)
			}
			notes := strings.Join(s.Notes, "\n")
			for _, n := range tc.notes {
				if !strings.Contains(notes, n) {
					t.Errorf("no note saying %q:\n%s", n, notes)
				}
			}
			c := s.Cache
			if c == nil || c.Layout != layout || fmt.Sprint(c.Cached) != fmt.Sprint(tc.cached) || fmt.Sprint(c.FromRegistry) != fmt.Sprint(tc.registry) {
				t.Fatalf("cache: %+v", c)
			}
			if c.Total != s.Start.Total || c.Goal != "3m0s" || c.Met || c.Over == "" || len(c.Causes) == 0 {
				t.Errorf("the start with the cache against the 3-minute goal: %+v (total %s)", c, s.Start.Total)
			}
		})
	}
}

// image-rs asks the podVM's mirror only when the pod's initdata names it:
// a cached image in a pod without that initdata, or with initdata naming
// another repository's mirror, comes from its registry, and plan says why.
func TestPlanCachedImageNeedsTheInitdata(t *testing.T) {
	const repo = "rayproject/ray-llm"
	layout := writeLayout(t, "docker.io/"+repo+"@"+cachedDigest)
	for _, tc := range []struct{ name, initdata, why string }{
		{"no initdata", "", "the pod has no initdata (" + initdata.Annotation + ")"},
		{"another repository's mirror", mirrorInitdata(t, "other/image"), "its initdata names no mirror " + cachemirror.Listen + "/" + repo},
		{"not gzip", base64.StdEncoding.EncodeToString([]byte("plain text")), "its initdata is not base64 of gzip data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			starts := planJSON(t, "-f", gpuPodWith(t, tc.initdata, repo+"@"+cachedDigest), "--cache", layout)
			s := starts[0]
			if img := s.phase(t, "image"); img.Route != "" || img.NATBytes == 0 {
				t.Errorf("image phase %+v: want it from its registry, through Cloud NAT", img)
			}
			notes := strings.Join(s.Notes, "\n")
			if !strings.Contains(notes, tc.why) || !strings.Contains(notes, "gcp-t4 cache initdata -annotation") {
				t.Errorf("no note saying %q and the fix:\n%s", tc.why, notes)
			}
		})
	}
}

// A directory that is not the layout cache build writes is refused,
// naming --cache and what to give it.
func TestPlanRefusesACacheThatIsNotALayout(t *testing.T) {
	pod := gpuPod(t, "rayproject/ray-llm@"+cachedDigest)
	empty := t.TempDir()
	notLayout := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notLayout, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	noNames := writeLayout(t)
	byTag := t.TempDir()
	for f, b := range map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`,
		"index.json": `{"manifests":[{"digest":"` + cachedDigest + `","annotations":{"` + cachemirror.RefNameAnnotation + `":"v1"}}]}`} {
		if err := os.WriteFile(filepath.Join(byTag, f), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for dir, why := range map[string]string{
		filepath.Join(empty, "missing"): "no such directory",
		notLayout:                       "not a directory",
		empty:                           "not an OCI image layout",
		noNames:                         "index.json names no image",
		byTag:                           `index.json names "v1"`,
	} {
		_, errOut, code := runPlan(t, "-f", pod, "--cache", dir)
		if code != 1 || !strings.Contains(errOut, "--cache "+dir+": "+why) || !strings.Contains(errOut, "gcp-t4 cache build -o DIR") {
			t.Errorf("--cache %s: exit %d, %q; want 1, naming --cache, why (%s) and the fix", dir, code, errOut, why)
		}
	}
}

// The serving example with its images in the cache (pinned by made-up
// digests: the real ones are read at build time) but no pre-unpacked
// store (one for another guest-components, say): both images are read
// from the cache disk and unpacked in the podVM, the longest (the model
// image) sets the image phase, the weights are read in place, nothing
// crosses Cloud NAT, and plan prints the start with the cache against
// the 3-minute goal, the gap and the phases that make it up. A goal it
// meets is said to be met.
func TestPlanStartupOfTheExampleWithTheCache(t *testing.T) {
	b, err := os.ReadFile(rayExample)
	if err != nil {
		t.Fatal(err)
	}
	// The images pinned as the runbook's kustomize edit set image pins
	// them (REPOSITORY@DIGEST, a tag dropped), and the pods' initdata
	// naming both repositories, as the runbook's sed writes it.
	const repo, modelRepo = "rayproject/ray-llm", "models.invalid/mistral-nemo-instruct-2407"
	modelDigest := madeUp("the model image in the cache")
	text := regexp.MustCompile(`(?m)^(\s+image: )rayproject/ray-llm(:[\w.-]+)?$`).ReplaceAllString(string(b), "${1}"+repo+"@"+cachedDigest)
	text = regexp.MustCompile(`(?m)^(\s+image: )`+regexp.QuoteMeta(modelRepo)+`$`).ReplaceAllString(text, "${1}"+modelRepo+"@"+modelDigest)
	text = regexp.MustCompile(`cc_init_data: .*`).ReplaceAllString(text, "cc_init_data: "+mirrorInitdata(t, repo, "mistral-nemo-instruct-2407"))
	if strings.Count(text, cachedDigest) != 3 || strings.Count(text, modelDigest) != 2 || !strings.Contains(text, "model_source: /mnt/model/weights") {
		t.Fatal("the example's image lines or model_source changed: update this test")
	}
	manifest := filepath.Join(t.TempDir(), "rayservice.yaml")
	if err := os.WriteFile(manifest, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	layout := writeLayout(t, "docker.io/"+repo+"@"+cachedDigest, modelRepo+"@"+modelDigest)
	args := []string{"-f", manifest, "--cache", layout, "--weights-size", "24.5GB"}
	out, _, code := runPlan(t, args...)
	if code != 1 {
		t.Fatalf("exit %d: kubelet's 2m still bounds an 8m10s unpack:\n%s", code, out)
	}
	// Rows in the table; sources and the cache's line wrapped below it
	// (matched with the lines joined).
	words := strings.Join(strings.Fields(out), " ")
	for _, re := range []string{
		`(?m)^  image +8m10s +24\.5 GB at 50 MB/s \(unpack\) via cache +size: assumption \(--image-size\)$`,
		`(?m)^  weights +0s +nothing moved \(via local\) +size: flag --weights-size$`,
		`(?m)^  total +12m50s`,
		`(?m)^  through Cloud NAT: 0\.0 GB per start of each pod`,
		`through Cloud NAT in all: 0\.0 GB`,
	} {
		if n := len(regexp.MustCompile(re).FindAllString(out, -1)); n == 0 {
			t.Errorf("no %s:\n%s", re, out)
		}
	}
	for _, re := range []string{
		`image image size \(assumption\): docs/cache.md; cache-disk rate, assumption \(--cache-read-rate\): .*; unpack rate, measured`,
		`weights weights size: flag --weights-size engine`,
		`with the cache \(--cache ` + regexp.QuoteMeta(layout) + `\): 12m50s, 14m38s without it; 9m50s over the 3m0s goal \(--cache-goal\), made up by the longest phases: image 8m10s, 24\.5 GB at 50 MB/s \(unpack\) via cache; engine 2m42s, `,
	} {
		if !regexp.MustCompile(re).MatchString(words) {
			t.Errorf("no %s:\n%s", re, out)
		}
	}
	starts := planJSON(t, append(args, "--cache-goal", "13m")...)
	for _, s := range starts {
		if s.Cache == nil || !s.Cache.Met || s.Cache.Over != "" || s.Cache.Total != "12m50s" || s.Cache.WithoutCache != "14m38s" {
			t.Errorf("%s: %+v: want the 13m goal met", s.Group, s.Cache)
		}
	}
	out, _, _ = runPlan(t, append(args, "--cache-goal", "13m")...)
	if !strings.Contains(out, "within the 13m0s goal (--cache-goal)") {
		t.Errorf("a goal met is not said to be:\n%s", out)
	}
}

// testCacheVerity is of the form cache build prints for a cache image's
// dm-verity tree, which the provider requires beside the image.
const testCacheVerity = "root=0f3a5b7c9d1e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f1a,offset=10468982784"

// Where the podVM and --cache disagree plan says so: a podVM with a cache
// disk (GCP_CACHE_IMAGE) planned without --cache, and --cache for a podVM
// that gets no cache disk.
func TestPlanNotesTheCacheDisk(t *testing.T) {
	pod := gpuPod(t, "rayproject/ray-llm@"+cachedDigest)
	out, _, _ := runPlan(t, "-f", pod, "-cache-image", "ray-cache", "-cache-verity", testCacheVerity)
	if !strings.Contains(out, "this podVM gets a cache disk (image ray-cache): give --cache DIR") {
		t.Errorf("a cache disk without --cache is not noted:\n%s", out)
	}
	out, _, _ = runPlan(t, "-f", pod, "--cache", writeLayout(t, "rayproject/ray-llm@"+cachedDigest))
	if !strings.Contains(out, "--cache: this podVM gets no cache disk") {
		t.Errorf("--cache without a cache disk is not noted:\n%s", out)
	}
	out, _, _ = runPlan(t, "-f", pod, "-cache-image", "ray-cache", "-cache-verity", testCacheVerity, "--cache", writeLayout(t, "rayproject/ray-llm@"+cachedDigest))
	if strings.Contains(out, "cache disk (image") || strings.Contains(out, "gets no cache disk") {
		t.Errorf("a cache disk modelled with --cache is noted as missing:\n%s", out)
	}
	if _, errOut, code := runPlan(t, "-f", pod, "--cache-goal", "0s"); code != 1 || !strings.Contains(errOut, "--cache-goal") {
		t.Errorf("--cache-goal 0s: exit %d, %q", code, errOut)
	}
}
