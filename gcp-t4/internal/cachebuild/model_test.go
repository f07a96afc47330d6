package cachebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
	"github.com/caa-gcp-t4/gcp-t4/internal/modelcar"
)

var holderOnce struct {
	sync.Once
	path string
	err  error
	out  []byte
}

// holder is cmd/modelcar as make build builds it: static, linux/amd64.
func holder(t *testing.T) string {
	t.Helper()
	holderOnce.Do(func() {
		dir, err := os.MkdirTemp("", "modelcar-holder")
		if err != nil {
			holderOnce.err = err
			return
		}
		holderOnce.path = filepath.Join(dir, "modelcar")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", holderOnce.path, "../../cmd/modelcar")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		holderOnce.out, holderOnce.err = cmd.CombinedOutput()
	})
	if holderOnce.err != nil {
		t.Fatalf("building cmd/modelcar: %v\n%s", holderOnce.err, holderOnce.out)
	}
	return holderOnce.path
}

// modelDir writes a model as hf download --local-dir leaves it: two
// shards, its configuration, a tokenizer in a subdirectory, and the
// download's own .cache/.
func modelDir(t *testing.T, mtime time.Time) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-model")
	files := map[string][]byte{
		"config.json":                        []byte(`{"architectures":["MistralForCausalLM"]}`),
		"model-00001-of-00002.safetensors":   bytes.Repeat([]byte{1}, 5000),
		"model-00002-of-00002.safetensors":   bytes.Repeat([]byte{2}, 4096),
		"tokenizer/tokenizer.json":           []byte(`{}`),
		".cache/huggingface/download/x.lock": nil,
		".gitattributes":                     []byte("*.safetensors filter=lfs\n"),
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type tarFile struct {
	mode int64
	uid  int
	typ  byte
	body string
}

func layerFiles(t *testing.T, l v1.Layer) map[string]tarFile {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]tarFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: time %v, want the fixed %v", h.Name, h.ModTime, epoch)
		}
		out[h.Name] = tarFile{mode: h.Mode, uid: h.Uid + h.Gid, typ: h.Typeflag, body: string(b)}
	}
}

