package imagestore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
)

// Image is one image to store, as the cache's layout holds it.
type Image struct {
	// Reference is the reference the cache holds it under (pinned).
	Reference string
	// Manifest is the platform image manifest's digest.
	Manifest string
	// ConfigDigest and Config are the config blob's digest and bytes.
	ConfigDigest string
	Config       []byte
	Layers       []Layer
}

// Layer is one layer of an image, in the manifest's order.
type Layer struct {
	// Digest is the manifest's (compressed) digest; DiffID the config's.
	Digest, DiffID, MediaType string
	// Uncompressed opens the layer's tar.
	Uncompressed func() (io.ReadCloser, error)
}

// Summary is what Write wrote.
type Summary struct {
	Images, Layers, Files int
	Bytes                 int64
	// Skipped names each image left out of the store, and why.
	Skipped []string
}

// Write writes the pre-unpacked store of imgs at root/StoreDir: LayersDir/N for
// each unique layer (by compressed digest, in the order the images and
// their layers come, so the same images give the same tree), EntriesDir/N.json
// its entry list, MetaFile as image-rs at GuestComponents loads it, with
// every store_path beneath mountPoint/StoreDir (where the podVM will see
// the store: root is the disk's root), and ManifestFile last.
// root/StoreDir must not exist.
func Write(root, mountPoint string, imgs []Image) (Summary, error) {
	var sum Summary
	if !path.IsAbs(mountPoint) || path.Clean(mountPoint) != mountPoint {
		return sum, fmt.Errorf("mount point %q: give a clean absolute path (the podVM's, such as /run/caa-gcp-t4/cache)", mountPoint)
	}
	dir := StoreDir
	store := filepath.Join(root, dir)
	if err := os.Mkdir(store, 0o755); err != nil {
		return sum, err
	}
	for _, d := range []string{LayersDir, EntriesDir} {
		if err := os.Mkdir(filepath.Join(store, d), 0o755); err != nil {
			return sum, err
		}
	}
	ms := MetaStore{ImageDB: map[string]ImageMeta{}, LayerDB: map[string]LayerMeta{}, SnapshotDB: map[string]int{}}
	man := Manifest{Format: FormatVersion, GuestComponents: GuestComponents, MountPoint: mountPoint, Dir: dir}
	for _, img := range imgs {
		if err := linux(img.Config); err != nil {
			// Left to the mirror, whose pull image-rs refuses the same.
			sum.Skipped = append(sum.Skipped, fmt.Sprintf("%s: %v", img.Reference, err))
			continue
		}
		im := ImageMeta{ID: img.ConfigDigest, Digest: img.Manifest, Reference: img.Reference, ImageConfig: json.RawMessage(img.Config)}
		seen := map[string]bool{}
		for _, l := range img.Layers {
			// One layer_meta per unique compressed digest in an image
			// (image-rs/src/image.rs:508-521).
			if seen[l.Digest] {
				continue
			}
			seen[l.Digest] = true
			lm, ok := ms.LayerDB[l.Digest]
			if !ok {
				dec, err := decoder(l.MediaType)
				if err != nil {
					return sum, fmt.Errorf("image %s, layer %s: %w", img.Reference, l.Digest, err)
				}
				n := len(man.Layers)
				ml, err := writeLayer(store, n, l)
				if err != nil {
					return sum, fmt.Errorf("image %s, layer %s: %w", img.Reference, l.Digest, err)
				}
				man.Layers = append(man.Layers, ml)
				sum.Files += ml.Files
				sum.Bytes += ml.Bytes
				lm = LayerMeta{Decoder: dec, CompressedDigest: l.Digest, UncompressedDigest: l.DiffID,
					StorePath: path.Join(mountPoint, dir, LayersDir, strconv.Itoa(n))}
				ms.LayerDB[l.Digest] = lm
			}
			im.LayerMetas = append(im.LayerMetas, lm)
		}
		ms.ImageDB[img.ConfigDigest] = im
		man.Images = append(man.Images, ManifestImage{Reference: img.Reference, Manifest: img.Manifest, ConfigDigest: img.ConfigDigest})
	}
	// encoding/json writes map keys sorted: the same store, the same bytes.
	b, err := json.Marshal(ms)
	if err != nil {
		return sum, err
	}
	if err := os.WriteFile(filepath.Join(store, MetaFile), b, 0o644); err != nil {
		return sum, err
	}
	man.MetaStore = digest(b)
	mb, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return sum, err
	}
	// Written last, whole: a store without it is half-written.
	tmp := filepath.Join(store, "."+ManifestFile)
	if err := os.WriteFile(tmp, append(mb, '\n'), 0o644); err != nil {
		return sum, err
	}
	if err := os.Rename(tmp, filepath.Join(store, ManifestFile)); err != nil {
		return sum, err
	}
	sum.Images, sum.Layers = len(man.Images), len(man.Layers)
	return sum, nil
}

func writeLayer(store string, n int, l Layer) (ManifestLayer, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return ManifestLayer{}, err
	}
	defer rc.Close()
	u, err := unpack(rc, filepath.Join(store, LayersDir, strconv.Itoa(n)), l.DiffID)
	if err != nil {
		return ManifestLayer{}, err
	}
	b, err := json.Marshal(u.entries)
	if err != nil {
		return ManifestLayer{}, err
	}
	if err := os.WriteFile(filepath.Join(store, EntriesDir, strconv.Itoa(n)+".json"), b, 0o644); err != nil {
		return ManifestLayer{}, err
	}
	return ManifestLayer{Index: n, CompressedDigest: l.Digest, DiffID: u.diffID, Entries: digest(b), Files: u.files, Bytes: u.bytes}, nil
}

// The Compression variants image-rs names a layer's decoder by
// (image-rs/src/decoder/mod.rs:24-30), as serde writes them; the drift
// check holds them against image-rs's enum.
const (
	DecoderUncompressed = "Uncompressed"
	DecoderGzip         = "Gzip"
	DecoderZstd         = "Zstd"
)

// decoder is the Compression image-rs picks for a layer's media type
// (image-rs/src/decoder/mod.rs:111-139), as serde names it. Encrypted
// layers are decrypted in the guest with the pod's keys: they are not
// stored unpacked.
func decoder(mediaType string) (string, error) {
	switch mediaType {
	case "application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar":
		return DecoderUncompressed, nil
	case "application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.oci.image.layer.v1.tar+gzip",
		"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip":
		return DecoderGzip, nil
	case "application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd":
		return DecoderZstd, nil
	}
	return "", fmt.Errorf("media type %q: image-rs at guest-components %.8s unpacks only OCI or Docker tar layers, plain, gzip or zstd", mediaType, GuestComponents)
}

// linux refuses an image image-rs would not start: it mounts the layers
// and then refuses a config whose os is not linux (image.rs:540-543).
func linux(config []byte) error {
	var c struct {
		OS string `json:"os"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return fmt.Errorf("its config: %w", err)
	}
	if c.OS != "linux" {
		return fmt.Errorf("its config's os is %q: image-rs starts linux images only", c.OS)
	}
	return nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
