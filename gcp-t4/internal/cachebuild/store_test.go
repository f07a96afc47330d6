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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// tarLayer is a gzip'd layer of the given entries.
func tarLayer(t *testing.T, hdrs []tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		h.ModTime = time.Unix(1700000000, 0)
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "content of " + h.Name
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	return buf.Bytes()
}

// -disk puts the pre-unpacked store on the disk with what a directory
// built without root cannot hold: a whiteout is a character device 0/0,
// an opaque directory carries trusted.overlay.opaque=y, a setuid file
// keeps its mode and owner; meta_store.json points at the podVM's mount;
// and two builds are the same bytes.
func TestCacheDiskStore(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: apt-get install -y e2fsprogs", tool)
		}
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := empty.Image
	for _, l := range [][]tar.Header{
		{{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "etc/gone", Typeflag: tar.TypeReg, Mode: 0o644},
			{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "usr/old", Typeflag: tar.TypeReg, Mode: 0o644},
			{Name: "usr/su", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 7, Gid: 8}},
		{{Name: "etc/.wh.gone", Typeflag: tar.TypeReg}, {Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "usr/.wh..wh..opq", Typeflag: tar.TypeReg}, {Name: "usr/new", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		b := tarLayer(t, l)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	cf, _ := img.ConfigFile()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, _ = mutate.ConfigFile(img, cf)
	ref, _ := name.ParseReference(host + "/app/unpacked:v1")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	dig, _ := img.Digest()
	var disks [][]byte
	for range 2 {
		tmp := t.TempDir()
		layout, disk := filepath.Join(tmp, "cache"), filepath.Join(tmp, "cache.tar.gz")
		var out, errb bytes.Buffer
		if code := Main(context.Background(), []string{"build", "-o", layout, "-disk", disk, host + "/app/unpacked@" + dig.String()}, &out, &errb, nil); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if strings.Contains(out.String(), "not pre-unpacked") {
			t.Errorf("output: %s", out.String())
		}
		b, _ := os.ReadFile(disk)
		disks = append(disks, b)
		x := t.TempDir()
		if b, err := exec.Command("tar", "-C", x, "-xzf", disk).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v: %s", err, b)
		}
		raw := filepath.Join(x, "disk.raw")
		dbg := func(cmd string) string {
			b, err := exec.Command("debugfs", "-R", cmd, raw).Output()
			if err != nil {
				t.Fatalf("debugfs %s: %v: %s", cmd, err, b)
			}
			return string(b)
		}
		meta := dbg("cat /image-rs/meta_store.json")
		want, _ := os.ReadFile(filepath.Join(layout, "image-rs", "meta_store.json"))
		if strings.TrimSpace(meta) != strings.TrimSpace(string(want)) || !strings.Contains(meta, `"store_path":"`+cachemirror.Dir+`/image-rs/layers/1"`) {
			t.Errorf("meta_store.json on the disk:\n%s", meta)
		}
		for path, re := range map[string]string{
			"/image-rs/layers/1/etc/gone": `Type: character special\s+Mode:\s+0000\b[\s\S]*Device major/minor number: 00:00`,
			"/image-rs/layers/0/usr/su":   `Type: regular\s+Mode:\s+04755\b[\s\S]*User:\s+7\s+Group:\s+8\b`,
			"/image-rs/layers/1/usr":      `Type: directory\s+Mode:\s+0755\b`,
		} {
			if s := dbg("stat " + path); !regexp.MustCompile(re).MatchString(s) {
				t.Errorf("%s on the disk does not match %s:\n%s", path, re, s)
			}
		}
		// debugfs prints `trusted.overlay.opaque (1) = "y"` for a set
		// xattr, and only an error on stderr for one that is not.
		if s := dbg("ea_get /image-rs/layers/1/usr trusted.overlay.opaque"); strings.TrimSpace(s) != `trusted.overlay.opaque (1) = "y"` {
			t.Errorf("usr in layer 1 is not opaque on the disk: %q", s)
		}
		if b, _ := exec.Command("debugfs", "-R", "ea_get /image-rs/layers/0/usr trusted.overlay.opaque", raw).Output(); strings.Contains(string(b), `"y"`) {
			t.Errorf("usr in layer 0 is opaque on the disk: %q", b)
		}
		if r := imagestore.Lookup(imagestore.Request{MountPoint: layout, GuestComponents: imagestore.GuestComponents}); r.Miss != imagestore.MissMoved {
			t.Errorf("a store looked up away from the podVM's mount: %+v, want a miss %s", r, imagestore.MissMoved)
		}
	}
	if !bytes.Equal(disks[0], disks[1]) {
		t.Error("two builds of the same image give different disks")
	}
}
