package imagestore

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// file is one tar entry of a test layer.
type file struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
}

// layer makes an uncompressed layer tar of files, with its diff_id.
func layer(t testing.TB, files []file) Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: f.mode, Uid: f.uid, Gid: f.uid, Linkname: f.link,
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	s := sha256.Sum256(b)
	diff := "sha256:" + hex.EncodeToString(s[:])
	// The compressed digest is the manifest's name for the layer; the
	// store keys layer_db by it. A distinct string per layer is enough here.
	comp := sha256.Sum256(append([]byte("gz:"), b...))
	return Layer{Digest: "sha256:" + hex.EncodeToString(comp[:]), DiffID: diff, MediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
		Uncompressed: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
}

// testImage is three layers: a base, a layer that deletes a file (a
// whiteout) and makes a directory opaque, and one that adds a file.
func testImage(t testing.TB) Image {
	t.Helper()
	base := layer(t, []file{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/os-release", body: "ID=test\n"},
		{name: "etc/secret", body: "gone in layer 2\n", mode: 0o600, uid: 1000},
		{name: "opt/", typ: tar.TypeDir, mode: 0o755},
		{name: "opt/old/", typ: tar.TypeDir, mode: 0o755},
		{name: "opt/old/a", body: "hidden by the opaque dir\n"},
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/tool", body: "#!/bin/sh\n", mode: 0o4755},
		{name: "bin/sh", typ: tar.TypeSymlink, link: "tool"},
	})
	del := layer(t, []file{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/.wh.secret"},
		{name: "opt/old/", typ: tar.TypeDir, mode: 0o755},
		{name: "opt/old/.wh..wh..opq"},
		{name: "opt/old/b", body: "the only file of opt/old\n"},
	})
	top := layer(t, []file{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "app/", typ: tar.TypeDir, mode: 0o755},
		{name: "app/run", body: "serve\n", mode: 0o755},
		{name: "app/run-again", typ: tar.TypeLink, link: "/app/run"},
	})
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{base.DiffID, del.DiffID, top.DiffID}}})
	cs := sha256.Sum256(cfg)
	return Image{Reference: "example.com/app@sha256:" + strings.Repeat("a", 64), Manifest: "sha256:" + strings.Repeat("b", 64),
		ConfigDigest: "sha256:" + hex.EncodeToString(cs[:]), Config: cfg, Layers: []Layer{base, del, top}}
}

func build(t testing.TB, imgs ...Image) string {
	t.Helper()
	root := t.TempDir()
	if _, err := Write(root, root, imgs); err != nil {
		t.Fatal(err)
	}
	return root
}

func req(root string, img Image) Request {
	return Request{MountPoint: root, GuestComponents: GuestComponents, ConfigDigest: img.ConfigDigest,
		WorkDir: filepath.Join(root, "work"), Bundle: filepath.Join(root, "bundle")}
}

