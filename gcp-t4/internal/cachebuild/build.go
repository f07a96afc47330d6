// Package cachebuild builds the contents of a cache disk (docs/cache.md):
// an OCI image layout holding the images a workload pulls, each pinned by
// digest, which the podVM's registry mirror (cachemirror) serves to
// image-rs, and beside it the same images unpacked in image-rs's own store
// format (imagestore). It uses go-containerregistry, a well-kept implementation of
// the registry protocol and the layout format, rather than our own.
package cachebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// Image is one image written to the layout.
type Image struct {
	// Ref is the reference as given, pinned by digest.
	Ref string
	// Digest is what the reference names: an index (multi-platform) or
	// an image manifest.
	Digest string
	// Manifest is the platform's image manifest (equal to Digest for a
	// single-platform reference).
	Manifest string
	// Layers and Bytes count the platform image's layers and its
	// compressed size (config and layers).
	Layers int
	Bytes  int64
	// NotUnpacked says why the image is not in the pre-unpacked store
	// (empty when it is): the mirror still serves it.
	NotUnpacked string
}

// Options say what to build.
type Options struct {
	// Platform is the one image of an index the layout keeps (the podVM's:
	// linux/amd64); the index itself is kept too, so a pull by the index's
	// digest resolves.
	Platform v1.Platform
	// Remote are go-containerregistry's options (transport, auth).
	Remote []remote.Option
}

// Build writes refs into a new OCI image layout at dir, which must not
// exist or be empty. Every reference must be pinned by digest: a tag
// would let the cache drift from what the pod's spec names, and image-rs
// checks a manifest only when it is asked for by digest.
func Build(ctx context.Context, dir string, refs []string, o Options) ([]Image, error) {
	if len(refs) == 0 {
		return nil, errors.New("no images: name each as REPOSITORY@sha256:DIGEST")
	}
	var parsed []name.Digest
	for _, r := range refs {
		d, err := name.NewDigest(r, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("image %q: pin it by digest, as REPOSITORY@sha256:DIGEST (the digest a pull by tag prints): %w", r, err)
		}
		parsed = append(parsed, d)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty: build into a new directory", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("starting the layout in %s: %w", dir, err)
	}
	opts := append([]remote.Option{remote.WithContext(ctx), remote.WithPlatform(o.Platform)}, o.Remote...)
	var out []Image
	var store []imagestore.Image
	for _, ref := range parsed {
		img, si, err := add(p, ref, opts)
		if err != nil {
			_ = os.RemoveAll(dir) // nothing half-written is left to be imaged
			return nil, fmt.Errorf("image %s: %w", ref, err)
		}
		out = append(out, img)
		store = append(store, si)
	}
	// The same images, unpacked beside the layout as image-rs unpacks
	// them, for the podVM to hand image-rs (docs/cache.md, "The
	// pre-unpacked store"); read from the layout, so from what the disk
	// holds.
	sum, err := imagestore.Write(dir, cachemirror.Dir, store)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("the pre-unpacked store: %w", err)
	}
	for _, s := range sum.Skipped {
		for i := range out {
			if strings.HasPrefix(s, untaggedString(out[i].Ref)+":") {
				out[i].NotUnpacked = strings.TrimPrefix(s, untaggedString(out[i].Ref)+": ")
			}
		}
	}
	return out, nil
}

// storeImage is img for the pre-unpacked store, its layers read from the
// layout at p (what the disk holds), decompressed by go-containerregistry.
func storeImage(p layout.Path, ref string, img v1.Image) (imagestore.Image, error) {
	mdig, err := img.Digest()
	if err != nil {
		return imagestore.Image{}, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return imagestore.Image{}, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return imagestore.Image{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return imagestore.Image{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return imagestore.Image{}, err
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		// image-rs refuses such an image (image-rs/src/image.rs:494-497).
		return imagestore.Image{}, fmt.Errorf("%d layers but %d diff_ids in its config", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	si := imagestore.Image{Reference: ref, Manifest: mdig.String(), ConfigDigest: cfgName.String(), Config: cfg}
	for i, d := range m.Layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return p.Blob(d.Digest) })
		if err != nil {
			return imagestore.Image{}, err
		}
		si.Layers = append(si.Layers, imagestore.Layer{Digest: d.Digest.String(), DiffID: cf.RootFS.DiffIDs[i].String(),
			MediaType: string(d.MediaType), Uncompressed: l.Uncompressed})
	}
	return si, nil
}

func add(p layout.Path, ref name.Digest, opts []remote.Option) (Image, imagestore.Image, error) {
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return Image{}, imagestore.Image{}, err
	}
	img, err := desc.Image() // the platform's, for an index
	if err != nil {
		return Image{}, imagestore.Image{}, err
	}
	if err := p.WriteImage(img); err != nil {
		return Image{}, imagestore.Image{}, fmt.Errorf("writing its blobs: %w", err)
	}
	mdig, err := img.Digest()
	if err != nil {
		return Image{}, imagestore.Image{}, err
	}
	if desc.MediaType.IsIndex() {
		// The index manifest as the registry served it (its digest is
		// the reference's), beside the one platform image it names.
		if err := p.WriteBlob(desc.Digest, io.NopCloser(bytes.NewReader(desc.Manifest))); err != nil {
			return Image{}, imagestore.Image{}, fmt.Errorf("writing its index: %w", err)
		}
	}
	d := desc.Descriptor
	// The reference without any tag it was given beside its digest: the
	// cache answers by digest only, so a tag on the disk would be a name
	// the mirror could be asked for without the client checking what it
	// gets (docs/threat-model.md).
	d.Annotations = map[string]string{cachemirror.RefNameAnnotation: untagged(ref)}
	if err := p.AppendDescriptor(d); err != nil {
		return Image{}, imagestore.Image{}, fmt.Errorf("recording it in index.json: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, imagestore.Image{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, imagestore.Image{}, err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	si, err := storeImage(p, untagged(ref), img)
	if err != nil {
		return Image{}, imagestore.Image{}, err
	}
	return Image{Ref: ref.String(), Digest: desc.Digest.String(), Manifest: mdig.String(), Layers: len(layers), Bytes: size}, si, nil
}

// Verify re-reads every blob of the layout at dir against its digest, and
// every file of the pre-unpacked store against its manifest, as
// the last step before the layout is imaged: a disk made from a layout
// with a bad blob would only fail in the guest.
func Verify(dir string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	err = filepath.WalkDir(filepath.Join(string(p), "blobs", "sha256"), func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h, _, err := v1.SHA256(f)
		if err != nil {
			return err
		}
		if h.Hex != e.Name() {
			return fmt.Errorf("blob %s has digest sha256:%s: the layout is damaged; build it again", e.Name(), h.Hex)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := imagestore.Verify(context.Background(), dir, false); err != nil {
		return fmt.Errorf("the pre-unpacked store: %w; build it again", err)
	}
	return nil
}

// untagged is ref as written, less a tag it carries beside its digest
// (REPOSITORY:TAG@sha256:… → REPOSITORY@sha256:…).
func untagged(ref name.Digest) string {
	repo, _, _ := strings.Cut(ref.String(), "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return repo + "@" + ref.DigestStr()
}

// untaggedString is untagged for a reference already validated.
func untaggedString(ref string) string {
	d, err := name.NewDigest(ref, name.StrictValidation)
	if err != nil {
		return ref
	}
	return untagged(d)
}
