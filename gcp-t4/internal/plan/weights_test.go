package plan_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachebuild"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// weightsService is a RayService whose one GPU pod reads its model at a
// local path from a model image run beside it (docs/cache.md, "Weights").
func weightsService(t *testing.T, modelImage, initdata string) string {
	t.Helper()
	y := fmt.Sprintf(`apiVersion: ray.io/v1
kind: RayService
metadata:
  name: local-weights
  namespace: default
spec:
  serveConfigV2: |
    applications:
      - name: m
        import_path: ray.serve.llm:build_openai_app
        args:
          llm_configs:
            - model_loading_config:
                model_id: m
                model_source: /mnt/model/weights
  rayClusterConfig:
    headGroupSpec:
      rayStartParams: {}
      template:
        metadata:
          annotations:
            io.katacontainers.config.hypervisor.cc_init_data: %s
        spec:
          runtimeClassName: kata-remote
          shareProcessNamespace: true
          initContainers:
            - name: model
              image: %s
              restartPolicy: Always
          containers:
            - name: ray-head
              image: rayproject/ray-llm:2.52.0-py311-cu128
              resources:
                limits: {cpu: "6", memory: 24Gi, nvidia.com/gpu: 1}
`, initdata, modelImage)
	p := filepath.Join(t.TempDir(), "rayservice.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// weightsStart is what -o json says of one group's start.
type weightsStart struct {
	Start struct {
		Phases []struct {
			ID       string `json:"id"`
			Took     string `json:"took"`
			Bytes    int64  `json:"bytes"`
			Rate     string `json:"rate"`
			Route    string `json:"route"`
			NATBytes int64  `json:"natBytes"`
		} `json:"phases"`
		NATBytes int64 `json:"natBytes"`
	} `json:"start"`
	Notes []string `json:"notes"`
}

func weightsPlan(t *testing.T, args ...string) []weightsStart {
	t.Helper()
	var out, errOut bytes.Buffer
	code := plan.Main(context.Background(), append(args, "-o", "json"), &out, &errOut, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if code != 0 && code != 1 {
		t.Fatalf("plan %v: exit %d: %s", args, code, errOut.String())
	}
	var doc struct {
		Startups []weightsStart `json:"startups"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return doc.Startups
}

// A model_source that is a local path downloads nothing: the weights
// phase moves no byte and nothing of it crosses Cloud NAT. With the cache
// layout holding the pod's model image (gcp-t4 cache model's, pre-unpacked)
// plan reads the weights' size from the image's label, pulls the image as
// an overlay mount, and has the engine read the weights from the cache
// disk; without the layout it asks for --weights-size.
func TestPlanReadsWeightsInPlace(t *testing.T) {
	clearProviderEnv(t)
	holder := modelcarHolder(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, n := range map[string]int{"config.json": 20, "model-00001-of-00001.safetensors": 6000} {
		if err := os.WriteFile(filepath.Join(dir, f), bytes.Repeat([]byte{'x'}, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, sum, err := cachebuild.ModelImage(dir, cachebuild.ModelOptions{Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	tagged, _ := name.ParseReference(host + "/models/tiny:v1")
	if err := remote.Write(tagged, img); err != nil {
		t.Fatal(err)
	}
	ref := host + "/models/tiny@" + sum.Manifest.String()
	layout := filepath.Join(t.TempDir(), "cache")
	if _, err := cachebuild.Build(context.Background(), layout, []string{ref}, cachebuild.Options{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}); err != nil {
		t.Fatal(err)
	}
	var ann, annErr bytes.Buffer
	if code := cachebuild.Main(context.Background(), []string{"initdata", "-layout", layout, "-annotation"}, &ann, &annErr, nil); code != 0 {
		t.Fatalf("cache initdata: %s", annErr.String())
	}
	manifest := weightsService(t, ref, strings.TrimSpace(ann.String()))

	starts := weightsPlan(t, "-f", manifest, "--cache", layout)
	if len(starts) != 1 {
		t.Fatalf("starts: %+v", starts)
	}
	s := starts[0]
	phase := map[string]int{}
	for i, p := range s.Start.Phases {
		phase[p.ID] = i
	}
	w, e := s.Start.Phases[phase["weights"]], s.Start.Phases[phase["engine"]]
	if w.Route != startup.RouteLocal || w.Bytes != 0 || w.NATBytes != 0 || w.Took != "0s" {
		t.Errorf("weights: %+v, want nothing moved via local", w)
	}
	if e.Route != startup.RouteCache || e.Bytes != sum.Bytes || e.Rate != "cache-disk" {
		t.Errorf("engine: %+v, want the model image's %d bytes read from the cache disk", e, sum.Bytes)
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{
		"model /mnt/model/weights: a local path, read where it lies",
		"GB of weights in model image " + ref,
		"read by the engine from the cache disk at the cache-disk rate (--cache-read-rate)",
		"image " + ref + ": nothing to pull, in the cache's pre-unpacked store",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("no note %q:\n%s", want, notes)
		}
	}
	// The Ray image is by tag and not in the cache: it is the only
	// bytes through Cloud NAT, none of them the weights'.
	if s.Start.NATBytes != 10_000_000_000 {
		t.Errorf("NAT bytes %d, want the Ray image's 10 GB only", s.Start.NATBytes)
	}

	// Without the layout: the path is still local, its size unknown.
	starts = weightsPlan(t, "-f", manifest)
	notes = strings.Join(starts[0].Notes, "\n")
	if !strings.Contains(notes, "give its size with --weights-size (or --cache with the layout holding its model image)") {
		t.Errorf("no ask for the weights' size:\n%s", notes)
	}
	for _, p := range starts[0].Start.Phases {
		if p.ID == "weights" && (p.Route != startup.RouteLocal || p.NATBytes != 0) {
			t.Errorf("weights without the layout: %+v", p)
		}
		if p.ID == "engine" && p.Route != "" {
			t.Errorf("engine without the layout reads from %q, want the podVM's own disk", p.Route)
		}
	}
	// --weights-size gives it; the engine reads it from the podVM's disk.
	starts = weightsPlan(t, "-f", manifest, "--weights-size", "24.5GB")
	for _, p := range starts[0].Start.Phases {
		if p.ID == "engine" && (p.Bytes != 24_500_000_000 || p.Rate != "disk") {
			t.Errorf("engine with --weights-size: %+v", p)
		}
	}
}