// A store holds what image-rs at the pin loads: meta_store.json with its
// three maps, image_db keyed by config digest, layer_db by compressed
// digest, layer_metas in the manifest's order with image-rs's field names,
// and store_paths that are the layers' directories named 0, 1, 2.
func TestWriteMetaStore(t *testing.T) {
	img := testImage(t)
	root := build(t, img)
	b, err := os.ReadFile(filepath.Join(root, StoreDir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var ms map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &ms); err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms["image_db"] == nil || ms["layer_db"] == nil || ms["snapshot_db"] == nil {
		t.Fatalf("meta_store.json's top-level keys: %s", b)
	}
	var im struct {
		ID, Digest, Reference string
		ImageConfig           json.RawMessage `json:"image_config"`
		Signed                *bool
		LayerMetas            []map[string]any `json:"layer_metas"`
	}
	if err := json.Unmarshal(ms["image_db"][img.ConfigDigest], &im); err != nil || im.ID != img.ConfigDigest {
		t.Fatalf("image_db[%s]: %v %+v", img.ConfigDigest, err, im)
	}
	if im.Digest != img.Manifest || im.Reference != img.Reference || im.Signed == nil || *im.Signed || !bytes.Equal(im.ImageConfig, img.Config) {
		t.Errorf("image meta: %+v", im)
	}
	if len(im.LayerMetas) != 3 {
		t.Fatalf("layer_metas: %v", im.LayerMetas)
	}
	for i, lm := range im.LayerMetas {
		want := map[string]any{"decoder": "Gzip", "encrypted": false, "compressed_digest": img.Layers[i].Digest,
			"uncompressed_digest": img.Layers[i].DiffID, "store_path": filepath.Join(root, StoreDir, "layers", strconv.Itoa(i))}
		if fmt.Sprint(lm) != fmt.Sprint(want) {
			t.Errorf("layer_metas[%d] = %v, want %v", i, lm, want)
		}
		if string(ms["layer_db"][img.Layers[i].Digest]) == "" {
			t.Errorf("layer_db has no entry for %s", img.Layers[i].Digest)
		}
	}
	// The same image gives the same bytes: the disk is reproducible.
	again := build(t, img)
	for _, f := range []string{MetaFile, "entries/0.json", "entries/1.json", "entries/2.json"} {
		a, _ := os.ReadFile(filepath.Join(root, StoreDir, f))
		c, _ := os.ReadFile(filepath.Join(again, StoreDir, f))
		if f != MetaFile && !bytes.Equal(a, c) {
			t.Errorf("%s differs between two writes of the same image", f)
		}
	}
	m1, _ := os.ReadFile(filepath.Join(root, StoreDir, ManifestFile))
	var man Manifest
	if err := json.Unmarshal(m1, &man); err != nil || man.GuestComponents != GuestComponents || len(man.Layers) != 3 {
		t.Errorf("manifest: %v %+v", err, man)
	}
}

// Whiteouts are unpacked as image-rs does: the `.wh.` entries are not
// written, a deletion becomes a whiteout entry at the deleted name, the
// opaque marker marks its directory, and a hard link's absolute target is
// taken inside the layer.
func TestUnpackWhiteouts(t *testing.T) {
	root := build(t, testImage(t))
	_, all, err := Entries(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range all[1] {
		got[e.Path] = e
	}
	if e := got["etc/secret"]; e.Type != TypeWhiteout || e.Mode != 0 {
		t.Errorf("etc/secret in layer 1: %+v, want a whiteout of mode 0", e)
	}
	if !got["opt/old"].Opaque || got["etc"].Opaque {
		t.Errorf("opaque marks: opt/old %v, etc %v", got["opt/old"].Opaque, got["etc"].Opaque)
	}
	for _, p := range []string{"etc/.wh.secret", "opt/old/.wh..wh..opq"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is in the entry list", p)
		}
		if _, err := os.Lstat(filepath.Join(root, StoreDir, "layers/1", p)); err == nil {
			t.Errorf("%s was written into the layer", p)
		}
	}
	var base, top = map[string]Entry{}, map[string]Entry{}
	for _, e := range all[0] {
		base[e.Path] = e
	}
	for _, e := range all[2] {
		top[e.Path] = e
	}
	if e := base["bin/tool"]; e.Mode != 0o4755 || base["etc/secret"].UID != 1000 {
		t.Errorf("modes and owners from the headers: bin/tool %+v, etc/secret %+v", e, base["etc/secret"])
	}
	if e := top["app/run-again"]; e.Type != TypeHardlink || e.Link != "app/run" {
		t.Errorf("hard link: %+v", e)
	}
	a, _ := os.Stat(filepath.Join(root, StoreDir, "layers/2/app/run"))
	b, _ := os.Stat(filepath.Join(root, StoreDir, "layers/2/app/run-again"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("app/run-again is not a hard link of app/run")
	}
}

// A lookup of a stored image is a hit whose mount is image-rs's: the
// layers' store_paths last first as lowerdirs, upper and work directories
// under work_dir/overlay, onto bundle/rootfs.
func TestLookupHit(t *testing.T) {
	img := testImage(t)
	root := build(t, img)
	r := Lookup(req(root, img))
	if !r.Hit {
		t.Fatalf("miss: %s: %s", r.Miss, r.Detail)
	}
	l := filepath.Join(root, StoreDir, "layers")
	want := "lowerdir=" + l + "/2:" + l + "/1:" + l + "/0,upperdir=" + r.Mount.Upper + ",workdir=" + r.Mount.Work
	if r.Mount.Options != want || r.Mount.Target != filepath.Join(root, "bundle", "rootfs") || r.Mount.FSType != "overlay" {
		t.Errorf("mount %+v\nwant options %s", r.Mount, want)
	}
	if !strings.HasPrefix(r.Mount.Upper, filepath.Join(root, "work", "overlay")+"/") || filepath.Base(r.Mount.Upper) != "upperdir" {
		t.Errorf("upperdir %s is not under work_dir/overlay", r.Mount.Upper)
	}
	if err := Verify(context.Background(), root, false); err != nil {
		t.Errorf("Verify of a store as written: %v", err)
	}
}

// Each reason a lookup misses, with what makes it.
func TestLookupMisses(t *testing.T) {
	img := testImage(t)
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, root string, r *Request)
		want  Miss
	}{
		{"no store", func(t *testing.T, root string, _ *Request) { rm(t, root, "") }, MissNoStore},
		{"another config digest", func(_ *testing.T, _ string, r *Request) { r.ConfigDigest = "sha256:" + strings.Repeat("0", 64) }, MissConfigDigest},
		{"another guest-components", func(_ *testing.T, _ string, r *Request) { r.GuestComponents = strings.Repeat("1", 40) }, MissGuestComponents},
		{"a layer missing", func(t *testing.T, root string, _ *Request) { rm(t, root, "layers/1") }, MissLayer},
		{"half-written: no manifest", func(t *testing.T, root string, _ *Request) { rm(t, root, ManifestFile) }, MissHalfWritten},
		{"half-written: no meta_store.json", func(t *testing.T, root string, _ *Request) { rm(t, root, MetaFile) }, MissHalfWritten},
		{"mounted elsewhere", func(t *testing.T, root string, r *Request) {
			moved := filepath.Join(t.TempDir(), "cache")
			if err := os.Rename(root, moved); err != nil {
				t.Fatal(err)
			}
			r.MountPoint = moved
		}, MissMoved},
		{"meta_store.json changed", func(t *testing.T, root string, _ *Request) { flip(t, filepath.Join(root, StoreDir, MetaFile), 10) }, MissTampered},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := build(t, img)
			r := req(root, img)
			c.spoil(t, root, &r)
			got := Lookup(r)
			if got.Hit || got.Miss != c.want || got.Detail == "" {
				t.Errorf("Lookup = %+v, want a miss %s with its detail", got, c.want)
			}
		})
	}
}

