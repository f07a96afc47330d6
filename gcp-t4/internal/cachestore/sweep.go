package cachestore

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// `podvm-cache-store sweep` keeps image-rs's work_dir from filling with
// the layers of pulls that failed (issue 52, docs/cache.md "A failed
// pull"). At guest-components dcd55ea1 a pull unpacks each layer into
// work_dir/layers/N, N from a counter that only grows
// (image-rs/src/layer_store.rs:45-56; at CDH's start it resumes after the
// largest N there). The layers reach layer_db and meta_store.json only
// when every layer of the image is done (image.rs:441-469; pull.rs
// async_pull_layers' try_collect drops the others on the first error), so
// a pull that fails part-way leaves every directory it made unreferenced,
// and the next try unpacks the image again into new ones: a flaky
// registry or NAT fills the podVM's disk in a loop.
//
// Which directories are certainly stranded: CDH serialises pulls (one
// Mutex<ImageClient> held across each, confidential-data-hub/hub/src/
// hub.rs:98-111), and image-rs writes meta_store.json, its whole
// in-memory layer_db, at the end of each pull that succeeds. Let M be the
// largest N the file names. Every directory below M was made by the pull
// that made M or by one before it, all finished when the file was written,
// so one the file does not name is referenced by no one and never will be
// (a later pull allocates above M and finds reusable layers only in
// layer_db). Those are removed. Directories above M may belong to the
// pull in flight: they are never touched, only counted, with the space
// left, on the console (and so on the pod, through the provider).

// SweepPrefix starts the line `sweep` prints when what it found changed.
const SweepPrefix = "CAA-GCP-T4-LAYERS "

// SweepInterval is how often the podVM's sweep looks.
const SweepInterval = 30 * time.Second

// SweepReport is one look at image-rs's layers.
type SweepReport struct {
	// Removed and RemovedBytes: stranded directories removed this time.
	Removed      int   `json:"removed"`
	RemovedBytes int64 `json:"removed_bytes"`
	// Pending and PendingBytes: unreferenced directories left alone,
	// because a pull in flight may be writing them (above the largest
	// index meta_store.json names, or no meta_store.json written yet).
	Pending      int   `json:"pending"`
	PendingBytes int64 `json:"pending_bytes"`
	// FreeBytes is what the work_dir's filesystem has left for the
	// unprivileged (statfs f_bavail).
	FreeBytes int64 `json:"free_bytes"`
	// Error says why nothing could be decided (meta_store.json being
	// rewritten, unreadable): nothing is removed then.
	Error string `json:"error,omitempty"`
}

