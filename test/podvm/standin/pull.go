package main

// The pull measurement of issue 52 (docs/benchmarks.md, "pre-unpacked
// store in a podVM"): the same image pulled two ways inside the booted
// podVM, each timed from the pull request to a mounted rootfs, the way
// image-rs at guest-components dcd55ea16ea4 does it:
//
//   - store: the manifest and the config from the podVM's cache mirror
//     (image-rs always fetches both: image.rs:385-388), the config digest
//     looked up in image_db of the meta_store.json podvm-cache-store put in
//     the work_dir (loaded once, when CDH builds its client: builder.rs
//     184-191, so it is read before the clock starts), then an overlay of
//     the entry's layer store_paths, last first (image.rs:391-401,
//     snapshots/overlay.rs:31-99). No layer is fetched or unpacked.
//   - mirror: the manifest and config the same way, then each layer from
//     the mirror, at most 3 at once (DEFAULT_MAX_CONCURRENT_DOWNLOAD,
//     config.rs:29), its compressed digest and its diff_id checked while
//     it is gunzipped and untarred into a directory of its own
//     (pull.rs:120-215, stream/unpack.rs), then the same overlay mount.
//
// What is modelled: the unpacker handles the entry kinds the fixture's
// images hold (directories, regular files, symbolic links, hard links,
// whiteouts as image-rs writes them) and none of image-rs's xattr or
// ownership work beyond chown; there is no signature check on either path
// (image-rs's runs only on a miss, with a policy the pod's initdata names).
// The rootfs of each path is then read whole, through dm-verity, so that
// an image whose bytes were changed on the disk is refused on both paths.

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pullSpec is the metadata attribute caa-gcp-t4-standin-pull the boot
// test serves: the fixture's two images as repository@digest, the names
// the cache mirror serves them under.
type pullSpec struct {
	Good     string `json:"good"`
	Tampered string `json:"tampered"`
	// Model is a model image (gcp-t4 cache model's), pulled from the store
	// only, as a pod's model sidecar is: its files are read and hashed,
	// as the engine reads the weights through the sidecar's link.
	Model string `json:"model,omitempty"`
}

// maxConcurrentLayers is image-rs's DEFAULT_MAX_CONCURRENT_DOWNLOAD.
const maxConcurrentLayers = 3

// benchDir holds the mirror path's unpacked layers and both paths'
// overlays: under the work_dir, on the same filesystem image-rs unpacks
// to, but not in work_dir/layers, whose numbering image-rs owns.
var benchDir = filepath.Join(workDir, "standin-bench")

func pullBench(ctx context.Context) map[string]any {
	raw := metadataAttribute(ctx, "caa-gcp-t4-standin-pull")
	if raw == "" {
		return nil
	}
	var s pullSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil || s.Good == "" || s.Tampered == "" {
		return map[string]any{"error": fmt.Sprintf("caa-gcp-t4-standin-pull %q: want {\"good\":…,\"tampered\":…}", raw)}
	}
	defer os.RemoveAll(benchDir)
	out := map[string]any{}
	// The mirror path first: both read their bytes from the disk cold.
	good := pullMirror(ctx, s.Good, "good")
	out["mirror"] = good
	st := pullStore(ctx, s.Good, "good")
	out["store"] = st
	if g, ok := good["ms"].(int64); ok && good["read"] == "ok" {
		if m, ok := st["ms"].(int64); ok && st["read"] == "ok" {
			out["ratio"] = float64(g) / float64(max(m, 1))
		}
	}
	out["tampered_store"] = pullStore(ctx, s.Tampered, "tampered")
	out["tampered_mirror"] = pullMirror(ctx, s.Tampered, "tampered")
	if s.Model != "" {
		out["model"] = pullStoreRead(ctx, s.Model, "model", readModel)
	}
	return out
}

// readModel reads the model image's /models whole, as vLLM's loader reads
// every shard on each rank, timing the read (the engine's, from the cache
// disk through dm-verity) and hashing each file; the image's /modelcar
// must be there.
func readModel(root string, out map[string]any) {
	files := map[string]string{}
	readFiles(root, "models", files, out)
	if _, err := os.Stat(filepath.Join(root, "modelcar")); err != nil && out["read"] == "ok" {
		out["read"] = "refused: the image holds no /modelcar: " + err.Error()
	}
	out["files"] = files
}

type ociDesc struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type pulled struct {
	repo     string
	config   string
	layers   []ociDesc
	diffIDs  []string
	compSize int64
}

