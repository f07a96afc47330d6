package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
	"github.com/caa-gcp-t4/gcp-t4/internal/initdata"
	"github.com/caa-gcp-t4/gcp-t4/internal/modelcar"
)

// cacheFix is what to give --cache, said in every error about it.
const cacheFix = "give the directory that gcp-t4 cache build -o DIR IMAGE@sha256:DIGEST... wrote (docs/cache.md)"

// cacheLayout is what a cache disk holds: the OCI image layout `gcp-t4
// cache build -o DIR` wrote, which the podVM's mirror serves.
type cacheLayout struct {
	Dir    string
	Images []cachedImage
	// StoreMiss says why the layout's pre-unpacked store (imagestore)
	// cannot be used by the podVM this tree builds: none, half-written, or
	// for another guest-components; "" when it can.
	StoreMiss string
}

// cachedImage is one image the layout's index.json names.
type cachedImage struct {
	// Ref is the reference it was built from (its ref.name annotation);
	// Repo and Digest its repository, in full (index.docker.io/…), and
	// digest.
	Ref, Repo, Digest string
	// Bytes is what a pull of it moves (config and layers, compressed),
	// read from the layout's manifests; 0 when they are not there.
	Bytes int64
	// Stored: the pre-unpacked store holds it, so the podVM's pull is a
	// manifest fetch and an overlay mount (docs/cache.md).
	Stored bool
	// ModelBytes are the weights of a model image (gcp-t4 cache model's
	// label); 0 for any other image.
	ModelBytes int64
}

// readCache reads the layout at dir: its oci-layout marker and the images
// its index.json names, each pinned by digest as cache build pins them.
func readCache(dir string) (*cacheLayout, error) {
	bad := func(why string) error { return fmt.Errorf("--cache %s: %s: %s", dir, why, cacheFix) }
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, bad("no such directory")
		}
		return nil, fmt.Errorf("--cache %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, bad("not a directory")
	}
	l, err := cachemirror.OpenLayout(dir)
	if err != nil {
		return nil, fmt.Errorf("--cache %s: %w", dir, err)
	}
	defer l.Close()
	imgs, err := l.Images()
	if err != nil {
		// The mirror's reader names dir first; bad names it already.
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), dir+": "), dir+" is ")
		return nil, bad(msg)
	}
	c := &cacheLayout{Dir: dir}
	for _, i := range imgs {
		dg, err := name.NewDigest(i.Ref, name.WeakValidation)
		if err != nil || dg.DigestStr() != i.Digest {
			return nil, bad(fmt.Sprintf("index.json names %q for %s: cache build names each image by its reference pinned to that digest", i.Ref, i.Digest))
		}
		n, cfg, err := pullBytes(l, i.Descriptor())
		if err != nil {
			// err names the descriptors from index.json down and the fix.
			return nil, fmt.Errorf("--cache %s: image %q: %w", dir, i.Ref, err)
		}
		mb, err := modelBytes(l, cfg)
		if err != nil {
			return nil, fmt.Errorf("--cache %s: image %q: %w", dir, i.Ref, err)
		}
		c.Images = append(c.Images, cachedImage{Ref: i.Ref, Repo: dg.Context().Name(), Digest: i.Digest, Bytes: n, ModelBytes: mb})
	}
	if len(c.Images) == 0 {
		return nil, bad("index.json names no image (no " + cachemirror.RefNameAnnotation + " annotation)")
	}
	c.readStore()
	return c, nil
}

// readStore marks the images the layout's pre-unpacked store holds, for
// the guest-components this tree's podVM ships (imagestore.GuestComponents):
// a store for another one is not used by the podVM, which then pulls
// through its mirror.
func (c *cacheLayout) readStore() {
	man, r := imagestore.ReadManifest(c.Dir)
	switch {
	case !r.Hit:
		c.StoreMiss = string(r.Miss) + ": " + r.Detail
		return
	case man.GuestComponents != imagestore.GuestComponents:
		c.StoreMiss = fmt.Sprintf("%s: the store is for guest-components %.12s, this podVM's is %.12s; build the cache again with this gcp-t4",
			imagestore.MissGuestComponents, man.GuestComponents, imagestore.GuestComponents)
		return
	}
	stored := map[string]bool{}
	for _, mi := range man.Images {
		stored[mi.Reference] = true
	}
	for i := range c.Images {
		c.Images[i].Stored = stored[c.Images[i].Ref]
	}
}

