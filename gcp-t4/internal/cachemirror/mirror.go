// Package cachemirror serves an OCI image layout, read-only, as a
// registry: the pull endpoints of the OCI distribution spec (GET and HEAD
// of /v2/, of manifests and of blobs), for the registry mirror image-rs
// reads images through inside the podVM (docs/cache.md). It checks no
// layer's digest: the client does (image-rs verifies every layer while
// streaming it), so what the cache disk holds is never trusted, and a blob
// that does not match is refused there. What it does check is where it
// reads: every file is opened beneath the layout without following a
// symbolic link (Layout), and each repository is served only the digests
// its own images name, read from manifests checked against their digests
// when the mirror starts. It links the standard library only: it runs in
// the podVM.
package cachemirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
)

// RefNameAnnotation names an image in the layout's index.json
// (image-spec image-layout.md): the full reference it was built from.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Mirror is one OCI image layout served as a registry.
type Mirror struct {
	layout *Layout
	log    *slog.Logger
	// repos are the repositories the layout holds, as a mirror is asked
	// for them (the reference's path without its registry host), each
	// with the digests it is served: its images' manifests and indexes
	// and the blobs they name. A digest is answered under a repository
	// only when one of that repository's images names it, so no name
	// serves another image's blobs.
	repos map[string]map[string]bool
	// images counts the index's named images.
	images int
	// manifestOf and layerOf map a manifest's (or a nested index's) and a
	// layer's digest to the index entries (top-level images) and the
	// manifests that name them, for the pull lines.
	manifestOf, layerOf map[string][]string
	// pulls, when set, hears one PullPrefix line per image and what was
	// served of it (TellPulls).
	pulls *pullLog
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Image is one image a layout's index.json names: the descriptor cache
// build wrote for it.
type Image struct {
	// Ref is the reference it was built from (its ref.name annotation).
	Ref string
	// Path is the repository the mirror serves it under: Ref's path
	// without its registry host, tag or digest.
	Path string
	// MediaType, Digest and Size are the index entry's: an image index or
	// an image manifest.
	MediaType string
	Digest    string
	Size      int64
}

// Descriptor is the index entry img was read from.
func (img Image) Descriptor() Descriptor {
	return Descriptor{MediaType: img.MediaType, Digest: img.Digest, Size: img.Size}
}

// Images reads the layout at dir, its oci-layout marker and index.json,
// and returns the images the index names: the one reader of a cache's
// contents, for the mirror, plan and cache check alike.
func Images(dir string) ([]Image, error) {
	l, err := OpenLayout(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	defer l.Close()
	return l.Images()
}

// Images reads the layout's oci-layout marker and index.json, and returns
// the images the index names. An entry without a name is passed over; a
// named entry whose digest is not a sha256 digest is refused.
func (l *Layout) Images() ([]Image, error) {
	dir := l.dir
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := l.readJSON("oci-layout", &marker); err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	if marker.Version != "1.0.0" {
		return nil, fmt.Errorf("%s: image layout version %q, want 1.0.0", dir, marker.Version)
	}
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := l.readJSON("index.json", &index); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", dir, err)
	}
	var out []Image
	for _, d := range index.Manifests {
		ref := d.Annotations[RefNameAnnotation]
		if ref == "" {
			continue
		}
		if err := checkDigest(d.Digest); err != nil {
			return nil, fmt.Errorf("%s: index.json names %q by a bad digest: %w: %s", dir, ref, err, rebuild)
		}
		out = append(out, Image{Ref: ref, Path: RepositoryPath(ref), MediaType: d.MediaType, Digest: d.Digest, Size: d.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: index.json names no image (%s annotations)", dir, RefNameAnnotation)
	}
	return out, nil
}

// Open reads the layout at dir to serve it: its images (Images) and,
// through each image's manifests (Walk, which checks each against its
// digest), the digests each repository is served. A layout any of whose
// manifests fails those checks is refused whole: cache build wrote none
// such, so the disk was changed. log hears of each blob refused.
func Open(dir string, log *slog.Logger) (*Mirror, error) {
	l, err := OpenLayout(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	imgs, err := l.Images()
	if err != nil {
		l.Close()
		return nil, err
	}
	m := &Mirror{layout: l, log: log, repos: map[string]map[string]bool{}, images: len(imgs),
		manifestOf: map[string][]string{}, layerOf: map[string][]string{}}
	for _, i := range imgs {
		served := m.repos[i.Path]
		if served == nil {
			served = map[string]bool{}
			m.repos[i.Path] = served
		}
		served[i.Digest] = true
		addTop(m.manifestOf, i.Digest, i.Digest)
		err := l.Walk(i.Descriptor(), func(man Manifest) error {
			served[man.Digest] = true
			// A pod may pin the index or one platform's manifest: the
			// lines name both.
			addTop(m.manifestOf, man.Digest, i.Digest)
			addTop(m.manifestOf, man.Digest, man.Digest)
			if man.Config.Digest != "" {
				served[man.Config.Digest] = true
			}
			for _, b := range man.Layers {
				served[b.Digest] = true
				addTop(m.layerOf, b.Digest, i.Digest)
				addTop(m.layerOf, b.Digest, man.Digest)
			}
			return nil
		})
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("%s: %s: %w", dir, i.Ref, err)
		}
	}
	return m, nil
}

// Close releases the layout.
func (m *Mirror) Close() error { return m.layout.Close() }

// Repositories lists what the mirror serves.
func (m *Mirror) Repositories() []string {
	out := make([]string, 0, len(m.repos))
	for r := range m.repos {
		out = append(out, r)
	}
	return out
}

// Images is how many images the layout's index names.
func (m *Mirror) Images() int { return m.images }

// RepositoryPath is the path the mirror serves ref under: the reference's
// path without its registry host (a first component holding a '.' or a
// ':', or localhost), tag and digest; a registries.conf mirror entry asks
// for it there.
func RepositoryPath(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	if host, rest, ok := strings.Cut(ref, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		ref = rest
	}
	return ref
}

func (l *Layout) readJSON(name string, v any) error {
	b, err := l.readFile(name, MaxManifestSize)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// ServeHTTP answers the distribution spec's pull requests.
func (m *Mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		apiError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "the cache mirror is read-only")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v2/")
	if path == r.URL.Path {
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "not a registry path")
		return
	}
	if path == "" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
		return
	}
	var repo, kind, ref string
	for _, k := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(path, k); i > 0 {
			repo, kind, ref = path[:i], strings.Trim(k, "/"), path[i+len(k):]
			break
		}
	}
	if kind == "" || m.repos[repo] == nil {
		if kind == "manifests" {
			m.pulls.tell(ref, ServedAbsent) // a tag is no digest: not told
		}
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", fmt.Sprintf("repository %q is not in the cache", repo))
		return
	}
	// No tags: a client checks a manifest against the digest it asked
	// for, never against a tag, so the cache answers by digest only and a
	// pull by tag goes on to the image's registry.
	if kind == "manifests" && !digestRE.MatchString(ref) {
		apiError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("%s:%s: the cache answers by digest only (pin the image by digest)", repo, ref))
		return
	}
	if !digestRE.MatchString(ref) {
		apiError(w, http.StatusNotFound, "DIGEST_INVALID", fmt.Sprintf("%q is not a sha256 digest", ref))
		return
	}
	if !m.repos[repo][ref] {
		if kind == "manifests" {
			m.pulls.tell(ref, ServedAbsent)
		}
		// Every cached image is readable by any pod that names the
		// mirror (docs/cache.md), but each under its own name only.
		code := "BLOB_UNKNOWN"
		if kind == "manifests" {
			code = "MANIFEST_UNKNOWN"
		}
		apiError(w, http.StatusNotFound, code, fmt.Sprintf("%s is not in the cache under %s", ref, repo))
		return
	}
	switch {
	case kind == "manifests":
		for _, top := range m.manifestOf[ref] {
			m.pulls.tell(top, ServedManifest)
		}
	case r.Method == http.MethodGet:
		for _, top := range m.layerOf[ref] {
			m.pulls.tell(top, ServedLayers)
		}
	}
	m.serveBlob(w, r, kind, ref)
}

