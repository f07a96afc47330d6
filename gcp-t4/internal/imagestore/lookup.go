package imagestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Miss says why a lookup found no image to mount.
type Miss string

const (
	// MissNoStore: the disk holds no store.
	MissNoStore Miss = "no-store"
	// MissHalfWritten: the store lacks its manifest or a file the manifest names.
	MissHalfWritten Miss = "half-written"
	// MissGuestComponents: the store was written for another image-rs.
	MissGuestComponents Miss = "other-guest-components"
	// MissMoved: the store is not where its store_paths say.
	MissMoved Miss = "moved"
	// MissTampered: a file of the store does not match the manifest's digest.
	MissTampered Miss = "tampered"
	// MissConfigDigest: no image of the store has this config digest.
	MissConfigDigest Miss = "other-config-digest"
	// MissLayer: a layer directory the image names is not there.
	MissLayer Miss = "layer-missing"
)

// Request is one pull, as image-rs has it once the manifest is fetched
// (image-rs/src/image.rs:385-388).
type Request struct {
	// MountPoint is where the podVM has mounted the cache disk.
	MountPoint string
	// GuestComponents is the podVM's own guest-components commit.
	GuestComponents string
	// ConfigDigest is the pulled manifest's config digest: image-rs's key.
	ConfigDigest string
	// WorkDir is image-rs's work_dir (writable); Bundle the container's
	// bundle directory, whose rootfs is mounted.
	WorkDir, Bundle string
}

// Result is a lookup's answer: a hit with the overlay mount image-rs
// would make, or a miss with its reason.
type Result struct {
	Hit    bool
	Miss   Miss
	Detail string
	Mount  MountSpec
}

// MountSpec is the overlay image-rs mounts for an image it has
// (image-rs/src/snapshots/overlay.rs:31-99): the image's layer directories,
// last first, as lowerdirs (image.rs:531-538), and an upper and work
// directory of its own under work_dir/overlay, onto bundle/rootfs
// (bundle.rs:13), with no mount flags.
type MountSpec struct {
	Source, Target, FSType, Options string
	Lower                           []string
	Upper, Work                     string
}

// Lookup looks the request's image up as the podVM would: first that the
// store is whole and for this image-rs (our manifest, its guest-components
// commit, meta_store.json's digest), then as image-rs does at the pin:
// image_db by config digest (image.rs:391-393), then the layers'
// store_paths, last first, as an overlay's lowerdirs (image.rs:526-538).
//
// image-rs itself checks none of the first part, and not that the layer
// directories are there: at the pin, an image_db entry whose layers are
// gone fails the overlay mount (FailedToCreateBundle), and every mirror and
// the registry after it meet the same entry, so the pull fails rather than
// falls back. The podVM must therefore hand image-rs only a store that
// passes this lookup. The overlay's index directory is image-rs's
// sha256(layer paths, mount path, clock) (overlay.rs:34-53); ours leaves
// the clock out.
func Lookup(req Request) Result {
	man, store, ms, _, r := openStore(req.MountPoint, req.GuestComponents)
	if !r.Hit {
		return r
	}
	im, ok := ms.ImageDB[req.ConfigDigest]
	if !ok {
		return Result{Miss: MissConfigDigest, Detail: fmt.Sprintf("no image with config %s in the store", req.ConfigDigest)}
	}
	lower, r := lowerDirs(man, store, im)
	if !r.Hit {
		return r
	}
	h := sha256.New()
	for i := len(lower) - 1; i >= 0; i-- {
		h.Write([]byte(lower[i]))
	}
	target := filepath.Join(req.Bundle, "rootfs")
	h.Write([]byte(target))
	idx := filepath.Join(req.WorkDir, "overlay", hex.EncodeToString(h.Sum(nil)))
	upper, work := filepath.Join(idx, "upperdir"), filepath.Join(idx, "workdir")
	return Result{Hit: true, Mount: MountSpec{
		Source: "overlay", Target: target, FSType: "overlay", Lower: lower, Upper: upper, Work: work,
		Options: "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work,
	}}
}

