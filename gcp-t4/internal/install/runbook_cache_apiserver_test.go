package install

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// The runbook's image cache (its step 4, <!-- cache-path -->, the model
// image with it): what runs here, on the emulator and the API server, and
// what runs elsewhere and why.
const (
	skipCachePath = "runs on the admin's machine against registries (the Hugging Face CLI, skopeo, the kustomize CLI, gcp-t4 cache, sed): gcp-t4/internal/cachebuild's TestRunbookCachePath runs it as written on a copy of the example, against a stand-in Docker Hub and Artifact Registry"
	skipUpload    = "uploads the cache's image file to Cloud Storage, which the emulator does not model: the image import that reads it runs next"
	skipCleanup   = "deletes the cache image and the model image's Artifact Registry repository in Google Cloud; the emulator models neither deletion"
	// The value is the file cache build wrote beside the image file, on
	// the admin's machine; here the variable gets a value of its form.
	skipCacheVerity = "reads the dm-verity value gcp-t4 cache build wrote beside its image file on the admin's machine: gcp-t4/internal/cachebuild's TestRunbookCachePath runs it as written and checks it is the value the build printed; here CACHE_VERITY takes a value of that form"
	skipCachePlan   = "plans with the layout the cache path wrote and the example it pinned, which this test skips: gcp-t4/internal/plan's TestRunbookStartupWithTheCacheIsPlans runs it as written on a copy of the example pinned as step 4 pins it, with a layout cache build wrote for those digests, and checks step 7's figures against it"
)

// cacheRunbookRules go before runbookRules' own (the first match handles
// a command): the cache path's `export RAY_DIGEST=$(…)` before the
// generic export, the upload before the model mirror's gcloud storage.
var cacheRunbookRules = []runbookRule{
	{re: regexp.MustCompile(`^export (RAY_DIGEST|MODEL_IMAGE|INITDATA)=|^cd |^kustomize edit |^gcp-t4 cache |^hf download |^gcloud artifacts repositories create |^gcloud auth configure-docker |^sed -i "s\|cc_init_data: `), skip: skipCachePath},
	{re: regexp.MustCompile(`^gcloud storage cp ~/\.cache/caa-gcp-t4/ray-llm-cache\.tar\.gz `), skip: skipUpload},
	{re: regexp.MustCompile(`^gcloud compute images create `), run: (*runbook).createCacheImage},
	{re: regexp.MustCompile(`^export CACHE_VERITY=\$\(cat ~/\.cache/caa-gcp-t4/ray-llm-cache\.tar\.gz\.verity\)$`), run: (*runbook).cacheVerity, unexpanded: true},
	{re: regexp.MustCompile(`^gcp-t4 install --(set|unset) GCP_CACHE_IMAGE`), run: (*runbook).setCacheImage},
	{re: regexp.MustCompile(`^gcloud compute images delete |^gcloud artifacts repositories delete `), skip: skipCleanup},
	{re: regexp.MustCompile(`^gcp-t4 plan -k \S+ --cache `), skip: skipCachePlan},
}

// createCacheImage stands in for the import of the cache's image file: the
// image it names, in the project, from the file the runbook uploaded next
// to the podVM image's.
func (r *runbook) createCacheImage(t *testing.T, args []string) {
	r.mark("createCacheImage")
	name, f := args[4], flags(args[5:])
	if f["project"] != r.fake.Project() {
		t.Fatalf("%s: images create %s in project %q, PROJECT is %q", r.section, name, f["project"], r.fake.Project())
	}
	// UPLOAD names the bucket, as BUCKET does: the URL is gs://$UPLOAD.
	if src := f["source-uri"]; strings.HasPrefix(r.vars["UPLOAD"], "gs://") || !strings.HasPrefix(src, "gs://"+r.vars["UPLOAD"]+"/") || !strings.HasSuffix(src, ".tar.gz") {
		t.Fatalf("%s: images create --source-uri=%q; want the file uploaded to the bucket UPLOAD names (%s)", r.section, src, r.vars["UPLOAD"])
	}
	r.fake.AddImage(r.fake.Project(), &computepb.Image{Name: proto.String(name), DiskSizeGb: proto.Int64(11), Status: proto.String("READY")})
	r.cacheImage = name
}

// standInVerity is of the form cache build prints: a root hash and the
// filesystem's size in bytes.
const standInVerity = "root=3f0c5b1e9a7d2c4b6e8f0a1c3e5d7b9f1a3c5e7d9b1f3a5c7e9d1b3f5a7c9e1d,offset=10737418240"

// cacheVerity sets CACHE_VERITY as the runbook's export would from the
// build's .verity file, which is on the admin's machine, not here.
func (r *runbook) cacheVerity(_ *testing.T, text []string) {
	r.mark("cacheVerity")
	r.skipped = append(r.skipped, fmt.Sprintf("  %s: %s\n    %s", r.section, text[0], skipCacheVerity))
	r.vars["CACHE_VERITY"] = standInVerity
}

// setCacheImage runs the install upgrade that names the cache image to the
// provider (or drops it), as written; everything else install set before
// must stay, and GCP_CACHE_IMAGE must be the image the import created.
func (r *runbook) setCacheImage(t *testing.T, args []string) {
	r.mark("setCacheImage")
	before := r.e.configMap(t, Namespace)
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), args[2:], &stdout, &stderr, nil)
	out := stdout.String() + stderr.String()
	t.Logf("gcp-t4 install (cache):\n%s", out)
	if code != 0 {
		t.Fatalf("%s: %v: exit %d\n%s", r.section, args, code, out)
	}
	after := r.e.configMap(t, Namespace)
	want := ""
	if flags(args[2:])["set"] != "" {
		want = r.cacheImage
		if want == "" || after["GCP_CACHE_IMAGE"] != want {
			t.Errorf("%s: GCP_CACHE_IMAGE=%q after %v; the import created %q", r.section, after["GCP_CACHE_IMAGE"], args, want)
		}
		// With the image, its dm-verity value: the podVM opens the disk
		// with nothing else (install refuses one without the other).
		if after["GCP_CACHE_VERITY"] != r.vars["CACHE_VERITY"] || r.vars["CACHE_VERITY"] == "" {
			t.Errorf("%s: GCP_CACHE_VERITY=%q after %v; the build's value is %q", r.section, after["GCP_CACHE_VERITY"], args, r.vars["CACHE_VERITY"])
		}
	} else {
		for _, k := range []string{"GCP_CACHE_IMAGE", "GCP_CACHE_VERITY"} {
			if v, ok := after[k]; ok && v != "" {
				t.Errorf("%s: %s=%q after %v", r.section, k, v, args)
			}
		}
	}
	for k, v := range before {
		if k != "GCP_CACHE_IMAGE" && k != "GCP_CACHE_VERITY" && after[k] != v {
			t.Errorf("%s: %v changed %s from %q to %q; an upgrade keeps what it does not name", r.section, args, k, v, after[k])
		}
	}
}
