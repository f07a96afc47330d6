package cachestore

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// image is a one-layer linux image of a file and a directory.
func image(t *testing.T, body string) imagestore.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "app/run", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))},
	} {
		h.ModTime = time.Unix(1700000000, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(tw, body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	diff := sha256.Sum256(b)
	comp := sha256.Sum256(append([]byte("gz:"), b...))
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}}})
	cd := sha256.Sum256(cfg)
	return imagestore.Image{Reference: "example.com/app@sha256:" + strings.Repeat("a", 64), Manifest: "sha256:" + strings.Repeat("b", 64),
		ConfigDigest: "sha256:" + hex.EncodeToString(cd[:]), Config: cfg, Layers: []imagestore.Layer{{
			Digest: "sha256:" + hex.EncodeToString(comp[:]), DiffID: "sha256:" + hex.EncodeToString(diff[:]),
			MediaType:    "application/vnd.oci.image.layer.v1.tar+gzip",
			Uncompressed: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		}}}
}

// disk is a mounted cache disk stand-in holding a store of two images, and
// an empty work_dir parent; the store's store_paths are beneath its path,
// as they are beneath /run/caa-gcp-t4/cache on the podVM.
func disk(t *testing.T) (Config, []imagestore.Image) {
	t.Helper()
	root := t.TempDir()
	imgs := []imagestore.Image{image(t, "serve\n"), image(t, "serve again\n")}
	if _, err := imagestore.Write(root, root, imgs); err != nil {
		t.Fatal(err)
	}
	return Config{Dir: root, WorkDir: filepath.Join(t.TempDir(), "image"), GuestComponents: imagestore.GuestComponents}, imgs
}

// A store that passes every check: meta_store.json in image-rs's work_dir,
// the store's own bytes, each image under its config digest with its
// layer's store_path the layer's directory on the disk, and a report that
// says so.
func TestLoadHandsAGoodStoreOn(t *testing.T) {
	cfg, imgs := disk(t)
	rep, err := Load(context.Background(), cfg)
	if err != nil || rep.State != "in-use" || rep.Miss != "" {
		t.Fatalf("Load = %+v, %v; want in-use", rep, err)
	}
	got, err := os.ReadFile(filepath.Join(cfg.WorkDir, imagestore.MetaFile))
	if err != nil {
		t.Fatalf("no meta_store.json in the work_dir: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(cfg.Dir, imagestore.StoreDir, imagestore.MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the work_dir's meta_store.json differs from the store's")
	}
	var ms imagestore.MetaStore
	if err := json.Unmarshal(got, &ms); err != nil {
		t.Fatal(err)
	}
	for i, img := range imgs {
		im, ok := ms.ImageDB[img.ConfigDigest]
		if !ok || len(im.LayerMetas) != 1 {
			t.Fatalf("image %d: no image_db entry with one layer under its config digest: %+v", i, im)
		}
		sp := im.LayerMetas[0].StorePath
		if !strings.HasPrefix(sp, filepath.Join(cfg.Dir, imagestore.StoreDir, imagestore.LayersDir)+"/") {
			t.Errorf("image %d: store_path %s is not beneath the disk's %s/%s", i, sp, imagestore.StoreDir, imagestore.LayersDir)
		}
		if b, err := os.ReadFile(filepath.Join(sp, "app", "run")); err != nil || !strings.HasPrefix(string(b), "serve") {
			t.Errorf("image %d: %s/app/run: %q, %v", i, sp, b, err)
		}
	}
	if rep.Images != 2 || rep.Layers != 2 || rep.MetaStore != filepath.Join(cfg.WorkDir, imagestore.MetaFile) {
		t.Errorf("report %+v: want 2 images, 2 layers, meta_store %s", rep, filepath.Join(cfg.WorkDir, imagestore.MetaFile))
	}
	if ents, _ := os.ReadDir(cfg.WorkDir); len(ents) != 1 {
		t.Errorf("the work_dir holds %d entries, want meta_store.json alone (no temporary file left)", len(ents))
	}
}

// Every failure leaves the work_dir as it was (no meta_store.json, no
// temporary file) and gives the reason.
func TestLoadLeavesTheWorkDirOnEveryFailure(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, cfg *Config) context.Context
		miss  imagestore.Miss
		says  string
	}{
		{"no store on the disk", func(t *testing.T, cfg *Config) context.Context {
			rm(t, cfg.Dir, "")
			return context.Background()
		}, imagestore.MissNoStore, "no image-rs/gcp-t4-store.json"},
		{"another guest-components", func(_ *testing.T, cfg *Config) context.Context {
			cfg.GuestComponents = strings.Repeat("1", 40)
			return context.Background()
		}, imagestore.MissGuestComponents, "this podVM's image-rs is 111111111111"},
		{"half-written", func(t *testing.T, cfg *Config) context.Context {
			rm(t, cfg.Dir, imagestore.ManifestFile)
			return context.Background()
		}, imagestore.MissHalfWritten, "the build did not finish"},
		{"mounted elsewhere", func(t *testing.T, cfg *Config) context.Context {
			moved := filepath.Join(t.TempDir(), "cache")
			if err := os.Rename(cfg.Dir, moved); err != nil {
				t.Fatal(err)
			}
			cfg.Dir = moved
			return context.Background()
		}, imagestore.MissMoved, "store_paths are beneath"},
		{"a layer missing", func(t *testing.T, cfg *Config) context.Context {
			rm(t, cfg.Dir, "layers/1")
			return context.Background()
		}, imagestore.MissLayer, "is not there"},
		{"meta_store.json changed", func(t *testing.T, cfg *Config) context.Context {
			flip(t, filepath.Join(cfg.Dir, imagestore.StoreDir, imagestore.MetaFile))
			return context.Background()
		}, imagestore.MissTampered, "meta_store.json is sha256:"},
		{"a layer's file changed", func(t *testing.T, cfg *Config) context.Context {
			flip(t, filepath.Join(cfg.Dir, imagestore.StoreDir, "layers/0/app/run"))
			return context.Background()
		}, imagestore.MissTampered, "its bytes are sha256:"},
		{"stopped", func(_ *testing.T, _ *Config) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, MissStopped, "stopped before the whole store was read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, _ := disk(t)
			ctx := c.spoil(t, &cfg)
			rep, err := Load(ctx, cfg)
			if err != nil || rep.State != "unused" || rep.Miss != c.miss || !strings.Contains(rep.Reason, c.says) || rep.Fallback == "" {
				t.Errorf("Load = %+v, %v; want unused, miss %s, a reason saying %q, the fallback", rep, err, c.miss, c.says)
			}
			if _, err := os.Lstat(cfg.WorkDir); !os.IsNotExist(err) {
				t.Errorf("the work_dir was touched: %v", err)
			}
		})
	}
}

