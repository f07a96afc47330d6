package cachestore

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachebuild"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

const goodVerity = "root=0f3a5b7c9d1e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f1a,offset=10468982784"

// The podVM reads the key the provider writes, and accepts the form
// cache build prints.
func TestVerityValueIsTheProvidersAndCacheBuilds(t *testing.T) {
	if VerityMetadataKey != gcpt4.CacheVerityMetadata {
		t.Errorf("the podVM reads %q, the provider writes %q", VerityMetadataKey, gcpt4.CacheVerityMetadata)
	}
	v := cachebuild.Verity{RootHash: strings.Repeat("ab", 32), HashOffset: 1 << 30}
	got, err := ParseVerity(v.String())
	if err != nil || got.Root != v.RootHash || got.Offset != v.HashOffset {
		t.Errorf("ParseVerity(%q) = %+v, %v", v.String(), got, err)
	}
	for _, bad := range []string{"", "root=abc,offset=4096", strings.ToUpper(goodVerity), goodVerity + "\n", goodVerity[:69] + ",offset=100",
		goodVerity[:69] + ",offset=0", goodVerity[:69] + ",offset=-4096", "offset=4096," + goodVerity[:69], goodVerity + ",x=1"} {
		if _, err := ParseVerity(bad); err == nil {
			t.Errorf("ParseVerity(%q) accepted", bad)
		}
	}
}

// openRig is a metadata server answering with the given statuses then
// the value, and a veritysetup stand-in (a script, so that Open runs a
// real process as on the podVM) that records its arguments and, on
// attach, makes the mapper device: a file of head bytes.
type openRig struct {
	cfg   OpenConfig
	calls atomic.Int32
	log   string
}

