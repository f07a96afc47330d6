// Package cachemirror serves an OCI image layout, read-only, as a
// registry: the pull endpoints of the OCI distribution spec (GET and HEAD
// of /v2/, of manifests and of blobs), for the registry mirror image-rs
// reads images through inside the podVM (docs/cache.md). It checks no
// digest: the client does (image-rs verifies every layer while streaming
// it), so what the cache disk holds is never trusted, and a blob that does
// not match is refused there. It links the standard library only: it runs
// in the podVM.
package cachemirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// RefNameAnnotation names an image in the layout's index.json
// (image-spec image-layout.md): the full reference it was built from.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Mirror is one OCI image layout served as a registry.
type Mirror struct {
	dir string
	// repos are the repositories the layout holds, as a mirror is asked
	// for them: the reference's path without its registry host.
	repos map[string]bool
	// images counts the index's named images.
	images int
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
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

// Images reads the layout at dir, its oci-layout marker and index.json,
// and returns the images the index names: the one reader of a cache's
// contents, for the mirror, plan and cache check alike.
func Images(dir string) ([]Image, error) {
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := readJSON(filepath.Join(dir, "oci-layout"), &marker); err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	if marker.Version != "1.0.0" {
		return nil, fmt.Errorf("%s: image layout version %q, want 1.0.0", dir, marker.Version)
	}
	var index struct {
		Manifests []struct {
			descriptor
			Size int64 `json:"size"`
		} `json:"manifests"`
	}
	if err := readJSON(filepath.Join(dir, "index.json"), &index); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", dir, err)
	}
	var out []Image
	for _, d := range index.Manifests {
		ref := d.Annotations[RefNameAnnotation]
		if ref == "" || !digestRE.MatchString(d.Digest) {
			continue
		}
		out = append(out, Image{Ref: ref, Path: RepositoryPath(ref), MediaType: d.MediaType, Digest: d.Digest, Size: d.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: index.json names no image (%s annotations)", dir, RefNameAnnotation)
	}
	return out, nil
}

// Open reads the layout at dir (Images) to serve it.
func Open(dir string) (*Mirror, error) {
	imgs, err := Images(dir)
	if err != nil {
		return nil, err
	}
	m := &Mirror{dir: dir, repos: map[string]bool{}, images: len(imgs)}
	for _, i := range imgs {
		m.repos[i.Path] = true
	}
	return m, nil
}

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

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
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
	if kind == "" || !m.repos[repo] {
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
	m.serveBlob(w, r, kind, ref)
}

func (m *Mirror) serveBlob(w http.ResponseWriter, r *http.Request, kind, digest string) {
	code := "BLOB_UNKNOWN"
	if kind == "manifests" {
		code = "MANIFEST_UNKNOWN"
	}
	f, err := os.Open(filepath.Join(m.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
	if errors.Is(err, os.ErrNotExist) {
		apiError(w, http.StatusNotFound, code, digest+" is not in the cache")
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
