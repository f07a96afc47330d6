// Package imagestore is the pre-unpacked image store of a cache disk
// (docs/cache.md): each cached image's layers unpacked as image-rs unpacks
// them, and the meta_store.json image-rs loads, so that a pull in the podVM
// becomes a metadata lookup and an overlay mount instead of a download and
// an unpack. It also holds the stand-in that looks an image up as image-rs
// does, for the tests and the benchmark, and later for the podVM's wiring.
//
// Everything here is read at guest-components GuestComponents (image-rs/src
// paths below are at that commit). It is standard library only, like the
// podVM's other binaries of ours, so the podVM can link it.
package imagestore

import "encoding/json"

// GuestComponents is the guest-components commit whose image-rs the store's
// format is written for. A podVM whose image-rs is another version must not
// use the store (its meta_store.json or layer rules may differ): Lookup
// reports that as a miss.
const GuestComponents = "dcd55ea16ea4f4bcb87c1420f16af92e9eb15f2f"

// FormatVersion is the version of our own manifest (ManifestFile).
const FormatVersion = 1

// Names inside the store directory. MetaFile and LayersDir are image-rs's
// names: METAFILE (image-rs/src/meta_store.rs:9) and the layer store's data
// directory, work_dir/"layers" (image-rs/src/layer_store.rs:45), whose
// entries are decimal indices, 0, 1, … (layer_store.rs:52-56, and
// get_layer_index at :20-41 parses every name there as a number).
// EntriesDir and ManifestFile are ours.
const (
	MetaFile     = "meta_store.json"
	LayersDir    = "layers"
	EntriesDir   = "entries"
	ManifestFile = "gcp-t4-store.json"
)

// MetaStore is image-rs's MetaStore (image-rs/src/meta_store.rs:12-22),
// serialised as serde_json writes it (meta_store.rs:35-40): the three maps
// have no serde default, so all three must be present. image_db is keyed by
// the image's config digest (image.rs:388, 452-456), layer_db by the layer's
// compressed digest, the manifest's layer digest (image.rs:435-441).
type MetaStore struct {
	ImageDB    map[string]ImageMeta `json:"image_db"`
	LayerDB    map[string]LayerMeta `json:"layer_db"`
	SnapshotDB map[string]int       `json:"snapshot_db"`
}

// ImageMeta is image-rs's ImageMeta (image-rs/src/image.rs:132-151), filled
// as create_image_meta fills it (image.rs:479-524): id is the config
// digest, digest the manifest's, reference the URL pulled, image_config the
// config blob (parsed by oci-spec's ImageConfiguration at image.rs:490: we
// keep the blob's own JSON, which that parser read when image-rs pulled
// it), and layer_metas one per unique compressed digest, in the manifest's
// order (image.rs:508-521).
type ImageMeta struct {
	ID          string          `json:"id"`
	Digest      string          `json:"digest"`
	Reference   string          `json:"reference"`
	ImageConfig json.RawMessage `json:"image_config"`
	Signed      bool            `json:"signed"`
	LayerMetas  []LayerMeta     `json:"layer_metas"`
}

// LayerMeta is image-rs's LayerMeta (image-rs/src/image.rs:113-129). The
// decoder is the Compression enum (image-rs/src/decoder/mod.rs:24-30),
// which serde writes as its variant's name; store_path is the layer's
// directory as an absolute path (pull.rs:167-171), used as an overlay
// lowerdir as it stands (image.rs:531-538).
type LayerMeta struct {
	Decoder            string `json:"decoder"`
	Encrypted          bool   `json:"encrypted"`
	CompressedDigest   string `json:"compressed_digest"`
	UncompressedDigest string `json:"uncompressed_digest"`
	StorePath          string `json:"store_path"`
}

// Manifest is our own record of a store (ManifestFile), written last, so a
// store without it is half-written. It names the guest-components commit
// the format is for, and the digests that tie the store together: of
// meta_store.json and of each layer's entry list, which in turn holds every
// file's digest. It is a checksum manifest, not dm-verity: it is checked
// when the store is verified (Verify), not on every read.
type Manifest struct {
	Format          int    `json:"format"`
	GuestComponents string `json:"guestComponents"`
	// MountPoint is where the podVM mounts the disk: every store_path in
	// meta_store.json is beneath MountPoint/Dir.
	MountPoint string          `json:"mountPoint"`
	Dir        string          `json:"dir"`
	MetaStore  string          `json:"metaStoreDigest"`
	Images     []ManifestImage `json:"images"`
	Layers     []ManifestLayer `json:"layers"`
}

// ManifestImage is one cached image.
type ManifestImage struct {
	Reference    string `json:"reference"`
	Manifest     string `json:"manifest"`
	ConfigDigest string `json:"configDigest"`
}

// ManifestLayer is one unpacked layer: its directory (LayersDir/N) and
// the digest of its entry list (EntriesDir/N.json).
type ManifestLayer struct {
	Index            int    `json:"index"`
	CompressedDigest string `json:"compressedDigest"`
	DiffID           string `json:"diffID"`
	Entries          string `json:"entriesDigest"`
	Files            int    `json:"files"`
	Bytes            int64  `json:"bytes"`
}

// Entry types of a layer's entry list.
const (
	TypeDir      = "dir"
	TypeFile     = "file"
	TypeSymlink  = "symlink"
	TypeHardlink = "hardlink"
	TypeChar     = "char"
	TypeBlock    = "block"
	TypeFifo     = "fifo"
	// TypeWhiteout is a deletion whiteout: image-rs makes a character
	// device 0/0 with mode 0 in place of the `.wh.NAME` entry
	// (image-rs/src/stream/unpack.rs:212-225).
	TypeWhiteout = "whiteout"
)

// Entry is one path of an unpacked layer, with what image-rs gives it:
// the tar header's uid, gid, mode and mtime (unpack.rs:240-247, 370-446).
// A builder that is not root cannot give a directory these (owners,
// devices, whiteouts, trusted xattrs), so they are recorded here and set
// on the disk image itself (cachebuild's debugfs pass), or by Apply as root.
type Entry struct {
	Path   string `json:"path"` // relative to the layer's directory; "." is the layer root
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"` // permission bits with setuid, setgid, sticky
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Mtime  int64  `json:"mtime"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target, or a hard link's path in the layer.
	Link  string `json:"link,omitempty"`
	Major int64  `json:"major,omitempty"`
	Minor int64  `json:"minor,omitempty"`
	// Opaque is a directory marked opaque by a `.wh..wh..opq` entry:
	// image-rs sets trusted.overlay.opaque=y on it (unpack.rs:193-210).
	Opaque bool `json:"opaque,omitempty"`
	// Xattrs are the PAX SCHILY.xattr records of the entry, which
	// image-rs unpacks where the layer directory takes xattrs
	// (unpack.rs:265-269).
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
}