// Sweep looks once at workDir's layers and removes the stranded ones.
func Sweep(ctx context.Context, workDir string) (rep SweepReport) {
	var st syscall.Statfs_t
	defer func() {
		if syscall.Statfs(workDir, &st) == nil {
			rep.FreeBytes = int64(st.Bavail) * st.Bsize
		}
	}()
	layersDir := filepath.Join(workDir, "layers")
	entries, err := os.ReadDir(layersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return rep
	}
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	referenced, maxRef, err := referencedLayers(workDir, layersDir)
	if err != nil {
		rep.Error = err.Error()
	}
	var nums []int
	for _, e := range entries {
		// image-rs parses every name as a number (get_layer_index fails
		// on any other): a name that is not one is not ours to judge.
		n, perr := strconv.Atoi(e.Name())
		if perr != nil || n < 0 || strconv.Itoa(n) != e.Name() || !e.IsDir() {
			continue
		}
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for _, n := range nums {
		if ctx.Err() != nil {
			break
		}
		if referenced[n] {
			continue
		}
		p := filepath.Join(layersDir, strconv.Itoa(n))
		size := dirBytes(p)
		if err == nil && n < maxRef {
			if rerr := os.RemoveAll(p); rerr != nil {
				rep.Error = rerr.Error()
				continue
			}
			rep.Removed++
			rep.RemovedBytes += size
			continue
		}
		rep.Pending++
		rep.PendingBytes += size
	}
	return rep
}

// referencedLayers reads meta_store.json: the layer directories under
// layersDir it names, and the largest index among them (-1 when it names
// none, or when there is no file yet: then nothing is proven stranded).
func referencedLayers(workDir, layersDir string) (map[int]bool, int, error) {
	ref := map[int]bool{}
	b, err := os.ReadFile(filepath.Join(workDir, imagestore.MetaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ref, -1, nil
	}
	if err != nil {
		return ref, -1, err
	}
	var ms imagestore.MetaStore
	// image-rs rewrites the file in place: a read in the middle of a
	// write does not parse, and then nothing is removed this time.
	if err := json.Unmarshal(b, &ms); err != nil {
		return ref, -1, fmt.Errorf("%s does not parse (being rewritten?): %w", imagestore.MetaFile, err)
	}
	maxRef := -1
	add := func(sp string) {
		if filepath.Dir(filepath.Clean(sp)) != layersDir {
			return // the cache disk's store, or another work_dir
		}
		n, err := strconv.Atoi(filepath.Base(sp))
		if err != nil || n < 0 {
			return
		}
		ref[n] = true
		maxRef = max(maxRef, n)
	}
	for _, l := range ms.LayerDB {
		add(l.StorePath)
	}
	for _, im := range ms.ImageDB {
		for _, l := range im.LayerMetas {
			add(l.StorePath)
		}
	}
	return ref, maxRef, nil
}

// dirBytes is the space dir's files take (st_blocks), links not followed.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// changed says whether a report is worth a console line: something was
// removed, the number of directories pending changed, or the pending
// bytes crossed the space left (what the provider warns of). The bytes of
// a pull that is only unpacking grow at every look, and are not news.
func (r SweepReport) changed(last SweepReport) bool {
	return r.Removed > 0 || r.Pending != last.Pending || r.Error != last.Error ||
		(r.PendingBytes > r.FreeBytes) != (last.PendingBytes > last.FreeBytes)
}

// sweeper remembers the last report, so that a look that found the same
// prints nothing.
type sweeper struct {
	workDir string
	stdout  io.Writer
	last    SweepReport
}

// step looks once and prints a line when the report changed.
func (s *sweeper) step(ctx context.Context) {
	rep := Sweep(ctx, s.workDir)
	if rep.changed(s.last) {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(s.stdout, "%s%s\n", SweepPrefix, b)
	}
	s.last = rep
}

// SweepLoop looks at once, then at each tick until ctx ends.
func SweepLoop(ctx context.Context, workDir string, tick <-chan time.Time, stdout io.Writer) {
	s := &sweeper{workDir: workDir, stdout: stdout}
	for {
		s.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// SweepMain is `podvm-cache-store sweep`.
func SweepMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("podvm-cache-store sweep", flag.ContinueOnError)
	work := fl.String("work-dir", WorkDir, "image-rs's work_dir, whose layers/ is swept")
	every := fl.Duration("every", SweepInterval, "how often to look")
	once := fl.Bool("once", false, "look once and exit")
	const about = "Runs in the podVM for its whole life: removes the layer directories a failed pull left in\n" +
		"image-rs's work_dir (those below the largest index meta_store.json names that it does not name),\n" +
		"and prints a CAA-GCP-T4-LAYERS line when it removed some or when the unreferenced directories it\n" +
		"must leave (a pull may be writing them) change, with the space left (docs/cache.md)."
	if code, ok := stdflags.Parse(fl, args, about, stdout, stderr); !ok {
		return code
	}
	if *every <= 0 {
		fmt.Fprintf(stderr, "podvm-cache-store sweep: -every %s: want a positive duration, e.g. 30s\n", *every)
		return 2
	}
	if *once {
		b, _ := json.Marshal(Sweep(ctx, *work))
		fmt.Fprintf(stdout, "%s%s\n", SweepPrefix, b)
		return 0
	}
	t := time.NewTicker(*every)
	defer t.Stop()
	SweepLoop(ctx, *work, t.C, stdout)
	return 0
}