// manifestAndConfig is what both paths do first: the manifest by digest
// and the config it names, each checked against its digest.
func manifestAndConfig(ctx context.Context, ref string) (pulled, error) {
	repo, digest, ok := strings.Cut(ref, "@")
	if !ok {
		return pulled{}, fmt.Errorf("%q is not repository@digest", ref)
	}
	mb, err := fetchAll(ctx, repo, "manifests", digest)
	if err != nil {
		return pulled{}, err
	}
	var m struct {
		Config ociDesc   `json:"config"`
		Layers []ociDesc `json:"layers"`
	}
	if err := json.Unmarshal(mb, &m); err != nil {
		return pulled{}, fmt.Errorf("manifest %s: %w", digest, err)
	}
	cb, err := fetchAll(ctx, repo, "blobs", m.Config.Digest)
	if err != nil {
		return pulled{}, err
	}
	var c struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(cb, &c); err != nil {
		return pulled{}, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if len(c.RootFS.DiffIDs) != len(m.Layers) {
		return pulled{}, fmt.Errorf("config %s names %d diff_ids for %d layers", m.Config.Digest, len(c.RootFS.DiffIDs), len(m.Layers))
	}
	p := pulled{repo: repo, config: m.Config.Digest, layers: m.Layers, diffIDs: c.RootFS.DiffIDs}
	for _, l := range m.Layers {
		p.compSize += l.Size
	}
	return p, nil
}

func blobURL(repo, kind, digest string) string {
	return "http://" + cacheMirror + "/v2/" + repo + "/" + kind + "/" + digest
}

func fetch(ctx context.Context, repo, kind, digest string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, blobURL(repo, kind, digest), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s %s: %s %s", kind, digest, resp.Status, strings.TrimSpace(string(b)))
	}
	return resp.Body, nil
}

func fetchAll(ctx context.Context, repo, kind, digest string) ([]byte, error) {
	body, err := fetch(ctx, repo, kind, digest)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s %s: %w", kind, digest, err)
	}
	if got := "sha256:" + hexSum(b); got != digest {
		return nil, fmt.Errorf("GET %s %s: the bytes have digest %s", kind, digest, got)
	}
	return b, nil
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// pullStore is a hit in image-rs's store: no layer moves.
func pullStore(ctx context.Context, ref, name string) map[string]any {
	return pullStoreRead(ctx, ref, name, readWhole)
}

// pullStoreRead is pullStore with read run on the mounted rootfs.
func pullStoreRead(ctx context.Context, ref, name string, read func(root string, out map[string]any)) map[string]any {
	out := map[string]any{"route": "store"}
	ms, err := os.ReadFile(filepath.Join(workDir, "meta_store.json"))
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	var store struct {
		ImageDB map[string]struct {
			LayerMetas []struct {
				StorePath string `json:"store_path"`
			} `json:"layer_metas"`
		} `json:"image_db"`
	}
	if err := json.Unmarshal(ms, &store); err != nil {
		out["error"] = "meta_store.json: " + err.Error()
		return out
	}
	start := time.Now()
	p, err := manifestAndConfig(ctx, ref)
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	entry, ok := store.ImageDB[p.config]
	if !ok {
		out["error"] = "config " + p.config + " is not in image_db: a miss"
		return out
	}
	var lower []string
	for i := len(entry.LayerMetas) - 1; i >= 0; i-- {
		lower = append(lower, entry.LayerMetas[i].StorePath)
	}
	root, unmount, err := overlayMount(lower, "store-"+name)
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	defer unmount()
	out["ms"] = time.Since(start).Milliseconds()
	out["layers"], out["compressed_bytes"] = len(lower), p.compSize
	read(root, out)
	return out
}