// Checked is a store that passed Check: the bytes of its meta_store.json,
// for image-rs's work_dir, and what it holds.
type Checked struct {
	MetaStore []byte
	Images    int
	Layers    int
	Bytes     int64
}

// Check runs Lookup's checks of the store as a whole, for every image it
// holds rather than one config digest: the manifest is whole and for this
// image-rs (gc, the podVM's guest-components commit), the store is mounted
// where its store_paths say, meta_store.json is the manifest's, and every
// image's every layer is a layer directory of the store that is there.
// It reads no layer's files: Verify does. The podVM hands image-rs a
// store's meta_store.json only when Check and Verify both pass, since
// image-rs itself checks none of this (see Lookup).
func Check(mountPoint, gc string) (Checked, Result) {
	man, store, ms, mb, r := openStore(mountPoint, gc)
	if !r.Hit {
		return Checked{}, r
	}
	// In the manifest's order, so the first miss reported is the same on
	// every run (image_db is a map).
	for _, mi := range man.Images {
		im, ok := ms.ImageDB[mi.ConfigDigest]
		if !ok {
			return Checked{}, Result{Miss: MissTampered, Detail: fmt.Sprintf("%s has no image with config %s, which the manifest lists", MetaFile, mi.ConfigDigest)}
		}
		if _, r := lowerDirs(man, store, im); !r.Hit {
			return Checked{}, r
		}
	}
	if len(ms.ImageDB) != len(man.Images) {
		return Checked{}, Result{Miss: MissTampered, Detail: fmt.Sprintf("%s holds %d images, the manifest %d", MetaFile, len(ms.ImageDB), len(man.Images))}
	}
	c := Checked{MetaStore: mb, Images: len(man.Images), Layers: len(man.Layers)}
	for _, l := range man.Layers {
		c.Bytes += l.Bytes
	}
	return c, Result{Hit: true}
}

// openStore is Lookup's checks of the store before any image: the
// manifest, the guest-components commit, meta_store.json's digest.
func openStore(mountPoint, gc string) (Manifest, string, MetaStore, []byte, Result) {
	var ms MetaStore
	miss := func(m Miss, f string, a ...any) (Manifest, string, MetaStore, []byte, Result) {
		return Manifest{}, "", ms, nil, Result{Miss: m, Detail: fmt.Sprintf(f, a...)}
	}
	man, store, r := loadManifest(mountPoint, true)
	if !r.Hit {
		return man, "", ms, nil, r
	}
	if man.GuestComponents != gc {
		return miss(MissGuestComponents, "the store is for guest-components %.12s, this podVM's image-rs is %.12s", man.GuestComponents, gc)
	}
	mb, err := os.ReadFile(filepath.Join(store, MetaFile))
	if err != nil {
		return miss(MissHalfWritten, "%s: %v", MetaFile, err)
	}
	if d := digest(mb); d != man.MetaStore {
		return miss(MissTampered, "%s is %s, the manifest says %s", MetaFile, d, man.MetaStore)
	}
	if err := json.Unmarshal(mb, &ms); err != nil {
		return miss(MissTampered, "%s: %v", MetaFile, err)
	}
	return man, store, ms, mb, Result{Hit: true}
}

