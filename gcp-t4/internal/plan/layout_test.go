// An external test: cachebuild imports plan, so only plan_test may use
// cachebuild's Build to write the layout plan reads.
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
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachebuild"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// The layout cache build writes from a registry (a multi-platform index
// and a single image, as TestMirrorServesTheCacheToARegistriesConfClient
// builds it) is what plan --cache reads: both images are pulled from the
// cache disk, each sized as the layout's manifest says (the platform
// image's config and layers, what a pull moves), and nothing crosses
// Cloud NAT.
func TestPlanReadsTheLayoutCacheBuildWrote(t *testing.T) {
	clearProviderEnv(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	img := func(layers int64) v1.Image {
		i, err := random.Image(1<<20, layers)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: img(3), Descriptor: v1.Descriptor{Platform: &amd64}},
		mutate.IndexAddendum{Add: img(3), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	ref, _ := name.ParseReference(host + "/library/cachetest:v1")
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	one := img(2)
	ref2, _ := name.ParseReference(host + "/tools/single:v1")
	if err := remote.Write(ref2, one); err != nil {
		t.Fatal(err)
	}
	index, _ := idx.Digest()
	single, _ := one.Digest()
	refs := []string{host + "/library/cachetest@" + index.String(), host + "/tools/single@" + single.String()}
	dir := filepath.Join(t.TempDir(), "cache")
	built, err := cachebuild.Build(context.Background(), dir, refs, cachebuild.Options{Platform: amd64})
	if err != nil {
		t.Fatal(err)
	}

	// The pod's initdata as gcp-t4 cache initdata writes it for this
	// layout: plan must read the generator's own output as naming the
	// podVM's mirror.
	var ann, annErr bytes.Buffer
	if code := cachebuild.Main(context.Background(), []string{"initdata", "-layout", dir, "-annotation"}, &ann, &annErr, nil); code != 0 {
		t.Fatalf("gcp-t4 cache initdata: exit %d: %s", code, annErr.String())
	}
	var pod strings.Builder
	fmt.Fprintf(&pod, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cached\n  namespace: default\n  annotations:\n    io.katacontainers.config.hypervisor.cc_init_data: %s\nspec:\n  runtimeClassName: kata-remote\n  containers:\n", strings.TrimSpace(ann.String()))
	for i, r := range refs {
		fmt.Fprintf(&pod, "    - name: c%d\n      image: %s\n      resources:\n        limits: {nvidia.com/gpu: %d}\n", i, r, 1-i)
	}
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(manifest, []byte(pod.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := plan.Main(context.Background(), []string{"-f", manifest, "--cache", dir, "-o", "json"}, &out, &errOut, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Startups []struct {
			Start struct {
				Phases []struct {
					ID    string `json:"id"`
					Bytes int64  `json:"bytes"`
					Route string `json:"route"`
				} `json:"phases"`
				NATBytes int64 `json:"natBytes"`
			} `json:"start"`
			Cache struct {
				Cached []string `json:"cached"`
			} `json:"cache"`
			Notes []string `json:"notes"`
		} `json:"startups"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Startups) != 1 {
		t.Fatalf("%v: %s", err, out.String())
	}
	s := doc.Startups[0]
	if len(s.Cache.Cached) != 2 || s.Start.NATBytes != 0 {
		t.Errorf("cached %v, NAT %d: want both images from the cache, nothing through NAT", s.Cache.Cached, s.Start.NATBytes)
	}
	for _, p := range s.Start.Phases {
		if p.ID == "image" && (p.Route != "cache" || p.Bytes != max(built[0].Bytes, built[1].Bytes)) {
			t.Errorf("image phase %+v: want the larger of %d and %d bytes, from the cache", p, built[0].Bytes, built[1].Bytes)
		}
	}
	notes := strings.Join(s.Notes, "\n")
	for _, b := range built {
		if want := fmt.Sprintf("image %s: %.1f GB (the cache layout's manifest), in the cache", b.Ref, float64(b.Bytes)/1e9); !strings.Contains(notes, want) || b.Bytes < 2<<20 {
			t.Errorf("no note %q (%d bytes):\n%s", want, b.Bytes, notes)
		}
	}
}

// An image the cache holds pre-unpacked (cache build writes the store
// for a linux image) costs nothing at the pull: the image phase takes the
// store route with 0 bytes, nothing crosses Cloud NAT, and kubelet's
// 2-minute bound on StartContainer is met; an image left out of the store
// (its config names no OS) is still read from the cache and unpacked,
// and plan says why.
func TestPlanReadsThePreUnpackedStore(t *testing.T) {
	clearProviderEnv(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := func(linux bool) v1.Image {
		i, err := random.Image(1<<20, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !linux {
			return i
		}
		cf, err := i.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", "amd64"
		if i, err = mutate.ConfigFile(i, cf); err != nil {
			t.Fatal(err)
		}
		return i
	}
	var refs []string
	for _, c := range []struct {
		repo  string
		linux bool
	}{{"stored", true}, {"unstored", false}} {
		i := img(c.linux)
		r, _ := name.ParseReference(host + "/library/" + c.repo + ":v1")
		if err := remote.Write(r, i); err != nil {
			t.Fatal(err)
		}
		d, _ := i.Digest()
		refs = append(refs, host+"/library/"+c.repo+"@"+d.String())
	}
	dir := filepath.Join(t.TempDir(), "cache")
	if _, err := cachebuild.Build(context.Background(), dir, refs, cachebuild.Options{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}); err != nil {
		t.Fatal(err)
	}
	var ann, annErr bytes.Buffer
	if code := cachebuild.Main(context.Background(), []string{"initdata", "-layout", dir, "-annotation"}, &ann, &annErr, nil); code != 0 {
		t.Fatalf("gcp-t4 cache initdata: exit %d: %s", code, annErr.String())
	}
	for _, tc := range []struct {
		ref, route string
		bytes      int64
		note       string
	}{
		{refs[0], startup.RouteStore, 0, "nothing to pull, in the cache's pre-unpacked store"},
		{refs[1], startup.RouteCache, -1, "and unpacked in the podVM: the pre-unpacked store does not hold it"},
	} {
		pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n  annotations:\n    io.katacontainers.config.hypervisor.cc_init_data: %s\nspec:\n  runtimeClassName: kata-remote\n  containers:\n    - name: c\n      image: %s\n      resources:\n        limits: {nvidia.com/gpu: 1}\n",
			strings.TrimSpace(ann.String()), tc.ref)
		manifest := filepath.Join(t.TempDir(), "pod.yaml")
		if err := os.WriteFile(manifest, []byte(pod), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := plan.Main(context.Background(), []string{"-f", manifest, "--cache", dir, "-o", "json"}, &out, &errOut, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if code != 0 && code != 1 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		var doc struct {
			Startups []struct {
				Start struct {
					Phases []struct {
						ID    string `json:"id"`
						Bytes int64  `json:"bytes"`
						Route string `json:"route"`
					} `json:"phases"`
					NATBytes  int64 `json:"natBytes"`
					Deadlines []struct {
						ID  string `json:"id"`
						Met bool   `json:"met"`
					} `json:"deadlines"`
				} `json:"start"`
				Notes []string `json:"notes"`
			} `json:"startups"`
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Startups) != 1 {
			t.Fatalf("%v: %s", err, out.String())
		}
		s := doc.Startups[0]
		for _, p := range s.Start.Phases {
			if p.ID == "image" && (p.Route != tc.route || tc.bytes >= 0 && p.Bytes != tc.bytes || tc.bytes < 0 && p.Bytes == 0) {
				t.Errorf("%s: image phase %+v, want route %s", tc.ref, p, tc.route)
			}
		}
		if s.Start.NATBytes != 0 {
			t.Errorf("%s: %d bytes through Cloud NAT", tc.ref, s.Start.NATBytes)
		}
		found := false
		for _, d := range s.Start.Deadlines {
			if d.ID == "kubelet-runtime-request" {
				found = true
				if tc.route == startup.RouteStore && !d.Met {
					t.Errorf("%s: kubelet's bound on StartContainer not met with the image pre-unpacked", tc.ref)
				}
			}
		}
		if !found {
			t.Errorf("%s: no kubelet-runtime-request deadline checked", tc.ref)
		}
		if notes := strings.Join(s.Notes, "\n"); !strings.Contains(notes, tc.note) {
			t.Errorf("%s: no note %q:\n%s", tc.ref, tc.note, notes)
		}
	}
}
