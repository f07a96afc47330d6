package cachemirror

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// MaxManifestSize bounds what is read of a manifest, an index or the
// layout's index.json: registries refuse manifests over 4 MiB (the
// distribution spec's recommended limit), so a larger one on a cache disk
// was not written by cache build.
const MaxManifestSize = 4 << 20

// maxNesting bounds how deep indexes may nest below index.json: cache
// build writes an image's index and its platform's manifest (two), and a
// registry's index of indexes is one more; a deeper chain is crafted.
const maxNesting = 4

// ErrLink is why a symbolic link in a layout is refused wherever it is: a
// link on the cache disk could name any file of the podVM, and cache build
// writes none.
var ErrLink = errors.New("a symbolic link, which the cache never follows")

// errNotRegular is why a layout's device, FIFO or directory is refused
// where a file was to be: reading one could block or read the podVM's own.
var (
	errNotRegular = errors.New("not a regular file")
	errNotDir     = errors.New("not a directory")
)

// rebuild is the fix for a layout that is not as cache build wrote it.
const rebuild = "the layout is not as gcp-t4 cache build wrote it; build it again (docs/cache.md)"

// Layout is an OCI image layout opened for reading: every file of it is
// opened beneath its directory without following a symbolic link
// (openBeneath), so nothing on the disk can make a reader leave it.
type Layout struct {
	dir  string
	root *os.File
}

// Descriptor is an OCI content descriptor as a layout's index and
// manifests write it.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an image manifest or an image index read from a layout:
// the descriptor it was reached by, and what it names.
type Manifest struct {
	Descriptor
	// Manifests are an index's entries.
	Manifests []Descriptor
	// Config and Layers are an image manifest's.
	Config Descriptor
	Layers []Descriptor
}

// OpenLayout opens the layout directory dir. The caller closes it.
func OpenLayout(dir string) (*Layout, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s: not a directory", dir)
		}
		return nil, err
	}
	return &Layout{dir: dir, root: f}, nil
}

// Close releases the layout's directory.
func (l *Layout) Close() error { return l.root.Close() }

// open opens name, slash-separated plain components below the layout's
// directory, as a regular file.
func (l *Layout) open(name string) (*os.File, error) {
	parts := strings.Split(name, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
		}
	}
	return openBeneath(l.root, l.dir, parts)
}

// readFile reads name from the layout, refusing more than limit bytes.
func (l *Layout) readFile(name string, limit int64) ([]byte, error) {
	f, err := l.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes: %s", name, limit, rebuild)
	}
	return b, nil
}

// checkDigest says why digest cannot name a blob of a cache: cache build
// writes sha256 digests only, and only a digest of that form maps to a
// file name that stays within blobs/sha256.
func checkDigest(digest string) error {
	if !digestRE.MatchString(digest) {
		return fmt.Errorf("digest %q is not sha256: followed by 64 lower-case hex digits", digest)
	}
	return nil
}

// OpenBlob opens the blob digest names, refusing a digest of any other
// form and a blob that is a symbolic link or not a regular file.
func (l *Layout) OpenBlob(digest string) (*os.File, error) {
	if err := checkDigest(digest); err != nil {
		return nil, err
	}
	return l.open("blobs/sha256/" + strings.TrimPrefix(digest, "sha256:"))
}

// ReadManifest reads the manifest or index d names, and returns its bytes
// only when they are what d says: d's size within MaxManifestSize and
// equal to the blob's, and the blob hashing to d's digest. A blob the
// layout does not hold is an error that is fs.ErrNotExist. Its errors do
// not name d: the caller does.
func (l *Layout) ReadManifest(d Descriptor) ([]byte, error) {
	if err := checkDigest(d.Digest); err != nil {
		return nil, err
	}
	if d.Size <= 0 || d.Size > MaxManifestSize {
		return nil, fmt.Errorf("size %d, want 1 to %d bytes for a manifest", d.Size, MaxManifestSize)
	}
	f, err := l.OpenBlob(d.Digest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, d.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.Size {
		more := "fewer"
		if int64(len(b)) > d.Size {
			more = "more"
		}
		return nil, fmt.Errorf("the blob holds %s bytes than the descriptor's size %d", more, d.Size)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest {
		return nil, fmt.Errorf("the blob's bytes hash to %s", got)
	}
	return b, nil
}

// Walk reads the manifest or index d names, and every manifest and index
// below it, each checked by ReadManifest, and calls fn with each once,
// parents first, in the order they are listed. A manifest the layout does
// not hold is passed over: cache build keeps an index's one platform
// image, not the others it lists. A digest met again is read once, an
// index that lists one of its own ancestors is refused, and so is nesting
// deeper than maxNesting, so a crafted layout cannot make Walk loop. Each
// error names the chain of descriptors from d and the fix.
func (l *Layout) Walk(d Descriptor, fn func(Manifest) error) error {
	return l.walk(d, fn, map[string]bool{}, nil)
}

func (l *Layout) walk(d Descriptor, fn func(Manifest) error, seen map[string]bool, chain []string) error {
	shown := d.Digest
	if checkDigest(shown) != nil {
		shown = fmt.Sprintf("%q", shown)
	}
	where := strings.Join(append(append([]string{"index.json"}, chain...), shown), " -> ")
	if slices.Contains(chain, d.Digest) {
		return fmt.Errorf("%s: an index lists itself or an index above it: %s", where, rebuild)
	}
	if len(chain) >= maxNesting {
		return fmt.Errorf("%s: indexes nested over %d deep: %s", where, maxNesting, rebuild)
	}
	if seen[d.Digest] {
		return nil
	}
	seen[d.Digest] = true
	b, err := l.ReadManifest(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %s", where, err, rebuild)
	}
	var m struct {
		MediaType string       `json:"mediaType"`
		Manifests []Descriptor `json:"manifests"`
		Config    Descriptor   `json:"config"`
		Layers    []Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: not a manifest: %w: %s", where, err, rebuild)
	}
	// Config and layers are served, not read here: their digests are
	// checked for form, and their sizes for sense, as every descriptor's.
	named := m.Layers
	if m.Config.Digest != "" {
		named = append([]Descriptor{m.Config}, named...)
	}
	for _, c := range append(named, m.Manifests...) {
		if err := checkDigest(c.Digest); err != nil {
			return fmt.Errorf("%s: lists a descriptor whose %w: %s", where, err, rebuild)
		}
		if c.Size < 0 {
			return fmt.Errorf("%s: lists %s with size %d: %s", where, c.Digest, c.Size, rebuild)
		}
	}
	if err := fn(Manifest{Descriptor: d, Manifests: m.Manifests, Config: m.Config, Layers: m.Layers}); err != nil {
		return err
	}
	for _, c := range m.Manifests {
		if err := l.walk(c, fn, seen, append(slices.Clone(chain), d.Digest)); err != nil {
			return err
		}
	}
	return nil
}