// lowerDirs is an image's layers' store_paths, last first, as image-rs
// makes them an overlay's lowerdirs (image.rs:526-538), each checked to be
// a layer directory of the store that is there.
func lowerDirs(man Manifest, store string, im ImageMeta) ([]string, Result) {
	layers := path.Join(man.MountPoint, man.Dir, LayersDir) + "/"
	var lower []string
	for i := len(im.LayerMetas) - 1; i >= 0; i-- {
		sp := im.LayerMetas[i].StorePath
		n, ok := strings.CutPrefix(sp, layers)
		if _, err := strconv.Atoi(n); !ok || err != nil {
			return nil, Result{Miss: MissTampered, Detail: fmt.Sprintf("layer %s: store_path %q is not a layer directory of the store", im.LayerMetas[i].CompressedDigest, sp)}
		}
		st, err := os.Lstat(filepath.Join(store, LayersDir, n))
		if err != nil || !st.IsDir() {
			return nil, Result{Miss: MissLayer, Detail: fmt.Sprintf("layer %s: %s is not there", im.LayerMetas[i].CompressedDigest, sp)}
		}
		lower = append(lower, sp)
	}
	return lower, Result{Hit: true}
}

// loadManifest reads the store's manifest beneath a mounted disk. Its
// Result is a hit when the manifest is whole and the store is where its
// store_paths say (when mounted: a store still on the build host is not).
func loadManifest(mountPoint string, mounted bool) (Manifest, string, Result) {
	var man Manifest
	miss := func(m Miss, f string, a ...any) (Manifest, string, Result) {
		return man, "", Result{Miss: m, Detail: fmt.Sprintf(f, a...)}
	}
	// The store's directory is named in the manifest; it is found by
	// the one name cachebuild gives it.
	store := filepath.Join(mountPoint, StoreDir)
	b, err := os.ReadFile(filepath.Join(store, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(store, MetaFile)); err == nil {
			return miss(MissHalfWritten, "%s is there without %s: the build did not finish", MetaFile, ManifestFile)
		}
		return miss(MissNoStore, "no %s on the disk", path.Join(StoreDir, ManifestFile))
	}
	if err != nil {
		return miss(MissHalfWritten, "%s: %v", ManifestFile, err)
	}
	if err := json.Unmarshal(b, &man); err != nil {
		return miss(MissHalfWritten, "%s: %v", ManifestFile, err)
	}
	if man.Format != FormatVersion {
		return miss(MissGuestComponents, "%s is format %d, this reader knows %d", ManifestFile, man.Format, FormatVersion)
	}
	if man.Dir != StoreDir || mounted && path.Clean(mountPoint) != man.MountPoint {
		return miss(MissMoved, "the store's store_paths are beneath %s, the disk is mounted at %s", path.Join(man.MountPoint, man.Dir), path.Join(mountPoint, StoreDir))
	}
	return man, store, Result{Hit: true}
}

// ReadManifest reads the store's manifest beside a layout built at root
// (not mounted: its store_paths are not checked against root), for tools
// that ask which images a cache holds unpacked; a Result that is no hit
// says why there is no usable store.
func ReadManifest(root string) (Manifest, Result) {
	man, _, r := loadManifest(root, false)
	return man, r
}

// StoreDir is the store's directory on the cache disk, beside the OCI
// layout's index.json and blobs.
const StoreDir = "image-rs"

// Verify checks every file of the store at root (a disk's root, mounted
// or not) against the manifest: meta_store.json,
// each layer's entry list, and each layer's tree (every path there, and
// nothing else; each file's bytes, each link's target). With applied, the
// owners, modes, whiteouts, devices and opaque marks must be on the files
// too (a disk as cachebuild writes it, or a store Apply has run on). It
// reads every byte: it is the check a podVM can make before it trusts a
// store while dm-verity is not there yet, not one for each pull.
func Verify(ctx context.Context, mountPoint string, applied bool) error {
	man, store, r := loadManifest(mountPoint, false)
	if !r.Hit {
		return fmt.Errorf("%s: %s", r.Miss, r.Detail)
	}
	mb, err := os.ReadFile(filepath.Join(store, MetaFile))
	if err != nil {
		return err
	}
	if d := digest(mb); d != man.MetaStore {
		return fmt.Errorf("%s is %s, the manifest says %s", MetaFile, d, man.MetaStore)
	}
	for _, l := range man.Layers {
		entries, err := readEntries(store, l)
		if err != nil {
			return err
		}
		if err := verifyLayer(ctx, filepath.Join(store, LayersDir, strconv.Itoa(l.Index)), entries, applied); err != nil {
			return fmt.Errorf("layer %d (%s): %w", l.Index, l.CompressedDigest, err)
		}
	}
	return nil
}