// pullMirror is a miss: every layer from the mirror, checked and unpacked.
func pullMirror(ctx context.Context, ref, name string) map[string]any {
	out := map[string]any{"route": "mirror"}
	start := time.Now()
	p, err := manifestAndConfig(ctx, ref)
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	base := filepath.Join(benchDir, "mirror-"+name)
	if err := os.MkdirAll(base, 0o700); err != nil {
		out["error"] = err.Error()
		return out
	}
	dirs := make([]string, len(p.layers))
	errs := make([]error, len(p.layers))
	var unpacked int64
	var mu sync.Mutex
	sem := make(chan struct{}, maxConcurrentLayers)
	var wg sync.WaitGroup
	for i, l := range p.layers {
		dirs[i] = filepath.Join(base, fmt.Sprint(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			n, err := pullLayer(ctx, p.repo, l, p.diffIDs[i], dirs[i])
			errs[i] = err
			mu.Lock()
			unpacked += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		out["error"] = err.Error()
		out["read"] = "refused: " + err.Error()
		return out
	}
	lower := make([]string, 0, len(dirs))
	for i := len(dirs) - 1; i >= 0; i-- {
		lower = append(lower, dirs[i])
	}
	root, unmount, err := overlayMount(lower, "mirror-"+name)
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	defer unmount()
	out["ms"] = time.Since(start).Milliseconds()
	out["layers"], out["compressed_bytes"], out["unpacked_bytes"] = len(p.layers), p.compSize, unpacked
	readWhole(root, out)
	return out
}

// pullLayer fetches one layer, checks its compressed digest and diff_id
// as it streams, and unpacks it into dir. It returns the bytes written.
func pullLayer(ctx context.Context, repo string, l ociDesc, diffID, dir string) (int64, error) {
	body, err := fetch(ctx, repo, "blobs", l.Digest)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	comp := sha256.New()
	gz, err := gzip.NewReader(io.TeeReader(body, comp))
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	diff := sha256.New()
	n, err := untar(io.TeeReader(gz, diff), dir)
	if err != nil {
		return n, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	// The rest of the stream (tar padding, gzip trailer) counts too.
	if _, err := io.Copy(io.Discard, io.TeeReader(gz, diff)); err != nil {
		return n, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	if _, err := io.Copy(comp, body); err != nil {
		return n, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	if got := digestOf(comp); got != l.Digest {
		return n, fmt.Errorf("layer %s: the bytes have digest %s", l.Digest, got)
	}
	if got := digestOf(diff); got != diffID {
		return n, fmt.Errorf("layer %s: diff_id %s, the config says %s", l.Digest, got, diffID)
	}
	return n, nil
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// untar writes a layer's entries under dir as image-rs does for the kinds
// the fixture holds; a whiteout .wh.NAME becomes a 0/0 character device.
func untar(r io.Reader, dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	tr := tar.NewReader(r)
	var n int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		name := filepath.Clean("/" + h.Name)
		if name == "/" {
			continue
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return n, err
		}
		base := filepath.Base(name)
		if strings.HasPrefix(base, ".wh.") && base != ".wh..wh..opq" {
			if err := syscall.Mknod(filepath.Join(filepath.Dir(dst), strings.TrimPrefix(base, ".wh.")), syscall.S_IFCHR, 0); err != nil {
				return n, err
			}
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return n, err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm)
			if err != nil {
				return n, err
			}
			c, err := io.Copy(f, tr)
			n += c
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return n, err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), dst); err != nil {
				return n, err
			}
		default:
			return n, fmt.Errorf("%s: tar entry type %q is not one the stand-in unpacks", h.Name, h.Typeflag)
		}
		_ = os.Lchown(dst, h.Uid, h.Gid)
	}
}

// overlayMount mounts lower (top first) with an upper and work directory
// under benchDir, as image-rs's overlay snapshotter does.
func overlayMount(lower []string, name string) (string, func(), error) {
	idx := filepath.Join(benchDir, "overlay-"+name)
	for _, d := range []string{"upperdir", "workdir", "rootfs"} {
		if err := os.MkdirAll(filepath.Join(idx, d), 0o755); err != nil {
			return "", nil, err
		}
	}
	root := filepath.Join(idx, "rootfs")
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + filepath.Join(idx, "upperdir") + ",workdir=" + filepath.Join(idx, "workdir")
	if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return "", nil, fmt.Errorf("overlay mount of %d layers: %w", len(lower), err)
	}
	return root, func() { _ = syscall.Unmount(root, syscall.MNT_DETACH) }, nil
}

// readWhole reads every regular file under root and says how long it
// took and whether it was refused (dm-verity fails a changed block's read).
func readWhole(root string, out map[string]any) { readFiles(root, "", nil, out) }

// readFiles reads every regular file under root/dir, timed, into out's
// read_ms, read_files, read_bytes and read ("ok" or why refused); with
// sums, each file's sha256 by its path under root.
func readFiles(root, dir string, sums map[string]string, out map[string]any) {
	start := time.Now()
	files, bytes := 0, int64(0)
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		// Hashed only when asked: the plain read is the one timed
		// against the mirror's.
		var h hash.Hash
		w := io.Discard
		if sums != nil {
			h = sha256.New()
			w = h
		}
		n, err := io.Copy(w, f)
		f.Close()
		files++
		bytes += n
		if err != nil {
			return fmt.Errorf("%s: %w", strings.TrimPrefix(p, root), err)
		}
		if h != nil {
			sums[strings.TrimPrefix(p, root+"/")] = hex.EncodeToString(h.Sum(nil))
		}
		return nil
	})
	out["read_ms"], out["read_files"], out["read_bytes"] = time.Since(start).Milliseconds(), files, bytes
	if err != nil {
		out["read"] = "refused: " + err.Error()
		return
	}
	out["read"] = "ok"
}