// Check is Lookup's store checks for every image at once: a whole store
// gives its meta_store.json as written, and the misses that need no config
// digest are the same as Lookup's.
func TestCheckWholeStore(t *testing.T) {
	img := testImage(t)
	root := build(t, img)
	c, r := Check(root, GuestComponents)
	if !r.Hit {
		t.Fatalf("Check of a store as written: %s: %s", r.Miss, r.Detail)
	}
	b, err := os.ReadFile(filepath.Join(root, StoreDir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.MetaStore, b) || c.Images != 1 || c.Layers != 3 || c.Bytes <= 0 {
		t.Errorf("Check = %d images, %d layers, %d bytes, meta_store.json equal: %v; want 1, 3, > 0, true", c.Images, c.Layers, c.Bytes, bytes.Equal(c.MetaStore, b))
	}
	for _, m := range []struct {
		name  string
		spoil func(t *testing.T, root string) string
		want  Miss
	}{
		{"another guest-components", func(*testing.T, string) string { return strings.Repeat("1", 40) }, MissGuestComponents},
		{"a layer missing", func(t *testing.T, root string) string { rm(t, root, "layers/2"); return GuestComponents }, MissLayer},
		{"meta_store.json changed", func(t *testing.T, root string) string {
			flip(t, filepath.Join(root, StoreDir, MetaFile), 10)
			return GuestComponents
		}, MissTampered},
	} {
		t.Run(m.name, func(t *testing.T) {
			root := build(t, img)
			gc := m.spoil(t, root)
			if c, r := Check(root, gc); r.Hit || r.Miss != m.want || r.Detail == "" || c.MetaStore != nil {
				t.Errorf("Check = %+v, %d bytes of meta_store.json; want a miss %s with its detail and nothing to hand on", r, len(c.MetaStore), m.want)
			}
		})
	}
}

// Verify stops, between files, when its context ends (systemd stopping
// the podVM's unit on a store of gigabytes).
func TestVerifyStopsWithItsContext(t *testing.T) {
	root := build(t, testImage(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Verify(ctx, root, false); !errors.Is(err, context.Canceled) {
		t.Errorf("Verify with a cancelled context = %v, want context.Canceled", err)
	}
}

// A store whose bytes are changed after it is written is refused by
// Verify, wherever the byte is: a layer's file, its entry list, an extra
// file in a layer.
func TestVerifyRefusesChangedBytes(t *testing.T) {
	img := testImage(t)
	for _, c := range []struct{ name, file, want string }{
		{"a layer's file", "layers/0/etc/os-release", "its bytes are"},
		{"an entry list", "entries/2.json", "entry list is"},
		{"an extra file", "layers/2/app/new", "not in its entry list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := build(t, img)
			p := filepath.Join(root, StoreDir, c.file)
			if strings.HasSuffix(c.file, "new") {
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				flip(t, p, 3)
			}
			if err := Verify(context.Background(), root, false); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Verify = %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// As root, the store applied in place and mounted as Lookup says gives the
// image's root filesystem: the base's files, the whiteout hiding the
// deleted one, the opaque directory hiding what was beneath it, the top
// layer's files, and modes from the headers.
func TestOverlayMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting an overlay, making whiteouts and setting trusted xattrs need root")
	}
	img := testImage(t)
	root := build(t, img)
	if err := Apply(root); err != nil {
		t.Skipf("this machine refuses what Apply needs (a container without CAP_MKNOD or CAP_SYS_ADMIN?): %v", err)
	}
	if err := Verify(context.Background(), root, true); err != nil {
		t.Fatalf("Verify after Apply: %v", err)
	}
	r := Lookup(req(root, img))
	if !r.Hit {
		t.Fatalf("miss: %s", r.Detail)
	}
	for _, d := range []string{r.Mount.Upper, r.Mount.Work, r.Mount.Target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount(r.Mount.Source, r.Mount.Target, r.Mount.FSType, 0, r.Mount.Options); err != nil {
		t.Skipf("this machine refuses an overlay mount: %v", err)
	}
	defer func() {
		if err := syscall.Unmount(r.Mount.Target, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	fs := r.Mount.Target
	for p, want := range map[string]string{"etc/os-release": "ID=test\n", "opt/old/b": "the only file of opt/old\n", "app/run-again": "serve\n"} {
		if b, err := os.ReadFile(filepath.Join(fs, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"etc/secret", "opt/old/a"} {
		if _, err := os.Lstat(filepath.Join(fs, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is in the rootfs (%v): its whiteout did not hide it", p, err)
		}
	}
	if st, err := os.Stat(filepath.Join(fs, "bin/tool")); err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("bin/tool: %v %v, want setuid", st, err)
	}
	// A flipped byte in a layer is then refused too.
	flip(t, filepath.Join(root, StoreDir, "layers/2/app/run"), 0)
	if err := Verify(context.Background(), root, true); err == nil {
		t.Error("Verify accepted a changed layer file")
	}
}

func rm(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, StoreDir, rel)); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, p string, at int) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || len(b) <= at {
		t.Fatalf("%s: %v (%d bytes)", p, err, len(b))
	}
	b[at] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLookupVsUnpack times, in one run, the two ways to a rootfs for
// the same image: unpacking its layers (what image-rs does on a miss, less
// the download) and looking it up in a store (a hit: the mount spec, less
// the mount itself), and reports their ratio.
func BenchmarkLookupVsUnpack(b *testing.B) {
	var layers []Layer
	body := strings.Repeat("x", 64<<10)
	for l := range 4 {
		var files []file
		for i := range 256 {
			files = append(files, file{name: fmt.Sprintf("d%d/f%d", l, i), body: body})
		}
		layers = append(layers, layer(b, files))
	}
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	img := Image{Reference: "example.com/big@sha256:" + strings.Repeat("c", 64), Manifest: "sha256:" + strings.Repeat("d", 64),
		ConfigDigest: "sha256:" + strings.Repeat("e", 64), Config: cfg, Layers: layers}
	var unpackNS, lookupNS time.Duration
	for range b.N {
		root := b.TempDir()
		t0 := time.Now()
		if _, err := Write(root, root, []Image{img}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if r := Lookup(req(root, img)); !r.Hit {
			b.Fatal(r.Detail)
		}
		t2 := time.Now()
		unpackNS += t1.Sub(t0)
		lookupNS += t2.Sub(t1)
		exec.Command("sync").Run() // keep the next round's writes from queueing behind this one's
	}
	b.ReportMetric(float64(unpackNS.Nanoseconds())/float64(b.N), "unpack-ns/op")
	b.ReportMetric(float64(lookupNS.Nanoseconds())/float64(b.N), "lookup-ns/op")
	b.ReportMetric(float64(unpackNS)/float64(lookupNS), "unpack/lookup")
	b.ReportMetric(float64(4*256*len(body))/1e6, "MB-unpacked")
}
