package plan_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachebuild"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

// toStandIn sends Docker Hub's hosts to a stand-in registry.
type toStandIn struct{ to *url.URL }

func (r toStandIn) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == "index.docker.io" || req.URL.Host == "registry-1.docker.io" {
		req = req.Clone(req.Context())
		req.URL.Scheme, req.URL.Host, req.Host = r.to.Scheme, r.to.Host, r.to.Host
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestRunbookStartupWithTheCacheIsPlans runs the runbook's second plan
// command as written, where step 4 leaves the reader: the Ray image and
// the model image pinned by digest in the example's image/ component, both
// RayServices' initdata naming every repository of the layout, and the
// layout cache build wrote under the reader's home, both images in its
// pre-unpacked store. The images are stand-ins (a random Ray image, a
// model image made by cache model from a few bytes): on a store hit their
// size does not enter the start, and --weights-size gives the model's.
// What the runbook quotes with the cache is what plan prints.
func TestRunbookStartupWithTheCacheIsPlans(t *testing.T) {
	clearProviderEnv(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runbook-mistral-tp2.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i := strings.Index(text, "Expected start-up, from step 4's `gcp-t4 plan`")
	if i < 0 {
		t.Fatal("the runbook's start-up section is gone")
	}
	section := text[i:]
	a, b := strings.Index(section, "<!-- startup-cache -->"), strings.Index(section, "<!-- /startup-cache -->")
	if a < 0 || b < a {
		t.Fatal("the runbook's start-up section has no <!-- startup-cache --> region")
	}
	cached := section[a:b]
	ccmd := regexp.MustCompile(`(?m)^gcp-t4 plan (-[fk] \S+ --cache \S+(?: -{1,2}[a-z-]+(?:[ =][^\s-]\S*)?)*)$`).FindStringSubmatch(text)
	if ccmd == nil {
		t.Fatal("the runbook has no `gcp-t4 plan … --cache DIR` command")
	}
	work, home := t.TempDir(), t.TempDir()
	// CACHE_VERITY is step 4's export of the value cache build wrote
	// beside its image file (cachebuild's TestRunbookCachePath checks it).
	args, err := doccmd.Fields(ccmd[1], func(k string) (string, bool) {
		switch k {
		case "HOME":
			return home, true
		case "CACHE_VERITY":
			return "root=" + strings.Repeat("ab", 32) + ",offset=10737418240", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	layout := args[3]
	if !filepath.IsAbs(layout) {
		t.Fatalf("--cache %s: the runbook keeps the layout under the home, outside the checkout", layout)
	}
	if err := os.CopyFS(filepath.Join(work, "install"), os.DirFS(filepath.Join(root, "install"))); err != nil {
		t.Fatal(err)
	}

	// The registries, standing in: Docker Hub for the Ray image,
	// Artifact Registry for the model image.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tr := toStandIn{to: u}
	ray, err := random.Image(1<<16, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := ray.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if ray, err = mutate.ConfigFile(ray, cf); err != nil {
		t.Fatal(err)
	}
	rayTag, _ := name.ParseReference("rayproject/ray-llm:2.52.0-py311-cu128")
	if err := remote.Write(rayTag, ray, remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
	rayDigest, _ := ray.Digest()
	holder := modelcarHolder(t)
	model := filepath.Join(t.TempDir(), "mistral-nemo-instruct-2407")
	if err := os.MkdirAll(model, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, body := range map[string]string{"config.json": "{}", "model-00001-of-00005.safetensors": "weights"} {
		if err := os.WriteFile(filepath.Join(model, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mimg, sum, err := cachebuild.ModelImage(model, cachebuild.ModelOptions{Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	modelRepo := u.Host + "/models/mistral-nemo-instruct-2407"
	mtag, _ := name.ParseReference(modelRepo + ":2407")
	if err := remote.Write(mtag, mimg); err != nil {
		t.Fatal(err)
	}
	modelImage := modelRepo + "@" + sum.Manifest.String()
	if _, err := cachebuild.Build(context.Background(), layout, []string{"docker.io/rayproject/ray-llm@" + rayDigest.String(), modelImage},
		cachebuild.Options{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Remote: []remote.Option{remote.WithTransport(tr)}}); err != nil {
		t.Fatal(err)
	}
	// Step 4's pins (kustomize edit set image, twice) and initdata (sed).
	comp := filepath.Join(work, "install/examples/mistral-tp2/image/kustomization.yaml")
	y, err := os.ReadFile(comp)
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`(?m)^  newTag: \S+$`).ReplaceAll(y, []byte("  digest: "+rayDigest.String()))
	if bytes.Equal(pinned, y) {
		t.Fatalf("%s names no newTag for step 4 to replace with the digest", comp)
	}
	pinned = append(pinned, []byte("- name: models.invalid/mistral-nemo-instruct-2407\n  newName: "+modelRepo+"\n  digest: "+sum.Manifest.String()+"\n")...)
	if err := os.WriteFile(comp, pinned, 0o644); err != nil {
		t.Fatal(err)
	}
	var ann, annErr bytes.Buffer
	if code := cachebuild.Main(context.Background(), []string{"initdata", "-annotation", "-layout", layout}, &ann, &annErr, nil); code != 0 {
		t.Fatalf("cache initdata: %s", annErr.String())
	}
	for _, f := range []string{"rayservice.yaml", "single-podvm/rayservice.yaml"} {
		p := filepath.Join(work, "install/examples/mistral-tp2", f)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b = regexp.MustCompile(`cc_init_data: .*`).ReplaceAll(b, []byte("cc_init_data: "+strings.TrimSpace(ann.String())))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Chdir(work)
	var out, errOut bytes.Buffer
	code := plan.Main(context.Background(), args, &out, &errOut, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if code > 1 {
		t.Fatalf("plan %v: exit %d\n%s", args, code, errOut.String())
	}
	cout := out.String()
	flat := strings.Join(strings.Fields(cout), "")
	for _, im := range []string{"docker.io/rayproject/ray-llm@" + rayDigest.String(), modelImage} {
		if !strings.Contains(flat, ":nothingtopull,inthecache'spre-unpackedstore("+im+")") {
			t.Errorf("plan does not mount %s from the pre-unpacked store:\n%s", im, cout)
		}
	}
	if !strings.Contains(cout, "nothing moved (via local)") || !strings.Contains(cout, "via cache") {
		t.Errorf("plan does not read the weights in place from the cache disk:\n%s", cout)
	}
	for _, v := range regexp.MustCompile(`\b\d+h\d+m\d+s|\b\d+m\d+s\b|\d+\.\d GB`).FindAllString(cached, -1) {
		if !strings.Contains(cout, v) {
			t.Errorf("the runbook quotes %s with the cache; plan %v does not print it:\n%s", v, args, cout)
		}
	}
	// plan prints the layout as the shell gave it, the home expanded; the
	// runbook quotes it with ~, as the reader typed it.
	printed := strings.ReplaceAll(strings.Join(strings.Fields(cout), " "), home+"/", "~/")
	if line := regexp.MustCompile("`(with the cache \\(--cache [^`]*)`").FindStringSubmatch(strings.Join(strings.Fields(cached), " ")); line == nil ||
		!strings.Contains(printed, line[1]) {
		t.Errorf("the runbook's quoted cache line %v is not plan's:\n%s", line, cout)
	}
}
