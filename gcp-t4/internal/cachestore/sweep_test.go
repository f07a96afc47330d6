package cachestore

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// layerDir makes work/layers/N holding one file of size bytes, as an
// unpacked (or half-unpacked) layer.
func layerDir(t *testing.T, work string, n, size int) string {
	t.Helper()
	d := filepath.Join(work, "layers", strconv.Itoa(n))
	if err := os.MkdirAll(filepath.Join(d, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "usr", "f"), bytes.Repeat([]byte{1}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// metaStore writes meta_store.json as image-rs does after a pull: every
// layer in layer_db, the image's layer_metas naming the same paths.
func metaStore(t *testing.T, work string, paths ...string) {
	t.Helper()
	layerDB := map[string]any{}
	var metas []any
	for i, p := range paths {
		m := map[string]any{"compressed_digest": "sha256:" + strings.Repeat(strconv.Itoa(i%10), 64), "store_path": p}
		layerDB[m["compressed_digest"].(string)] = m
		metas = append(metas, m)
	}
	b, _ := json.Marshal(map[string]any{"image_db": map[string]any{"sha256:cfg": map[string]any{"layer_metas": metas}}, "layer_db": layerDB})
	if err := os.WriteFile(filepath.Join(work, "meta_store.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// The sequence the sweep is for, as image-rs at the pin makes it: a pull
// that failed part-way left 0 and 1 (no meta_store.json names them), the
// next try succeeded with 2 and 3 and wrote the file, and a later pull is
// writing 4. 0 and 1 go; 2 and 3 stay; 4 is counted, not touched.
func TestSweepRemovesOnlyWhatAFailedPullLeft(t *testing.T) {
	work := t.TempDir()
	for n := range 5 {
		layerDir(t, work, n, 64<<10)
	}
	metaStore(t, work, filepath.Join(work, "layers", "2"), filepath.Join(work, "layers", "3"))
	rep := Sweep(context.Background(), work)
	if rep.Removed != 2 || rep.Pending != 1 || rep.Error != "" {
		t.Fatalf("report %+v: want 2 removed (0, 1), 1 pending (4)", rep)
	}
	if rep.RemovedBytes < 2*64<<10 || rep.PendingBytes < 64<<10 || rep.FreeBytes <= 0 {
		t.Fatalf("report %+v: want the removed and pending bytes counted and the space left", rep)
	}
	for n, want := range []bool{false, false, true, true, true} {
		if got := exists(filepath.Join(work, "layers", strconv.Itoa(n))); got != want {
			t.Errorf("layers/%d there: %v, want %v", n, got, want)
		}
	}
	// Again: nothing more to remove, the same pending.
	if rep := Sweep(context.Background(), work); rep.Removed != 0 || rep.Pending != 1 {
		t.Fatalf("second sweep %+v: want 0 removed, 1 pending", rep)
	}
}

// Nothing proves a directory stranded: no meta_store.json yet (the first
// pull is in flight, or failing again and again), a file being rewritten,
// one that names only the cache disk's store. Then nothing is removed and
// every unreferenced directory is counted.
func TestSweepRemovesNothingUnproven(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, work string){
		"no meta_store.json": func(t *testing.T, work string) {},
		"meta_store.json half-written": func(t *testing.T, work string) {
			if err := os.WriteFile(filepath.Join(work, "meta_store.json"), []byte(`{"image_db":{"sha256:c`), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"only the cache disk's store": func(t *testing.T, work string) {
			metaStore(t, work, "/run/caa-gcp-t4/cache/image-rs/layers/7", "/run/caa-gcp-t4/cache/image-rs/layers/9")
		},
	} {
		t.Run(name, func(t *testing.T) {
			work := t.TempDir()
			layerDir(t, work, 0, 4096)
			layerDir(t, work, 1, 4096)
			setup(t, work)
			rep := Sweep(context.Background(), work)
			if rep.Removed != 0 || rep.Pending != 2 {
				t.Fatalf("report %+v: want nothing removed, 2 pending", rep)
			}
			if name == "meta_store.json half-written" && !strings.Contains(rep.Error, "does not parse") {
				t.Errorf("report %+v: want the error to say meta_store.json does not parse", rep)
			}
			for _, n := range []string{"0", "1"} {
				if !exists(filepath.Join(work, "layers", n)) {
					t.Errorf("layers/%s was removed", n)
				}
			}
		})
	}
}

// Names image-rs did not make (not a number, a number with a leading
// zero, a file, a link) are not judged, whatever meta_store.json says;
// a link's target is never removed through it.
func TestSweepLeavesWhatIsNotALayer(t *testing.T) {
	work := t.TempDir()
	outside := t.TempDir()
	layerDir(t, work, 5, 1)
	metaStore(t, work, filepath.Join(work, "layers", "5"))
	for _, n := range []string{"tmp", "007"} {
		if err := os.Mkdir(filepath.Join(work, "layers", n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "layers", "1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(work, "layers", "2")); err != nil {
		t.Fatal(err)
	}
	rep := Sweep(context.Background(), work)
	if rep.Removed != 0 || rep.Pending != 0 {
		t.Fatalf("report %+v: want nothing removed or pending", rep)
	}
	for _, n := range []string{"tmp", "007", "1", "2", "5"} {
		if !exists(filepath.Join(work, "layers", n)) {
			t.Errorf("layers/%s was removed", n)
		}
	}
	if !exists(outside) {
		t.Error("the link's target was removed")
	}
}

func TestSweepNoLayers(t *testing.T) {
	rep := Sweep(context.Background(), t.TempDir())
	if rep.Removed != 0 || rep.Pending != 0 || rep.Error != "" || rep.FreeBytes <= 0 {
		t.Fatalf("report %+v: want an empty report with the space left", rep)
	}
}

// A line only when something was removed or what is pending changed:
// one for the first look, none for a look that found the same, one when a
// pull's directories appear, one when a pull's success strands the older.
func TestSweepSaysOnlyChanges(t *testing.T) {
	work := t.TempDir()
	layerDir(t, work, 0, 4096)
	var out bytes.Buffer
	s := &sweeper{workDir: work, stdout: &out}
	ctx := context.Background()
	s.step(ctx)
	s.step(ctx)
	layerDir(t, work, 1, 4096)
	layerDir(t, work, 2, 4096)
	s.step(ctx)
	metaStore(t, work, filepath.Join(work, "layers", "2"))
	s.step(ctx)
	s.step(ctx)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got []SweepReport
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, SweepPrefix)
		if !ok {
			t.Fatalf("line %q does not start with %q", l, SweepPrefix)
		}
		var r SweepReport
		if err := json.Unmarshal([]byte(rest), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 3 || got[0].Pending != 1 || got[1].Pending != 3 || got[2].Removed != 2 || got[2].Pending != 0 {
		t.Fatalf("lines %q: want 3 (1 pending; 3 pending; 2 removed, 0 pending)", lines)
	}
}

// A pull that is only unpacking (its directories' bytes growing, their
// number the same, room left) is not news; its bytes passing the space
// left is, and so is falling back under it.
func TestSweepChangedIgnoresGrowthWithRoom(t *testing.T) {
	const gib = 1 << 30
	last := SweepReport{Pending: 2, PendingBytes: 1 * gib, FreeBytes: 10 * gib}
	for _, tc := range []struct {
		name string
		r    SweepReport
		want bool
	}{
		{"bytes grew, room left", SweepReport{Pending: 2, PendingBytes: 3 * gib, FreeBytes: 8 * gib}, false},
		{"bytes passed the space left", SweepReport{Pending: 2, PendingBytes: 6 * gib, FreeBytes: 5 * gib}, true},
		{"one more directory", SweepReport{Pending: 3, PendingBytes: 1 * gib, FreeBytes: 10 * gib}, true},
		{"removed", SweepReport{Removed: 1, Pending: 2, PendingBytes: 1 * gib, FreeBytes: 10 * gib}, true},
	} {
		if got := tc.r.changed(last); got != tc.want {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.want)
		}
	}
	over := SweepReport{Pending: 2, PendingBytes: 6 * gib, FreeBytes: 5 * gib}
	if !(SweepReport{Pending: 2, PendingBytes: 1 * gib, FreeBytes: 10 * gib}).changed(over) {
		t.Error("back under the space left: want a line")
	}
}

// signalWriter closes wrote at its first write.
type signalWriter struct {
	once  sync.Once
	wrote chan struct{}
	b     bytes.Buffer
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.b.Write(p)
	w.once.Do(func() { close(w.wrote) })
	return n, err
}

// The loop looks at once, before the first tick, and ends with ctx.
func TestSweepLoopLooksAtOnceAndStops(t *testing.T) {
	work := t.TempDir()
	layerDir(t, work, 0, 4096)
	w := &signalWriter{wrote: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { SweepLoop(ctx, work, nil, w); close(done) }()
	<-w.wrote
	cancel()
	<-done
	if !strings.HasPrefix(w.b.String(), SweepPrefix+`{"removed":0,"removed_bytes":0,"pending":1,`) {
		t.Fatalf("first line %q", w.b.String())
	}
}

func TestSweepMain(t *testing.T) {
	work := t.TempDir()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"sweep", "-every", "0s", "-work-dir", work}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-every") {
		t.Fatalf("-every 0s: exit %d, stderr %q: want 2 naming -every", code, errb.String())
	}
	out.Reset()
	layerDir(t, work, 3, 1)
	if code := Main(context.Background(), []string{"sweep", "-once", "-work-dir", work}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), SweepPrefix+`{"removed":0,"removed_bytes":0,"pending":1,`) {
		t.Fatalf("-once: exit %d, stdout %q", code, out.String())
	}
}
