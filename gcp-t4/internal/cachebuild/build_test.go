package cachebuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
)

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// source is a registry holding a two-platform index of 3-layer images and
// a single-platform 2-layer image, as a workload's images are published.
func source(t *testing.T) (host string, index, single v1.Hash, want v1.Image, stop func()) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	host = strings.TrimPrefix(srv.URL, "http://")
	img := func(layers int64) v1.Image {
		i, err := random.Image(4096, layers)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	want = img(3)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: want, Descriptor: v1.Descriptor{Platform: &amd64}},
		mutate.IndexAddendum{Add: img(3), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	ref, err := name.ParseReference(host + "/library/cachetest:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	one := img(2)
	ref2, _ := name.ParseReference(host + "/tools/single:v1")
	if err := remote.Write(ref2, one); err != nil {
		t.Fatal(err)
	}
	index, _ = idx.Digest()
	single, _ = one.Digest()
	return host, index, single, want, srv.Close
}

// skopeoBin is the real registry client the mirror tests pull with. A
// -short run (make test-short: Go alone, no real CLI) leaves these tests
// to make test, which installs skopeo first (test/cache/deps.sh).
func skopeoBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("skopeo")
	if err != nil {
		if testing.Short() {
			t.Skip("pulls with skopeo, a real registry client; make test installs it and runs this")
		}
		t.Fatal("skopeo is missing: run test/cache/deps.sh as root (make test does), or apt-get install -y skopeo")
	}
	return bin
}

// skopeo copies ref through the mirror, reading registries.conf as
// image-rs does in the podVM: the image's registry has the mirror first.
func skopeo(t *testing.T, mirror, ref, out string) (string, error) {
	t.Helper()
	bin := skopeoBin(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	// The workload names docker.io; the podVM's mirror is tried first.
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`
[[registry]]
prefix = "docker.io/library/cachetest"
location = "docker.io/library/cachetest"

[[registry.mirror]]
location = "%s/library/cachetest"
insecure = true
`, mirror)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--registries-conf", conf, "--policy", policy, "--tmpdir", dir,
		"copy", "--override-os", "linux", "--override-arch", "amd64", "docker://"+ref, "dir:"+out)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// An image the cache does not hold comes from its own registry: the