func (m *Mirror) serveBlob(w http.ResponseWriter, r *http.Request, kind, digest string) {
	code := "BLOB_UNKNOWN"
	if kind == "manifests" {
		code = "MANIFEST_UNKNOWN"
	}
	f, err := m.layout.OpenBlob(digest)
	if errors.Is(err, os.ErrNotExist) {
		apiError(w, http.StatusNotFound, code, digest+" is not in the cache")
		return
	}
	if errors.Is(err, ErrLink) || errors.Is(err, errNotRegular) {
		// Refused, never followed: the client goes on to the registry.
		m.log.Warn("refused a blob of the cache disk", "digest", digest, "reason", err.Error())
		apiError(w, http.StatusNotFound, code, digest+" is refused by the cache: "+err.Error())
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	ctype := "application/octet-stream"
	if kind == "manifests" {
		// A manifest says its own media type; the client checks it
		// against the digest it asked for.
		var mt struct {
			MediaType string `json:"mediaType"`
		}
		b, err := io.ReadAll(io.LimitReader(f, 4<<20))
		if err != nil || json.Unmarshal(b, &mt) != nil || mt.MediaType == "" {
			apiError(w, http.StatusNotFound, code, digest+" is not a manifest")
			return
		}
		ctype = mt.MediaType
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			apiError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
			return
		}
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Docker-Content-Digest", digest)
	http.ServeContent(w, r, "", st.ModTime(), f)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
