package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/initdata"
)

// cacheFix is what to give --cache, said in every error about it.
const cacheFix = "give the directory that gcp-t4 cache build -o DIR IMAGE@sha256:DIGEST... wrote (docs/cache.md)"

// cacheLayout is what a cache disk holds: the OCI image layout `gcp-t4
// cache build -o DIR` wrote, which the podVM's mirror serves.
type cacheLayout struct {
	Dir    string
	Images []cachedImage
}

// cachedImage is one image the layout's index.json names.
type cachedImage struct {
	// Ref is the reference it was built from (its ref.name annotation);
	// Repo and Digest its repository, in full (index.docker.io/…), and
	// digest.
	Ref, Repo, Digest string
	// Bytes is what a pull of it moves (config and layers, compressed),
	// read from the layout's blobs; 0 when they are not all there.
	Bytes int64
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
	imgs, err := cachemirror.Images(dir)
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
		c.Images = append(c.Images, cachedImage{Ref: i.Ref, Repo: dg.Context().Name(), Digest: i.Digest,
			Bytes: pullBytes(dir, ociDescriptor{MediaType: i.MediaType, Digest: i.Digest, Size: i.Size})})
	}
	if len(c.Images) == 0 {
		return nil, bad("index.json names no image (no " + cachemirror.RefNameAnnotation + " annotation)")
	}
	return c, nil
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

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

// pullBytes is what pulling d moves: its image manifest's config and
// layers, compressed (for an index, of the one image cache build keeps
// beside it); 0 when a blob is missing.
func pullBytes(dir string, d ociDescriptor) int64 {
	blob := func(digest string, v any) bool {
		alg, hex, ok := strings.Cut(digest, ":")
		return ok && readJSON(filepath.Join(dir, "blobs", alg, hex), v) == nil
	}
	var m struct {
		Manifests []ociDescriptor `json:"manifests"`
		Config    ociDescriptor   `json:"config"`
		Layers    []ociDescriptor `json:"layers"`
	}
	if !blob(d.Digest, &m) {
		return 0
	}
	// An index: cache build writes the platform's image and the index,
	// so the image is the one of its manifests whose blob is there.
	for _, sub := range m.Manifests {
		if p := pullBytes(dir, sub); p > 0 {
			return p
		}
	}
	if len(m.Layers) == 0 {
		return 0
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
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