// readEntries reads a layer's entry list, checked against the manifest.
func readEntries(store string, l ManifestLayer) ([]Entry, error) {
	b, err := os.ReadFile(filepath.Join(store, EntriesDir, strconv.Itoa(l.Index)+".json"))
	if err != nil {
		return nil, err
	}
	if d := digest(b); d != l.Entries {
		return nil, fmt.Errorf("layer %d's entry list is %s, the manifest says %s", l.Index, d, l.Entries)
	}
	var entries []Entry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, err
	}
	return entries, nil
}

// Entries reads a stored layer's entry list, checked against the manifest,
// for the disk build's pass that sets what a directory cannot hold.
func Entries(mountPoint string) (Manifest, map[int][]Entry, error) {
	man, store, r := loadManifest(mountPoint, false)
	if !r.Hit {
		return man, nil, fmt.Errorf("%s: %s", r.Miss, r.Detail)
	}
	out := map[int][]Entry{}
	for _, l := range man.Layers {
		e, err := readEntries(store, l)
		if err != nil {
			return man, nil, err
		}
		out[l.Index] = e
	}
	return man, out, nil
}

func verifyLayer(ctx context.Context, dir string, entries []Entry, applied bool) error {
	want := map[string]Entry{}
	for _, e := range entries {
		want[e.Path] = e
	}
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// It reads every byte of a store that may be gigabytes: a
		// podVM's unit stopped by systemd ends it between files.
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		e, ok := want[rel]
		if !ok {
			return fmt.Errorf("%q is in the layer's directory but not in its entry list", rel)
		}
		seen++
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if err := checkEntry(p, e, st, applied); err != nil {
			return fmt.Errorf("%q: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(e.Path))); err != nil && (applied || onHost(e.Type)) {
			return fmt.Errorf("%q (%s) is in the entry list but not in the layer's directory", e.Path, e.Type)
		}
	}
	return nil
}

// onHost says whether a builder that is not root writes the entry's type
// into the layer's directory itself.
func onHost(t string) bool {
	return t == TypeDir || t == TypeFile || t == TypeSymlink || t == TypeHardlink
}

func checkEntry(p string, e Entry, st fs.FileInfo, applied bool) error {
	m := st.Mode()
	switch e.Type {
	case TypeDir:
		if !m.IsDir() {
			return fmt.Errorf("is %v, the list says a directory", m.Type())
		}
	case TypeFile, TypeHardlink:
		if !m.IsRegular() || st.Size() != e.Size {
			return fmt.Errorf("is %v of %d bytes, the list says a file of %d", m.Type(), st.Size(), e.Size)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != e.SHA256 {
			return fmt.Errorf("its bytes are sha256:%s, the list says sha256:%s", got, e.SHA256)
		}
	case TypeSymlink:
		t, err := os.Readlink(p)
		if err != nil || t != e.Link {
			return fmt.Errorf("links to %q, the list says %q", t, e.Link)
		}
	case TypeWhiteout, TypeChar:
		if m&fs.ModeCharDevice == 0 {
			return fmt.Errorf("is %v, the list says a character device", m.Type())
		}
	case TypeBlock:
		if m&fs.ModeDevice == 0 || m&fs.ModeCharDevice != 0 {
			return fmt.Errorf("is %v, the list says a block device", m.Type())
		}
	case TypeFifo:
		if m&fs.ModeNamedPipe == 0 {
			return fmt.Errorf("is %v, the list says a FIFO", m.Type())
		}
	}
	if applied {
		return checkApplied(p, e, st)
	}
	return nil
}