// image-rs's own meta_store.json (CDH pulled first) is never replaced, and
// the report says so.
func TestLoadKeepsImageRsOwnMetaStore(t *testing.T) {
	cfg, _ := disk(t)
	if err := os.Mkdir(cfg.WorkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	own := []byte(`{"image_db":{},"layer_db":{},"snapshot_db":{}}`)
	p := filepath.Join(cfg.WorkDir, imagestore.MetaFile)
	if err := os.WriteFile(p, own, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Load(context.Background(), cfg)
	if err != nil || rep.State != "unused" || rep.Miss != MissWorkDirInUse {
		t.Errorf("Load = %+v, %v; want unused, %s", rep, err, MissWorkDirInUse)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, own) {
		t.Errorf("image-rs's meta_store.json was replaced")
	}
	if ents, _ := os.ReadDir(cfg.WorkDir); len(ents) != 1 {
		t.Errorf("the work_dir holds %d entries, want image-rs's file alone", len(ents))
	}
}

// A work_dir that is a link (or anything but a directory) is the podVM's
// fault: an error, nothing written through it.
func TestLoadRefusesAWorkDirThatIsALink(t *testing.T) {
	cfg, _ := disk(t)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, cfg.WorkDir); err != nil {
		t.Fatal(err)
	}
	rep, err := Load(context.Background(), cfg)
	if err == nil || rep.State != "unused" || rep.Miss != MissPodVM || !strings.Contains(rep.Reason, "not a directory") {
		t.Errorf("Load = %+v, %v; want an error and unused, %s, saying not a directory", rep, err, MissPodVM)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("written through the link: %d entries", len(ents))
	}
}

// Main: one console line with the prefix, exit 0 for a store that is not
// usable (here: none), 1 without the guest-components pin (the image
// build's fault), the reason's bytes from the disk escaped.
func TestMainConsoleLine(t *testing.T) {
	cfg, _ := disk(t)
	rm(t, cfg.Dir, "")
	pin := filepath.Join(t.TempDir(), "guest-components")
	if err := os.WriteFile(pin, []byte(imagestore.GuestComponents+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, Report, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, &out, &errb)
		line := strings.TrimSuffix(out.String(), "\n")
		var rep Report
		if strings.Count(out.String(), "\n") != 1 || !strings.HasPrefix(line, ConsolePrefix) ||
			json.Unmarshal([]byte(strings.TrimPrefix(line, ConsolePrefix)), &rep) != nil {
			t.Fatalf("stdout %q: want one %sJSON line", out.String(), ConsolePrefix)
		}
		return code, rep, errb.String()
	}
	code, rep, _ := run("-dir", cfg.Dir, "-work-dir", cfg.WorkDir, "-guest-components-file", pin)
	if code != 0 || rep.State != "unused" || rep.Miss != imagestore.MissNoStore {
		t.Errorf("no store: exit %d, %+v; want 0, unused, %s", code, rep, imagestore.MissNoStore)
	}
	if err := os.WriteFile(pin, []byte("v1.0\x1b[2J\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, rep, stderr := run("-dir", cfg.Dir, "-work-dir", cfg.WorkDir, "-guest-components-file", pin)
	if code != 1 || rep.Miss != MissPodVM || !strings.Contains(rep.Reason, "not a 40-hex commit") || strings.ContainsRune(rep.Reason, 0x1b) || !strings.Contains(stderr, "-guest-components-file") {
		t.Errorf("bad pin: exit %d, %+v, stderr %q; want 1, %s, the reason with its escape character escaped", code, rep, stderr, MissPodVM)
	}
	if _, err := os.Lstat(cfg.WorkDir); !os.IsNotExist(err) {
		t.Errorf("the work_dir was touched: %v", err)
	}
}

// A reason quoting the disk (a file name, a store_path) reaches the
// console with no control, bidi or format character left raw.
func TestConsoleLineEscapesTheDisksText(t *testing.T) {
	var out bytes.Buffer
	consoleLine(&out, Report{State: "unused", Miss: imagestore.MissTampered, Reason: "layer \"a\u202eb\x7f\x1b[2J\u0085c\" changed"})
	line := out.String()
	for _, r := range line[:len(line)-1] {
		if r < 0x20 || r >= 0x7f {
			t.Fatalf("line %q holds %U raw", line, r)
		}
	}
	if !strings.Contains(line, `\\u202e`) {
		t.Errorf("line %q does not show the bidi override escaped", line)
	}
}

func rm(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, imagestore.StoreDir, rel)); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || len(b) < 4 {
		t.Fatalf("%s: %v", p, err)
	}
	b[3] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