// The image holds the holder and the model's files with fixed owners,
// modes and times, the large files each in a layer, and nothing of the
// download's own; the same files give the same digest whatever their
// times, modes and the clock.
func TestModelImageIsReproducible(t *testing.T) {
	h := holder(t)
	a := modelDir(t, time.Unix(1700000000, 0))
	img, sum, err := ModelImage(a, ModelOptions{Holder: h, OwnLayer: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Files != 4 || sum.Bytes != 5000+4096+2+int64(len(`{"architectures":["MistralForCausalLM"]}`)) || sum.Layers != 4 || sum.Name != "tiny-model" {
		t.Errorf("summary %+v", sum)
	}
	if strings.Join(sum.Skipped, " ") != ".cache .gitattributes" {
		t.Errorf("skipped %v, want the download's .cache and .gitattributes", sum.Skipped)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	holderBytes, _ := os.ReadFile(h)
	want := []map[string]tarFile{
		{"modelcar": {0o555, 0, tar.TypeReg, string(holderBytes)}},
		{"models/": {0o555, 0, tar.TypeDir, ""}, "models/config.json": {0o444, 0, tar.TypeReg, `{"architectures":["MistralForCausalLM"]}`},
			"models/tokenizer/": {0o555, 0, tar.TypeDir, ""}, "models/tokenizer/tokenizer.json": {0o444, 0, tar.TypeReg, "{}"}},
		{"models/": {0o555, 0, tar.TypeDir, ""}, "models/model-00001-of-00002.safetensors": {0o444, 0, tar.TypeReg, strings.Repeat("\x01", 5000)}},
		{"models/": {0o555, 0, tar.TypeDir, ""}, "models/model-00002-of-00002.safetensors": {0o444, 0, tar.TypeReg, strings.Repeat("\x02", 4096)}},
	}
	if len(layers) != len(want) {
		t.Fatalf("%d layers, want %d", len(layers), len(want))
	}
	for i, l := range layers {
		got := layerFiles(t, l)
		if len(got) != len(want[i]) {
			t.Errorf("layer %d holds %d entries, want %d", i, len(got), len(want[i]))
		}
		for name, w := range want[i] {
			if g, ok := got[name]; !ok || g != w {
				t.Errorf("layer %d %s: %v (there: %v), want mode %o type %c", i, name, g.mode, ok, w.mode, w.typ)
			}
		}
		d, _ := l.Digest()
		id, _ := l.DiffID()
		mt, _ := l.MediaType()
		if d != id || mt != "application/vnd.oci.image.layer.v1.tar" {
			t.Errorf("layer %d: digest %s diff_id %s media type %s: want a plain tar, one hash", i, d, id, mt)
		}
	}
	cf, _ := img.ConfigFile()
	if cf.Config.User != "1000:100" || strings.Join(cf.Config.Entrypoint, " ") != "/modelcar" || cf.Config.Labels[modelcar.Label] != "tiny-model" ||
		cf.Config.Labels[modelcar.BytesLabel] != "9138" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("config %+v", cf.Config)
	}
	// Another copy: other times, modes and order of creation, and later.
	b := modelDir(t, time.Now())
	if err := os.Chmod(filepath.Join(b, "config.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, sum2, err := ModelImage(b, ModelOptions{Holder: h, OwnLayer: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Manifest != sum.Manifest {
		t.Errorf("two builds of the same files: %s and %s", sum.Manifest, sum2.Manifest)
	}
	// One byte of a shard changed: another digest.
	if err := os.WriteFile(filepath.Join(b, "model-00002-of-00002.safetensors"), append(bytes.Repeat([]byte{2}, 4095), 3), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, sum3, err := ModelImage(b, ModelOptions{Holder: h, OwnLayer: 4096}); err != nil || sum3.Manifest == sum.Manifest {
		t.Errorf("a changed shard kept the digest %s (%v)", sum3.Manifest, err)
	}
	// -exclude leaves a path out.
	if _, sum4, err := ModelImage(a, ModelOptions{Holder: h, OwnLayer: 4096, Exclude: []string{"model-00002-of-*"}}); err != nil || sum4.Files != 3 || sum4.Layers != 3 {
		t.Errorf("-exclude: %+v %v", sum4, err)
	}
}

func TestModelImageRefuses(t *testing.T) {
	h := holder(t)
	script := filepath.Join(t.TempDir(), "modelcar")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep infinity\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dynamic := filepath.Join(t.TempDir(), "dyn")
	if out, err := exec.Command("go", "build", "-ldflags=-linkmode=external", "-o", dynamic, "../../cmd/modelcar").CombinedOutput(); err != nil {
		t.Fatalf("a dynamic build: %v\n%s", err, out)
	}
	arm := filepath.Join(t.TempDir(), "arm")
	cmd := exec.Command("go", "build", "-o", arm, "../../cmd/modelcar")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH=arm64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("an arm64 build: %v\n%s", err, out)
	}
	withLinkedDir := modelDir(t, time.Now())
	if err := os.Symlink(t.TempDir(), filepath.Join(withLinkedDir, "linked")); err != nil {
		t.Fatal(err)
	}
	withFIFO := modelDir(t, time.Now())
	if err := syscall.Mkfifo(filepath.Join(withFIFO, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	onlyHidden := filepath.Join(t.TempDir(), "m")
	if err := os.MkdirAll(filepath.Join(onlyHidden, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := modelDir(t, time.Now())
	for name, tc := range map[string]struct {
		dir, holder, want string
	}{
		"a script holder":   {good, script, "make build writes bin/modelcar"},
		"a dynamic holder":  {good, dynamic, "dynamically linked"},
		"an arm64 holder":   {good, arm, "not a linux/amd64 executable"},
		"no holder":         {good, filepath.Join(t.TempDir(), "none"), "no such file"},
		"no directory":      {filepath.Join(t.TempDir(), "none"), h, "not a directory"},
		"a linked dir":      {withLinkedDir, h, "linked is not a regular file"},
		"a fifo":            {withFIFO, h, "pipe is not a regular file"},
		"only hidden files": {onlyHidden, h, "holds no file of a model"},
	} {
		if _, _, err := ModelImage(tc.dir, ModelOptions{Holder: tc.holder}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// The command pushes the image and prints its digest; cache build then
// takes it like any image, and its pre-unpacked store holds the model's
// files where image-rs will find them: the path a podVM reads the
// weights in place from.
func TestCacheModelThroughCacheBuild(t *testing.T) {
	h := holder(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := modelDir(t, time.Now())
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"model", "-dir", dir, "-holder", h, "-push", host + "/models/tiny-model:v1"}, &out, &errb, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	ref := strings.TrimSpace(out.String())
	if !strings.HasPrefix(ref, host+"/models/tiny-model@sha256:") {
		t.Fatalf("printed %q, want the pushed repository by digest", ref)
	}
	for _, want := range []string{"hashing the files of", "gcp-t4 cache model: pushed ", "left out: .cache", "model tiny-model: 4 files, 0.0 GB, in 2 layers"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	cache := filepath.Join(t.TempDir(), "cache")
	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), []string{"build", "-o", cache, ref}, &out, &errb, nil); code != 0 {
		t.Fatalf("cache build: exit %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "not pre-unpacked") {
		t.Errorf("the model is not in the store:\n%s", out.String())
	}
	man, entries, err := imagestore.Entries(cache)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, l := range man.Layers {
		for _, e := range entries[l.Index] {
			paths = append(paths, e.Path)
		}
	}
	joined := strings.Join(paths, " ")
	for _, p := range []string{"modelcar", "models/config.json", "models/model-00001-of-00002.safetensors", "models/tokenizer/tokenizer.json"} {
		if !strings.Contains(joined, p) {
			t.Errorf("the store lacks %s: %s", p, joined)
		}
	}
	// The layout's config still names it a model, for plan.
	p, err := layout.FromPath(cache)
	if err != nil {
		t.Fatal(err)
	}
	ii, _ := p.ImageIndex()
	im, _ := ii.IndexManifest()
	if len(im.Manifests) != 1 {
		t.Fatalf("index: %+v", im)
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if cf, _ := img.ConfigFile(); cf.Config.Labels[modelcar.Label] != "tiny-model" {
		t.Errorf("labels in the layout: %v", cf.Config.Labels)
	}
	for _, args := range [][]string{
		{"model", "-dir", dir},
		{"model", "-push", host + "/m"},
		{"model", "-dir", dir, "-push", host + "/m@sha256:" + strings.Repeat("0", 64)},
		{"model", "-dir", dir, "-push", host + "/m", "extra"},
		{"model", "-dir", dir, "-push", host + "/m", "-exclude", "["},
	} {
		out.Reset()
		errb.Reset()
		if code := Main(context.Background(), args, &out, &errb, nil); code != 2 {
			t.Errorf("%v: exit %d, want 2 (misuse): %s", args, code, errb.String())
		}
	}
}
