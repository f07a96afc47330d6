package plan

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
)

const (
	indexType    = "application/vnd.oci.image.index.v1+json"
	manifestType = "application/vnd.oci.image.manifest.v1+json"
)

// craft is an OCI layout written blob by blob, as a tampered cache might
// be: put stores bytes under their own digest, putAt under any name.
type craft struct {
	t   *testing.T
	dir string
}

func newCraft(t *testing.T) craft {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	return craft{t, dir}
}

func (c craft) putAt(digest string, b []byte) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")), b, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// put stores v (JSON) under its digest and returns its descriptor.
func (c craft) put(mediaType string, v any) map[string]any {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	d := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
	c.putAt(d, b)
	return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
}

// image stores a manifest of a config of cfg bytes and layers of the
// sizes given (their blobs left out, as plan reads sizes only).
func (c craft) image(cfg int64, layers ...int64) map[string]any {
	var ls []any
	for i, n := range layers {
		ls = append(ls, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": madeUp(fmt.Sprint("layer", i, n)), "size": n})
	}
	return c.put(manifestType, map[string]any{"schemaVersion": 2, "mediaType": manifestType,
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": madeUp(fmt.Sprint("config", cfg)), "size": cfg},
		"layers": ls})
}

func (c craft) index(children ...map[string]any) map[string]any {
	ms := []any{}
	for _, ch := range children {
		ms = append(ms, ch)
	}
	return c.put(indexType, map[string]any{"schemaVersion": 2, "mediaType": indexType, "manifests": ms})
}

// name writes index.json naming top as repo@its digest, and returns the
// layout's directory.
func (c craft) name(repo string, top map[string]any) string {
	c.t.Helper()
	top["annotations"] = map[string]string{cachemirror.RefNameAnnotation: repo + "@" + top["digest"].(string)}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{top}})
	for f, b := range map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "index.json": idx} {
		if err := os.WriteFile(filepath.Join(c.dir, f), b, 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
	return c.dir
}

// A layout as cache build writes it (an index, its platform's manifest,
// and another platform's it does not hold; here one manifest listed
// twice besides) still gives the pull's size: config and layers.
func TestPlanReadsAGoodCache(t *testing.T) {
	c := newCraft(t)
	img := c.image(1000, 20000, 300000)
	absent := map[string]any{"mediaType": manifestType, "digest": madeUp("arm64"), "size": 500}
	dir := c.name("docker.io/team/app", c.index(absent, img, img))
	got, err := readCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Images) != 1 || got.Images[0].Bytes != 321000 {
		t.Fatalf("read %+v, want one image of 321000 bytes", got.Images)
	}
}

// A crafted layout is refused, not followed: each error names --cache,
// the descriptors from index.json down to the bad one, why, and the fix.
func TestPlanRefusesACraftedCache(t *testing.T) {
	type built struct{ dir, why, names string }
	for _, tc := range []struct {
		name  string
		build func(c craft) built
	}{
		{"an index that lists itself", func(c craft) built {
			// No blob holds its own digest, so the digest check is what
			// stops a self-listing index before the loop it would make.
			self := madeUp("an index that lists itself")
			body := []byte(`{"schemaVersion":2,"mediaType":"` + indexType + `","manifests":[{"mediaType":"` + indexType + `","digest":"` + self + `","size":200}]}`)
			c.putAt(self, body)
			top := map[string]any{"mediaType": indexType, "digest": self, "size": len(body)}
			return built{c.name("docker.io/team/app", top), "hash to", self}
		}},
		{"a digest with ../", func(c craft) built {
			outside := filepath.Join(filepath.Dir(c.dir), "outside")
			if err := os.WriteFile(outside, []byte(`{"layers":[{"digest":"`+madeUp("x")+`","size":7}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			escape := map[string]any{"mediaType": manifestType, "digest": "sha256:../../../outside", "size": 44}
			return built{c.name("docker.io/team/app", c.index(escape)), "is not sha256:", `"sha256:../../../outside"`}
		}},
		{"another algorithm", func(c craft) built {
			other := map[string]any{"mediaType": manifestType, "digest": "sha512:" + strings.Repeat("ab", 64), "size": 44}
			return built{c.name("docker.io/team/app", c.index(other)), "is not sha256:", "sha512:"}
		}},
		{"a blob that is not its digest", func(c craft) built {
			img := c.image(1000, 2000)
			c.putAt(img["digest"].(string), []byte(strings.Repeat(" ", int(img["size"].(int)))))
			return built{c.name("docker.io/team/app", c.index(img)), "hash to", img["digest"].(string)}
		}},
		{"a size that is not the blob's", func(c craft) built {
			img := c.image(1000, 2000)
			img["size"] = img["size"].(int) - 1
			return built{c.name("docker.io/team/app", c.index(img)), "more bytes than the descriptor's size", img["digest"].(string)}
		}},
		{"an oversize manifest", func(c craft) built {
			img := c.image(1000, 2000)
			img["size"] = 5 << 20
			return built{c.name("docker.io/team/app", c.index(img)), "want 1 to 4194304 bytes", img["digest"].(string)}
		}},
		{"indexes nested too deep", func(c craft) built {
			d := c.image(1000, 2000)
			for range 5 {
				d = c.index(d)
			}
			return built{c.name("docker.io/team/app", d), "nested over", d["digest"].(string)}
		}},
		{"a layer digest with ../", func(c craft) built {
			m := c.put(manifestType, map[string]any{"schemaVersion": 2, "mediaType": manifestType,
				"config": map[string]any{"digest": madeUp("cfg"), "size": 10},
				"layers": []any{map[string]any{"digest": "sha256:../index.json", "size": 10}}})
			return built{c.name("docker.io/team/app", m), "is not sha256:", `"sha256:../index.json"`}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.build(newCraft(t))
			_, err := readCache(b.dir)
			if err == nil {
				t.Fatalf("%s: read, want it refused", tc.name)
			}
			msg := err.Error()
			for _, want := range []string{"--cache " + b.dir, "index.json -> ", b.names, b.why, "gcp-t4 cache build"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
		})
	}
}

// On the command line: the refusal on stderr and exit 1, as for any
// --cache that is not a cache.
func TestPlanCommandRefusesACraftedCache(t *testing.T) {
	c := newCraft(t)
	img := c.image(1000, 2000)
	c.putAt(img["digest"].(string), []byte(strings.Repeat(" ", int(img["size"].(int)))))
	dir := c.name("docker.io/rayproject/ray-llm", c.index(img))
	_, errOut, code := runPlan(t, "-f", gpuPod(t, "rayproject/ray-llm@"+cachedDigest), "--cache", dir)
	if code != 1 || !strings.Contains(errOut, "--cache "+dir) || !strings.Contains(errOut, "hash to") {
		t.Errorf("exit %d, %q; want 1 and the refusal", code, errOut)
	}
}