// mirror is asked first and answers that it does not have it, and the
// client (skopeo, reading registries.conf as image-rs does) falls back to
// the image's location, as a podVM does through Cloud NAT.
func TestMirrorMissFallsBackToTheRegistry(t *testing.T) {
	skopeoBin(t)
	host, index, single, want, stop := source(t)
	defer stop()
	dir := filepath.Join(t.TempDir(), "cache")
	if _, err := Build(context.Background(), dir, []string{host + "/tools/single@" + single.String()}, Options{Platform: amd64}); err != nil {
		t.Fatal(err)
	}
	m, err := cachemirror.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{h: m, n: map[string]int{}}
	srv := httptest.NewServer(c)
	defer srv.Close()
	mirror := strings.TrimPrefix(srv.URL, "http://")
	bin := skopeoBin(t)
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
[[registry]]
prefix = "%[1]s/library/cachetest"
location = "%[1]s/library/cachetest"
insecure = true

[[registry.mirror]]
location = "%[2]s/library/cachetest"
insecure = true
`, host, mirror)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pulled")
	cmd := exec.Command(bin, "--registries-conf", conf, "--insecure-policy", "copy", "--override-os", "linux", "--override-arch", "amd64",
		"docker://"+host+"/library/cachetest@"+index.String(), "dir:"+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo, the image not in the cache: %v\n%s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	wantManifest, _ := want.Digest()
	if got, _, _ := v1.SHA256(bytes.NewReader(b)); got != wantManifest {
		t.Fatalf("pulled manifest %s, want %s", got, wantManifest)
	}
	if c.n["manifests"] == 0 {
		t.Errorf("the mirror was never asked (%v): the client did not try the cache first", c.n)
	}
	if c.n["blobs"] != 0 {
		t.Errorf("the mirror served %d blobs of an image it does not hold", c.n["blobs"])
	}
}

// counting wraps the mirror to count what it served.
type counting struct {
	h  http.Handler
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	for _, k := range []string{"/manifests/", "/blobs/"} {
		if strings.Contains(r.URL.Path, k) {
			c.n[strings.Trim(k, "/")]++
		}
	}
	c.mu.Unlock()
	c.h.ServeHTTP(w, r)
}

// A cache built from images pinned by digest serves, through the podVM's
// mirror, a multi-layer image pulled by digest by a real client that
// reads registries.conf (skopeo), with the source registry gone: the
// image it gets is the one published. A blob tampered with on the disk is
// refused by the client (the digest it asked for), and Verify finds it.
func TestMirrorServesTheCacheToARegistriesConfClient(t *testing.T) {
	skopeoBin(t)
	host, index, single, want, stop := source(t)
	dir := filepath.Join(t.TempDir(), "cache")
	imgs, err := Build(context.Background(), dir, []string{
		host + "/library/cachetest@" + index.String(),
		host + "/tools/single@" + single.String(),
	}, Options{Platform: amd64})
	if err != nil {
		t.Fatal(err)
	}
	wantManifest, _ := want.Digest()
	if len(imgs) != 2 || imgs[0].Digest != index.String() || imgs[0].Manifest != wantManifest.String() || imgs[0].Layers != 3 || imgs[1].Manifest != single.String() || imgs[1].Layers != 2 {
		t.Fatalf("built %+v", imgs)
	}
	if err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	stop() // from here on only the cache can serve

	m, err := cachemirror.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{h: m, n: map[string]int{}}
	srv := httptest.NewServer(c)
	defer srv.Close()
	mirror := strings.TrimPrefix(srv.URL, "http://")

	out := filepath.Join(t.TempDir(), "pulled")
	if msg, err := skopeo(t, mirror, "docker.io/library/cachetest@"+index.String(), out); err != nil {
		t.Fatalf("skopeo through the mirror: %v\n%s", err, msg)
	}
	// dir: keeps the manifest as the registry served it.
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := v1.SHA256(bytes.NewReader(b)); got != wantManifest {
		t.Fatalf("pulled manifest %s, want the amd64 image's %s", got, wantManifest)
	}
	for _, l := range mustLayers(t, want) {
		if _, err := os.Stat(filepath.Join(out, l.Hex)); err != nil {
			t.Errorf("layer %s not pulled: %v", l, err)
		}
	}
	if c.n["manifests"] < 2 || c.n["blobs"] < 4 {
		t.Errorf("the mirror served %v; want the index, the image manifest, its config and 3 layers", c.n)
	}

	// One byte of a layer changed on the disk.
	layers, _ := want.Layers()
	ld, _ := layers[1].Digest()
	blob := filepath.Join(dir, "blobs", "sha256", ld.Hex)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.Chmod(blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := skopeo(t, mirror, "docker.io/library/cachetest@"+index.String(), filepath.Join(t.TempDir(), "tampered"))
	if err == nil {
		t.Fatalf("skopeo accepted a tampered layer:\n%s", msg)
	}
	if !strings.Contains(strings.ToLower(msg), "digest") {
		t.Errorf("skopeo refused the tampered layer, but not by its digest:\n%s", msg)
	}
	if err := Verify(dir); err == nil || !strings.Contains(err.Error(), ld.Hex) {
		t.Errorf("Verify of the tampered layout: %v", err)
	}
}

// A reference by tag is refused before anything is written: the cache
// must hold what the pod names, by digest.
func TestBuildRefusesTags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	_, err := Build(context.Background(), dir, []string{"docker.io/rayproject/ray-llm:2.52.0-py311-cu128"}, Options{Platform: amd64})
	if err == nil || !strings.Contains(err.Error(), "pin it by digest") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s was created for a refused build", dir)
	}
	if _, err := Build(context.Background(), dir, nil, Options{Platform: amd64}); err == nil {
		t.Error("an empty list was accepted")
	}
}

// The mirror is read-only and serves only what the layout names, by
// digest: an image given with a tag beside its digest is recorded without
// the tag, and a pull by that tag is not answered (a client checks a
// manifest against a digest it asked for, never against a tag).
func TestMirrorRefusals(t *testing.T) {
	host, index, _, _, stop := source(t)
	defer stop()
	dir := filepath.Join(t.TempDir(), "cache")
	if _, err := Build(context.Background(), dir, []string{host + "/library/cachetest:v1@" + index.String()}, Options{Platform: amd64}); err != nil {
		t.Fatal(err)
	}
	if imgs, err := cachemirror.Images(dir); err != nil || len(imgs) != 1 || imgs[0].Ref != host+"/library/cachetest@"+index.String() {
		t.Fatalf("the layout names %+v (%v); want the reference without its tag", imgs, err)
	}
	m, err := cachemirror.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v2/", 200},
		{"HEAD", "/v2/library/cachetest/manifests/" + index.String(), 200},
		{"GET", "/v2/library/cachetest/manifests/v1", 404},
		{"GET", "/v2/library/other/manifests/" + index.String(), 404},
		{"GET", "/v2/library/cachetest/blobs/sha256:../../oci-layout", 404},
		{"GET", "/v2/library/cachetest/blobs/sha256:" + strings.Repeat("0", 64), 404},
		{"PUT", "/v2/library/cachetest/manifests/v2", 405},
		{"DELETE", "/v2/library/cachetest/manifests/" + index.String(), 405},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, bytes.NewReader(nil))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	if _, err := cachemirror.Open(t.TempDir(), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("an empty directory opened as a layout")
	}
}

func mustLayers(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Hash
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// The command builds, verifies and prints the table; a tag, a missing -o
// or a bad platform is refused with its fix.
func TestCacheBuildCommand(t *testing.T) {
	host, index, single, _, stop := source(t)
	defer stop()
	dir := filepath.Join(t.TempDir(), "cache")
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"build", "-o", dir, host + "/library/cachetest@" + index.String(), host + "/tools/single@" + single.String()}, &out, &errb, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"IMAGE", "/library/cachetest@" + index.String(), "  3  ", "2 images", "read back against their digests"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"build", "-o", filepath.Join(t.TempDir(), "c"), host + "/library/cachetest:v1"}, 1, "pin it by digest"},
		{[]string{"build", host + "/library/cachetest@" + index.String()}, 2, "-o DIR is required"},
		{[]string{"build", "-o", filepath.Join(t.TempDir(), "c"), "-platform", "x/y/z/w", host + "/library/cachetest@" + index.String()}, 2, "-platform"},
		{[]string{"build", "-o", dir, host + "/library/cachetest@" + index.String()}, 1, "is not empty"},
		{nil, 2, "usage: gcp-t4 cache COMMAND"},
		// docs/cache.md points users here.
		{[]string{"build", "-h"}, 0, "usage: gcp-t4 cache build -o DIR"},
	} {
		var o, e bytes.Buffer
		// Help goes to stdout, errors to stderr.
		got := Main(context.Background(), c.args, &o, &e, nil)
		text := e.String()
		if c.code == 0 {
			text = o.String()
		}
		if got != c.code || !strings.Contains(text, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, got, text, c.code, c.want)
		}
	}
}

// -disk packs the layout as GCE imports an image: a gzip'd oldgnu tar
// holding disk.raw, a whole number of GiB, with an ext4 filesystem labelled
// for the podVM holding the layout at its root (read back with debugfs,
// no mount needed). Two builds of the same images are the same bytes, with
// the installed e2fsprogs and with Debian 12's own (1.47.0: a fresh machine
// of the kind CI runs on has it, while the podVM build host's set-up
// installs bookworm-backports' 1.47.2, so the installed one alone would
// hide a disk that is reproducible only with the newer release).
func TestCacheDiskImage(t *testing.T) {
	t.Run("installed", cacheDiskImage)
	if testing.Short() {
		t.Log("Debian 12's own e2fsprogs: left to make test, which fetches it with apt-get download")
		return
	}
	out, err := exec.Command(filepath.Join(repoRoot, "test/cache/e2fsprogs-release.sh")).Output()
	if err != nil {
		t.Fatalf("test/cache/e2fsprogs-release.sh (Debian 12's own e2fsprogs, unpacked into a cache): %v: %s", err, errText(err))
	}
	root := strings.TrimSpace(string(out))
	t.Run("debian12-"+strings.TrimPrefix(filepath.Base(root), "e2fsprogs-"), func(t *testing.T) {
		t.Setenv("PATH", filepath.Join(root, "sbin")+string(os.PathListSeparator)+os.Getenv("PATH"))
		t.Setenv("LD_LIBRARY_PATH", filepath.Join(root, "lib/x86_64-linux-gnu"))
		// The directory is named by the Debian version (1.47.0-2+b2);
		// mke2fs names the upstream one it runs as.
		upstream, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(root), "e2fsprogs-"), "-")
		v, err := exec.Command("mke2fs", "-V").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(v), "mke2fs "+upstream+" ") {
			t.Fatalf("mke2fs -V with %s first on PATH, want %s: %v: %s", root, upstream, err, v)
		}
		cacheDiskImage(t)
	})
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func cacheDiskImage(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs", "tar", "gzip", "veritysetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: apt-get install -y e2fsprogs tar gzip cryptsetup-bin", tool)
		}
	}
	host, index, _, _, stop := source(t)
	defer stop()
	var sums, verities []string
	var layout string
	for i := range 2 {
		tmp := t.TempDir()
		layout = filepath.Join(tmp, "cache")
		disk := filepath.Join(tmp, "cache.tar.gz")
		var out, errb bytes.Buffer
		// The second build under a strict umask: the disk must not depend
		// on it (its files' modes are set, and the two builds compared).
		umask := 0o022
		if i == 1 {
			umask = 0o077
		}
		old := syscall.Umask(umask)
		code := Main(context.Background(), []string{"build", "-o", layout, "-disk", disk, host + "/library/cachetest@" + index.String()}, &out, &errb, nil)
		syscall.Umask(old)
		if code != 0 {
			t.Fatalf("build %d: exit %d: %s", i, code, errb.String())
		}
		if !strings.Contains(out.String(), "a 1 GiB disk") {
			t.Errorf("output: %s", out.String())
		}
		b, err := os.ReadFile(disk)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, fmt.Sprintf("%x", sha256Sum(b)))
		// The dm-verity value the admin gives the provider: printed, and
		// in the file beside the disk.
		vb, err := os.ReadFile(disk + VerityFileSuffix)
		if err != nil {
			t.Fatal(err)
		}
		verity := strings.TrimSpace(string(vb))
		verities = append(verities, verity)
		m := regexp.MustCompile(`^root=([0-9a-f]{64}),offset=([0-9]+)$`).FindStringSubmatch(verity)
		if m == nil || !strings.Contains(out.String(), "GCP_CACHE_VERITY="+verity) {
			t.Fatalf("verity value %q; output: %s", verity, out.String())
		}
		if i == 1 {
			x := t.TempDir()
			if b, err := exec.Command("tar", "-C", x, "-xzf", disk).CombinedOutput(); err != nil {
				t.Fatalf("tar: %v: %s", err, b)
			}
			entries, _ := os.ReadDir(x)
			if len(entries) != 1 || entries[0].Name() != "disk.raw" {
				t.Fatalf("the image file holds %v, want disk.raw alone", entries)
			}
			raw := filepath.Join(x, "disk.raw")
			st, _ := os.Stat(raw)
			if st.Size()%(1<<30) != 0 {
				t.Errorf("disk.raw is %d bytes, not whole GiB", st.Size())
			}
			// The hash tree after the filesystem verifies with the
			// printed root hash, as the podVM's dm-verity will read it;
			// the filesystem ends where the tree begins.
			offset, _ := strconv.ParseInt(m[2], 10, 64)
			if offset <= 0 || offset%4096 != 0 || offset >= st.Size() {
				t.Fatalf("hash offset %d in a %d-byte disk", offset, st.Size())
			}
			verify := func(root string) error {
				b, err := exec.Command("veritysetup", "verify", "--hash-offset="+m[2], "--data-blocks="+strconv.FormatInt(offset/4096, 10), raw, raw, root).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, b)
				}
				return nil
			}
			if err := verify(m[1]); err != nil {
				t.Fatalf("veritysetup verify with the printed root hash: %v", err)
			}
			if blocks := fsBlocks(t, raw); blocks*4096 != offset {
				t.Errorf("the filesystem has %d 4 KiB blocks, %d bytes, but the hash tree starts at %d", blocks, blocks*4096, offset)
			}
			defer func() {
				// One flipped byte of index.json's block, on a copy of
				// the disk the checks below have read: refused.
				blk := fileBlock(t, raw, "/index.json")
				f, err := os.OpenFile(raw, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				one := make([]byte, 1)
				_, _ = f.ReadAt(one, blk*4096)
				one[0] ^= 0x40
				_, _ = f.WriteAt(one, blk*4096)
				_ = f.Close()
				if err := verify(m[1]); err == nil || !strings.Contains(err.Error(), "corrupted") && !strings.Contains(err.Error(), "Verification failed") {
					t.Errorf("a flipped byte at block %d verified: %v", blk, err)
				}
			}()
			stats := exec.Command("debugfs", "-R", "stats", raw)
			stats.Env = append(os.Environ(), "TZ=UTC")
			label, err := stats.CombinedOutput()
			if err != nil || !strings.Contains(string(label), "Filesystem volume name:   "+FilesystemLabel) {
				t.Errorf("debugfs stats: %v\n%s", err, label)
			}
			// Every time is the epoch, not the build's clock: two builds
			// a second apart would differ otherwise.
			for _, field := range []string{"Filesystem created", "Last write time", "Last mount time", "Last checked"} {
				if !regexp.MustCompile(field + `:\s+Thu Jan  1 00:00:01 1970`).Match(label) {
					t.Errorf("the filesystem records its build time (%s):\n%s", field, label)
				}
			}
			// And so does every inode: mke2fs 1.47.0 copies atime and
			// ctime from the build machine's files, whatever
			// SOURCE_DATE_EPOCH says (two builds then differ).
			for _, path := range []string{"/", "/index.json", "/blobs", "/blobs/sha256", "/lost+found"} {
				out, err := exec.Command("debugfs", "-R", "stat "+path, raw).CombinedOutput()
				if err != nil {
					t.Fatalf("debugfs stat %s: %v\n%s", path, err, out)
				}
				times := regexp.MustCompile(`(?m)^\s*(a|c|m|cr)time: (0x[0-9a-f]+:[0-9a-f]+)`).FindAllStringSubmatch(string(out), -1)
				if len(times) != 4 {
					t.Fatalf("debugfs stat %s: %d times, want 4:\n%s", path, len(times), out)
				}
				for _, m := range times {
					if m[2] != "0x00000001:00000000" {
						t.Errorf("%s's %stime on the disk is %s, not the epoch (1 s)", path, m[1], m[2])
					}
				}
			}
			// Readable by the podVM's unprivileged mirror, whatever the
			// builder's umask (the test sets a strict one below).
			for path, mode := range map[string]string{"/": "0755", "/blobs/sha256": "0755", "/index.json": "0644"} {
				out, err := exec.Command("debugfs", "-R", "stat "+path, raw).CombinedOutput()
				if err != nil || !regexp.MustCompile(`Mode:\s+0?`+mode+`\b`).Match(out) {
					t.Errorf("%s on the disk: want mode %s: %v\n%s", path, mode, err, out)
				}
			}
			got, err := exec.Command("debugfs", "-R", "cat /index.json", raw).Output()
			want, _ := os.ReadFile(filepath.Join(layout, "index.json"))
			if err != nil || !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
				t.Errorf("index.json on the disk: %v\n%s\nwant\n%s", err, got, want)
			}
		}
	}
	if sums[0] != sums[1] || verities[0] != verities[1] {
		t.Errorf("two builds of the same images differ: %s, %s (dm-verity %s, %s)", sums[0], sums[1], verities[0], verities[1])
	}
}

// fsBlocks is the ext4 filesystem's block count (4 KiB blocks).
func fsBlocks(t *testing.T, raw string) int64 {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "stats", raw).CombinedOutput()
	m := regexp.MustCompile(`(?m)^Block count:\s+(\d+)$`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("debugfs stats: %v\n%s", err, out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// fileBlock is the first data block of a file on the filesystem.
func fileBlock(t *testing.T, raw, path string) int64 {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "bmap "+path+" 0", raw).CombinedOutput()
	f := strings.Fields(string(out))
	if err != nil || len(f) == 0 {
		t.Fatalf("debugfs bmap %s: %v\n%s", path, err, out)
	}
	n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("debugfs bmap %s: %s", path, out)
	}
	return n
}

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
