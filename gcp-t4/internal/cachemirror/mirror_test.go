package cachemirror

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// get asks m for path, as image-rs would, and returns the status, body
// and what m logged.
func get(t *testing.T, m *Mirror, log *bytes.Buffer, path string) (int, []byte, string) {
	t.Helper()
	log.Reset()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.Bytes(), log.String()
}

func openMirror(t *testing.T, dir string) (*Mirror, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	m, err := Open(dir, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, &log
}

// A blob that is a symbolic link is refused, with a log line, wherever
// it points: outside the layout (any file of the podVM) or inside it
// (another blob); so is a FIFO, at once rather than after a writer that
// never comes. The blob beside them, a plain file, is served.
func TestBlobsThatAreNotPlainFilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	imgs := layoutOf(t, dir, "docker.io/team/outside", "docker.io/team/inside", "docker.io/team/fifo", "docker.io/team/plain")
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("the podVM's own file"), 0o644); err != nil {
		t.Fatal(err)
	}
	blobPath := func(d string) string { return filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")) }
	for d, target := range map[string]string{imgs[0].config: outside, imgs[1].config: blobPath(imgs[3].config)} {
		if err := os.Remove(blobPath(d)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, blobPath(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(blobPath(imgs[2].config)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(blobPath(imgs[2].config), 0o644); err != nil {
		t.Fatal(err)
	}
	m, log := openMirror(t, dir)
	for i, why := range []string{"symbolic link", "symbolic link", "not a regular file"} {
		p := "/v2/team/" + []string{"outside", "inside", "fifo"}[i] + "/blobs/" + imgs[i].config
		code, body, logged := get(t, m, log, p)
		if code != http.StatusNotFound || !strings.Contains(string(body), why) || bytes.Contains(body, []byte("podVM's own")) {
			t.Errorf("GET %s: %d %q; want 404 saying %q", p, code, body, why)
		}
		if !strings.Contains(logged, "refused a blob") || !strings.Contains(logged, imgs[i].config) || !strings.Contains(logged, why) {
			t.Errorf("GET %s logged %q; want the refusal, the digest and %q", p, logged, why)
		}
	}
	code, body, _ := get(t, m, log, "/v2/team/plain/blobs/"+imgs[3].config)
	sum := sha256.Sum256(body)
	if code != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != imgs[3].config {
		t.Errorf("GET the plain blob: %d, body sha256:%x; want 200 and %s", code, sum, imgs[3].config)
	}
}

// A link anywhere in the layout's own files (index.json, a manifest, the
// blobs directory) keeps the mirror from serving the disk at all: the
// reason names the link.
func TestALinkedLayoutIsNotServed(t *testing.T) {
	for _, c := range []struct {
		name   string
		linked func(dir string, img cached) string
	}{
		{"index.json", func(dir string, _ cached) string { return "index.json" }},
		{"a manifest", func(dir string, img cached) string {
			return filepath.Join("blobs", "sha256", strings.TrimPrefix(img.manifest, "sha256:"))
		}},
		{"the blobs directory", func(dir string, _ cached) string { return filepath.Join("blobs", "sha256") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			real := t.TempDir()
			img := layoutOf(t, real, "docker.io/team/app")[0]
			dir := t.TempDir()
			layoutOf(t, dir, "docker.io/team/app")
			rel := c.linked(dir, img)
			if err := os.RemoveAll(filepath.Join(dir, rel)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(real, rel), filepath.Join(dir, rel)); err != nil {
				t.Fatal(err)
			}
			m, err := Open(dir, slog.New(slog.DiscardHandler))
			if err == nil {
				m.Close()
				t.Fatalf("a layout whose %s is a link opened", c.name)
			}
			if !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), filepath.Base(rel)) {
				t.Errorf("error %q: want it to name %s as a symbolic link", err, rel)
			}
		})
	}
}

// Each repository is served the digests its own images name, no other:
// a pod whose initdata names one cached repository cannot read another
// cached image's manifest or blobs through it.
func TestARepositoryServesOnlyItsOwnImages(t *testing.T) {
	dir := t.TempDir()
	imgs := layoutOf(t, dir, "docker.io/team/public@sha256:"+strings.Repeat("a", 64), "quay.io/team/private:v1")
	m, log := openMirror(t, dir)
	for _, c := range []struct {
		path string
		want int
	}{
		{"/v2/team/public/manifests/" + imgs[0].manifest, 200},
		{"/v2/team/public/blobs/" + imgs[0].config, 200},
		{"/v2/team/private/manifests/" + imgs[1].manifest, 200},
		{"/v2/team/private/blobs/" + imgs[1].config, 200},
		{"/v2/team/public/manifests/" + imgs[1].manifest, 404},
		{"/v2/team/public/blobs/" + imgs[1].config, 404},
		{"/v2/team/private/blobs/" + imgs[0].manifest, 404},
	} {
		if code, body, _ := get(t, m, log, c.path); code != c.want {
			t.Errorf("GET %s: %d %q, want %d", c.path, code, body, c.want)
		}
	}
}

// The cache disk is mounted nosymfollow: the kernel follows no link on
// it, whoever reads it, besides the mirror's own refusal.
func TestTheCacheDiskIsMountedNosymfollow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("../../..", `podvm/mkosi.extra/usr/lib/systemd/system/run-caa\x2dgcp\x2dt4-cache.mount`))
	if err != nil {
		t.Fatal(err)
	}
	var opts []string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Options="); ok {
			opts = strings.Split(v, ",")
		}
	}
	for _, want := range []string{"ro", "noload", "nodev", "nosuid", "noexec", "nosymfollow"} {
		found := false
		for _, o := range opts {
			found = found || o == want
		}
		if !found {
			t.Errorf("the cache disk's mount has Options=%s, without %s", strings.Join(opts, ","), want)
		}
	}
}
