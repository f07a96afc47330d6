package imagestore

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Whiteout names, as image-rs reads them (image-rs/src/stream/unpack.rs:131-137).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// defaultMtime is the mtime of what image-rs creates itself rather than
// from a tar header (the layer root without a "." entry, parents it makes
// for a whiteout or an entry whose directory the tar does not list): it
// takes the clock there; we take a fixed time so that the store is a
// function of the image.
const defaultMtime = 1

// unpacked is what Unpack found in one layer.
type unpacked struct {
	entries []Entry
	diffID  string
	files   int
	bytes   int64
}

// unpack reads one uncompressed layer tar into dir, which must not exist,
// as image-rs's unpack does at the pin (image-rs/src/stream/unpack.rs:250-475):
//
//   - `.wh..wh..opq` marks its directory opaque (trusted.overlay.opaque=y,
//     unpack.rs:193-210; image-rs skips this where the layer directory takes
//     no xattrs, unpack.rs:197-204: an ext4 disk takes them);
//   - `.wh.NAME` becomes a character device 0/0, mode 0, at NAME, its
//     parents made 0755 (unpack.rs:212-225); the `.wh.` entry itself is not
//     written;
//   - "." sets the layer root's owner, mode and mtime (unpack.rs:326-352);
//   - every other entry keeps its header's uid, gid, mode and mtime
//     (unpack.rs:370-446), and a hard link's absolute target is taken
//     inside the layer (unpack.rs:518-563).
//
// The uncompressed stream's digest is checked against the config's diff_id,
// as image-rs checks it (image-rs/src/pull.rs:209-215).
//
// Where we differ, we refuse rather than guess: a name with "..", an entry
// beneath a symbolic link of the layer, and a name that debugfs cannot take
// (a double quote, a backslash, a newline) fail the build with the entry
// named. Files are written 0644 and directories 0755 whoever builds; the
// real owners and modes, devices, whiteouts and xattrs are in the entry
// list, set on the disk by cachebuild's debugfs pass (a builder that is not
// root cannot make them), or by Apply.
func unpack(r io.Reader, dir, diffID string) (unpacked, error) {
	var u unpacked
	if err := os.Mkdir(dir, 0o755); err != nil {
		return u, err
	}
	h := sha256.New()
	tee := io.TeeReader(r, h)
	tr := tar.NewReader(tee)
	entries := map[string]*Entry{".": {Path: ".", Type: TypeDir, Mode: 0o755, Mtime: defaultMtime}}
	// mkParents makes name's missing parents as directories 0755, as
	// create_dir_all and pathrs' mkdir_all do, and refuses a parent that
	// is not a directory of the layer.
	mkParents := func(name string) error {
		var missing []string
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			e, ok := entries[p]
			if ok {
				if e.Type != TypeDir {
					return fmt.Errorf("%q is beneath %q, a %s in the layer: refused", name, p, e.Type)
				}
				break
			}
			missing = append(missing, p)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			p := missing[i]
			if err := os.Mkdir(filepath.Join(dir, filepath.FromSlash(p)), 0o755); err != nil {
				return err
			}
			entries[p] = &Entry{Path: p, Type: TypeDir, Mode: 0o755, Mtime: defaultMtime}
		}
		return nil
	}
	// remove takes name and, for a directory, all beneath it out of the
	// layer: a later entry of the same name replaces an earlier one.
	remove := func(name string) error {
		for p := range entries {
			if p == name || strings.HasPrefix(p, name+"/") {
				delete(entries, p)
			}
		}
		return os.RemoveAll(filepath.Join(dir, filepath.FromSlash(name)))
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u, fmt.Errorf("reading the layer's tar: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return u, err
		}
		full := filepath.Join(dir, filepath.FromSlash(name))
		base := path.Base(name)
		if strings.HasPrefix(base, whiteoutPrefix) {
			parent := path.Dir(name)
			if base == whiteoutOpaque {
				e, ok := entries[parent]
				if !ok || e.Type != TypeDir {
					// image-rs resolves the parent in the layer and fails
					// the pull when it is not there (unpack.rs:195).
					return u, fmt.Errorf("opaque whiteout %q: its directory is not in the layer", hdr.Name)
				}
				e.Opaque = true
				continue
			}
			target := path.Join(parent, strings.TrimPrefix(base, whiteoutPrefix))
			if err := mkParents(target); err != nil {
				return u, err
			}
			if _, ok := entries[target]; ok {
				// pathrs' create refuses an existing path (unpack.rs:222).
				return u, fmt.Errorf("whiteout %q: %q is in the same layer", hdr.Name, target)
			}
			entries[target] = &Entry{Path: target, Type: TypeWhiteout, Mode: 0, Mtime: defaultMtime}
			continue
		}
		mode := uint32(hdr.Mode) & 0o7777
		meta := Entry{Path: name, Mode: mode, UID: hdr.Uid, GID: hdr.Gid, Mtime: hdr.ModTime.Unix()}
		for k, v := range hdr.PAXRecords {
			if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if meta.Xattrs == nil {
					meta.Xattrs = map[string][]byte{}
				}
				meta.Xattrs[x] = []byte(v)
			}
		}
		if name == "." {
			if hdr.Typeflag == tar.TypeDir {
				meta.Type = TypeDir
				entries["."] = &meta
			}
			continue
		}
		if err := mkParents(name); err != nil {
			return u, err
		}
		if old, ok := entries[name]; ok {
			if old.Type == TypeDir && hdr.Typeflag == tar.TypeDir {
				meta.Type, meta.Opaque = TypeDir, old.Opaque
				entries[name] = &meta
				continue
			}
			if err := remove(name); err != nil {
				return u, err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			meta.Type = TypeDir
			if err := os.Mkdir(full, 0o755); err != nil {
				return u, err
			}
		case tar.TypeReg: // archive/tar's Reader gives an old '\x00' file as TypeReg too
			meta.Type = TypeFile
			f, err := os.OpenFile(full, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return u, err
			}
			fh := sha256.New()
			n, err := io.Copy(io.MultiWriter(f, fh), tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return u, fmt.Errorf("%q: %w", hdr.Name, err)
			}
			meta.Size, meta.SHA256 = n, hex.EncodeToString(fh.Sum(nil))
			u.files++
			u.bytes += n
		case tar.TypeSymlink:
			meta.Type, meta.Link, meta.Mode = TypeSymlink, hdr.Linkname, 0o777
			if err := os.Symlink(hdr.Linkname, full); err != nil {
				return u, err
			}
		case tar.TypeLink:
			target, err := entryName(hdr.Linkname)
			if err != nil {
				return u, fmt.Errorf("hard link %q: %w", hdr.Name, err)
			}
			t, ok := entries[target]
			if !ok || t.Type != TypeFile {
				return u, fmt.Errorf("hard link %q: its target %q is not a file of the layer", hdr.Name, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(target)), full); err != nil {
				return u, err
			}
			// One inode: image-rs sets the link header's owner and mtime
			// on it, never its mode (unpack.rs:404-420), so the target's
			// entry takes them too, and the link keeps the target's mode.
			meta.Type, meta.Link, meta.Size, meta.SHA256, meta.Mode = TypeHardlink, target, t.Size, t.SHA256, t.Mode
			t.UID, t.GID, t.Mtime = meta.UID, meta.GID, meta.Mtime
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			meta.Type = map[byte]string{tar.TypeChar: TypeChar, tar.TypeBlock: TypeBlock, tar.TypeFifo: TypeFifo}[hdr.Typeflag]
			meta.Major, meta.Minor = hdr.Devmajor, hdr.Devminor
		default:
			return u, fmt.Errorf("%q: tar entry type %q is not one a layer may hold", hdr.Name, hdr.Typeflag)
		}
		entries[name] = &meta
	}
	// The rest of the stream (the tar's padding) counts toward its digest.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return u, err
	}
	u.diffID = "sha256:" + hex.EncodeToString(h.Sum(nil))
	if diffID != "" && u.diffID != diffID {
		return u, fmt.Errorf("the uncompressed layer is %s, but the image's config says %s", u.diffID, diffID)
	}
	for _, e := range entries {
		u.entries = append(u.entries, *e)
	}
	sort.Slice(u.entries, func(i, j int) bool { return u.entries[i].Path < u.entries[j].Path })
	return u, nil
}

// entryName is a tar entry's name as a clean path inside the layer: a
// leading "/" or "./" is dropped (tokio-tar's unpack_in skips root and
// prefix components), ".." is refused, and so is what debugfs cannot take.
func entryName(n string) (string, error) {
	if strings.ContainsAny(n, "\"\\\n\r\x00") {
		return "", fmt.Errorf("tar entry %q: a name with a double quote, a backslash or a line break cannot go on the cache disk", n)
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", fmt.Errorf("tar entry %q: a name with \"..\" is refused", n)
		}
	}
	return path.Clean("./" + strings.TrimLeft(n, "/")), nil
}