func newOpenRig(t *testing.T, statuses []int, value string, head int, attachExit int) *openRig {
	t.Helper()
	r := &openRig{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(r.calls.Add(1))
		if req.Header.Get("Metadata-Flavor") != "Google" || req.URL.Path != "/computeMetadata/v1/instance/attributes/"+VerityMetadataKey {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if n <= len(statuses) {
			w.WriteHeader(statuses[n-1])
			return
		}
		fmt.Fprint(w, value)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	r.log = filepath.Join(dir, "veritysetup.log")
	mapper := filepath.Join(dir, "mapper")
	if err := os.Mkdir(mapper, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "$*" >>%q
case $1 in
open) [ %d -eq 0 ] || { echo "device-mapper: reload ioctl failed" >&2; exit %d; }
	head -c %d /dev/zero >%q/"$3" ;;
close) rm -f %q/"$2" ;;
esac
`, r.log, attachExit, attachExit, head, mapper, mapper)
	vs := filepath.Join(dir, "veritysetup")
	if err := os.WriteFile(vs, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r.cfg = OpenConfig{Device: "/dev/caa-gcp-t4-cache-raw", Name: VerityName, MetadataURL: srv.URL + "/computeMetadata/v1/instance/attributes/" + VerityMetadataKey,
		Veritysetup: vs, MapperDir: mapper, Client: srv.Client(), Attempts: 4, Backoff: func(int) time.Duration { return time.Millisecond }}
	return r
}

func (r *openRig) calledWith(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// A good value opens the disk through dm-verity with exactly that root
// hash and offset, the hash tree on the same disk; retried past a
// metadata server's errors.
func TestOpenAttachesWithTheConfiguredRoot(t *testing.T) {
	r := newOpenRig(t, []int{http.StatusServiceUnavailable, http.StatusInternalServerError}, goodVerity+"\n", 64<<10, 0)
	rep, err := Open(context.Background(), r.cfg)
	if err != nil || rep.State != "open" {
		t.Fatalf("Open = %+v, %v", rep, err)
	}
	want := "open /dev/caa-gcp-t4-cache-raw caa-gcp-t4-cache /dev/caa-gcp-t4-cache-raw 0f3a5b7c9d1e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f1a --hash-offset=10468982784"
	if got := r.calledWith(t); len(got) != 1 || got[0] != want {
		t.Errorf("veritysetup calls %q, want %q", got, want)
	}
	if n := r.calls.Load(); n != 3 {
		t.Errorf("%d metadata requests, want 3 (two errors, then the value)", n)
	}
}

// Without a usable value, or when dm-verity refuses the disk, the disk is
// not opened (or is closed again), the unit fails so the mount fails at
// once, and the console line says why and what image-rs does instead.
func TestOpenRefuses(t *testing.T) {
	for _, c := range []struct {
		name       string
		statuses   []int
		value      string
		head, exit int
		miss       string
		says       string
		calls      []string
	}{
		{name: "no value", statuses: []int{http.StatusNotFound}, miss: string(MissNoVerity), says: "its metadata has no caa-gcp-t4-cache-verity"},
		{name: "malformed", value: "root=abc,offset=4096", miss: string(MissNoVerity), says: `"root=abc,offset=4096" is not root=`},
		{name: "oversized", value: strings.Repeat("x", 5000), miss: string(MissNoVerity), says: "over 4096 bytes"},
		{name: "metadata server down", statuses: []int{500, 500, 500, 500}, miss: string(MissNoVerity), says: "after 4 attempts: the metadata server answered 500"},
		{name: "attach fails", value: goodVerity, head: 64 << 10, exit: 1, miss: string(MissVerityRefused), says: "dm-verity could not open /dev/caa-gcp-t4-cache-raw with root hash 0f3a5b7c9d1e…",
			calls: []string{"open"}},
		// dm-verity fails the first read when the disk is not the one
		// the root hash names: closed again.
		{name: "another disk", value: goodVerity, head: 100, miss: string(MissVerityRefused), says: "does not match the configured root hash 0f3a5b7c9d1e…",
			calls: []string{"open", "close caa-gcp-t4-cache"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newOpenRig(t, c.statuses, c.value, c.head, c.exit)
			rep, err := Open(context.Background(), r.cfg)
			if err == nil || rep.State != "unused" || string(rep.Miss) != c.miss || !strings.Contains(rep.Reason, c.says) || rep.Fallback != DiskUnusedFallback {
				t.Errorf("Open = %+v, %v; want miss %s saying %q", rep, err, c.miss, c.says)
			}
			var got []string
			for _, call := range r.calledWith(t) {
				got = append(got, strings.Join(strings.Fields(call)[:min(2, len(strings.Fields(call)))], " "))
			}
			if len(got) != len(c.calls) {
				t.Errorf("veritysetup calls %q, want %q", got, c.calls)
			}
			for i, want := range c.calls {
				if i < len(got) && !strings.HasPrefix(got[i], want) {
					t.Errorf("call %d: %q, want %q", i, got[i], want)
				}
			}
		})
	}
}

// OpenMain prints one CAA-GCP-T4-STORE line on a refusal, with the miss,
// and exits 1 so that the mount that requires it fails at once.
func TestOpenMainConsoleLine(t *testing.T) {
	r := newOpenRig(t, []int{http.StatusNotFound}, "", 0, 0)
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"open", "-metadata-url", r.cfg.MetadataURL, "-veritysetup", r.cfg.Veritysetup}, &out, &errb)
	line := out.String()
	if code != 1 || !strings.HasPrefix(line, ConsolePrefix+`{"state":"unused","miss":"no-verity"`) || strings.Count(line, "\n") != 1 || !strings.Contains(line, `"fallback":"the cache disk is not used`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, line, errb.String())
	}
	if code := Main(context.Background(), []string{"open", "-no-such-flag"}, &out, &errb); code != 2 {
		t.Errorf("misuse: exit %d", code)
	}
}

// On a dm-verity device the store is not read whole first: every block
// is checked as it is read. The device is told by its device-mapper UUID
// under /sys/dev/block (a stand-in tree here, for the test directory's
// own device).
func TestLoadTrustsADmVerityDevice(t *testing.T) {
	cfg, _ := disk(t)
	var st syscall.Stat_t
	if err := syscall.Stat(cfg.Dir, &st); err != nil {
		t.Fatal(err)
	}
	sys := t.TempDir()
	dm := filepath.Join(sys, fmt.Sprintf("%d:%d", unixMajor(st.Dev), unixMinor(st.Dev)), "dm")
	if err := os.MkdirAll(dm, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.SysDevBlock = sys
	// A changed layer file: the whole-store read finds it; on a verity
	// device its read would fail instead, so it is not looked for.
	spoil := func() {
		layers := filepath.Join(cfg.Dir, imagestore.StoreDir, imagestore.LayersDir, "0", "app", "run")
		if err := os.WriteFile(layers, []byte("changed\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spoil()
	for _, c := range []struct {
		uuid, state, integrity string
	}{
		{"CRYPT-VERITY-3e1f6a2c9b7d4c588e0a2d4b6f8a1c3f-caa-gcp-t4-cache\n", "in-use", "dm-verity"},
		// Another device-mapper target is no verity: read whole, and the
		// change is found.
		{"CRYPT-LUKS2-3e1f6a2c9b7d4c588e0a2d4b6f8a1c3f-x\n", "unused", ""},
	} {
		if err := os.WriteFile(filepath.Join(dm, "uuid"), []byte(c.uuid), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.WorkDir = filepath.Join(t.TempDir(), "image")
		rep, err := Load(context.Background(), cfg)
		if err != nil || rep.State != c.state || rep.Integrity != c.integrity {
			t.Errorf("uuid %q: Load = %+v, %v; want %s (%s)", c.uuid, rep, err, c.state, c.integrity)
		}
	}
}