// Ways a pod's image stands with the cache.
const (
	inCache    = "cached"   // pinned by digest, and the layout holds it
	notInCache = "uncached" // pinned by digest, and the layout does not hold it
	byTag      = "tag"      // not pinned: never taken from the cache
)

// lookup says how image stands with the cache; for an image by tag, the
// images of its repository the cache holds.
func (c *cacheLayout) lookup(image string) (string, cachedImage, []cachedImage) {
	ref, err := name.ParseReference(image, name.WeakValidation)
	if err != nil {
		return notInCache, cachedImage{}, nil
	}
	dg, pinned := ref.(name.Digest)
	var same []cachedImage
	for _, ci := range c.Images {
		if ci.Repo != ref.Context().Name() {
			continue
		}
		if pinned && ci.Digest == dg.DigestStr() {
			return inCache, ci, nil
		}
		same = append(same, ci)
	}
	if !pinned {
		return byTag, cachedImage{}, same
	}
	return notInCache, cachedImage{}, nil
}

// pullBytes is what pulling d moves: its image manifest's config and
// layers, compressed (for an index, of the one image cache build keeps
// beside it); 0 when a manifest is missing. The layout is read as the
// mirror reads it (cachemirror.Layout.Walk): no symbolic link followed,
// every descriptor's digest of sha256 form, every manifest's bytes
// hashed against its digest and its size bounded, nesting bounded, so a
// crafted layout can neither make plan read outside it nor loop.
func pullBytes(l *cachemirror.Layout, d cachemirror.Descriptor) (int64, cachemirror.Descriptor, error) {
	var n int64
	var cfg cachemirror.Descriptor
	err := l.Walk(d, func(m cachemirror.Manifest) error {
		if n > 0 || len(m.Layers) == 0 {
			return nil
		}
		cfg = m.Config
		sum := m.Config.Size
		for _, b := range m.Layers {
			if b.Size > math.MaxInt64-sum {
				return fmt.Errorf("%s: its layers' sizes add up past %d bytes: the layout is not as gcp-t4 cache build wrote it; build it again", m.Digest, int64(math.MaxInt64))
			}
			sum += b.Size
		}
		n = sum
		return nil
	})
	return n, cfg, err
}

// maxConfig bounds the image config plan reads from a layout: a config is
// a few kilobytes; a layout is the admin's, but read as the mirror reads
// it, bounded.
const maxConfig = 1 << 20

// modelBytes is the weights a model image holds, from its config's label
// (modelcar.BytesLabel, which gcp-t4 cache model writes); 0 for an
// image without it. The config is checked against its digest.
func modelBytes(l *cachemirror.Layout, cfg cachemirror.Descriptor) (int64, error) {
	if cfg.Digest == "" || cfg.Size > maxConfig {
		return 0, nil
	}
	f, err := l.OpenBlob(cfg.Digest)
	if err != nil {
		return 0, nil // a pull would fail; pullBytes' size is what plan tells
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return 0, err
	}
	if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != cfg.Digest {
		return 0, fmt.Errorf("config %s does not match its digest: the layout is not as gcp-t4 cache build wrote it; build it again", cfg.Digest)
	}
	var c struct {
		Config struct {
			Labels map[string]string `json:"Labels"`
		} `json:"config"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("config %s: %w", cfg.Digest, err)
	}
	v, ok := c.Config.Labels[modelcar.BytesLabel]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("config %s: label %s=%q is not a size in bytes", cfg.Digest, modelcar.BytesLabel, v)
	}
	return n, nil
}

// mirrorNamed says why a pod's image, though in the cache, would not be
// read from it: image-rs asks the podVM's mirror only when the pod's
// initdata names it (docs/cache.md). "" when the initdata names the
// mirror's repository for the image, as gcp-t4 cache initdata writes it.
// A text match, not image-rs's own rule matching (cache check follows
// those): enough to tell a pod without the annotation, or with another.
func mirrorNamed(ann map[string]string, ci cachedImage) string {
	v, ok := ann[initdata.Annotation]
	if !ok {
		return "the pod has no initdata (" + initdata.Annotation + ")"
	}
	text, err := initdata.Decode(v)
	if err != nil {
		return "its initdata is " + err.Error()
	}
	want := `"` + cachemirror.Listen + "/" + cachemirror.RepositoryPath(ci.Ref) + `"`
	if !strings.Contains(text, want) {
		return "its initdata names no mirror " + strings.Trim(want, `"`)
	}
	return ""
}
