package cachebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"

	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// FilesystemLabel is the cache filesystem's label: the provider's device
// name for the disk, one name the podVM looks for.
const FilesystemLabel = gcpt4.CacheDeviceName

// epoch is every time the disk records: the disk is a function of the
// layout alone, so two builds of the same images are the same bytes, and
// a reviewer can rebuild and compare. It is one second, not zero: to
// e2fsprogs 1.47.0 (Debian 12's) a fake time of 0 means "unset", and
// debugfs then stamps the superblock with the clock when it closes.
var epoch = time.Unix(1, 0)

// Verity is a cache disk's dm-verity: the podVM opens the disk only
// through dm-verity with the root hash and the hash tree's offset (the
// filesystem's size) the admin's configuration gives it
// (GCP_CACHE_VERITY, the provider's caa-gcp-t4-cache-verity metadata).
type Verity struct {
	RootHash   string // sha256, hex
	HashOffset int64  // bytes
}

// String is GCP_CACHE_VERITY's form, which the provider checks.
func (v Verity) String() string {
	return "root=" + v.RootHash + ",offset=" + strconv.FormatInt(v.HashOffset, 10)
}

// Disk makes the GCE image file of a layout: an ext4 filesystem holding
// the layout at its root, followed by its dm-verity hash tree, in a raw
// disk whose size is a whole number of GiB, packed as GCE imports images
// (a gzip'd tar, oldgnu format, sparse, with the one file disk.raw:
// compute/docs/import/import-existing-image). The filesystem's UUID and
// hash seed and the verity salt and UUID are derived from index.json and
// every time is the epoch, so the file, and so its root hash, is
// reproducible. It runs mke2fs (e2fsprogs), veritysetup (cryptsetup-bin)
// and tar, and leaves nothing behind on failure.
// hashRoom is the room left after a filesystem of fs bytes for its
// dm-verity tree: 32 bytes of sha256 per 4 KiB block is 1/128 of the
// data, the upper levels and the superblock under 1/128² more; rounded
// up to whole MiB, with one MiB to spare.
func hashRoom(fs int64) int64 {
	const mib = 1 << 20
	return (fs/127+mib-1)/mib*mib + mib
}

func Disk(ctx context.Context, layoutDir, out string) (sizeGiB int64, v Verity, err error) {
	index, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
	if err != nil {
		return 0, v, fmt.Errorf("%s is not a cache layout: %w", layoutDir, err)
	}
	var bytes int64
	// Every path on the disk but the root, for the time fix-up below.
	var paths []string
	err = filepath.WalkDir(layoutDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			bytes += info.Size()
		}
		rel, err := filepath.Rel(layoutDir, path)
		if err != nil {
			return err
		}
		// The store's layer trees keep their images' own modes, owners
		// and times, set by storeScript from their entry lists: neither
		// chmod'ed here (a chmod would follow a layer's symbolic link
		// out of the tree) nor pinned to the epoch.
		if layers := filepath.Join(imagestore.StoreDir, imagestore.LayersDir); rel != layers && strings.HasPrefix(rel, layers+string(filepath.Separator)) {
			return nil
		}
		if rel != "." {
			paths = append(paths, "/"+filepath.ToSlash(rel))
		}
		// mke2fs -d copies each file's mode and times. Every file is
		// readable by all, so the podVM's mirror reads the disk as an
		// unprivileged user (DynamicUser=) whatever the builder's umask.
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
		return os.Chtimes(path, epoch, epoch)
	})
	if err != nil {
		return 0, v, err
	}
	// ext4's metadata (inode tables, journal) with room to spare: a tenth
	// more and 256 MiB; then the hash tree; rounded up to whole GiB as GCE
	// sizes disks. The filesystem takes what the tree leaves, in whole
	// MiB (so in whole 4 KiB blocks, dm-verity's).
	const gib, mib = 1 << 30, 1 << 20
	fsMin := bytes + bytes/10 + 256<<20
	sizeGiB = (fsMin + hashRoom(fsMin) + gib - 1) / gib
	fsBytes := sizeGiB * gib
	fsBytes = (fsBytes - hashRoom(fsBytes)) / mib * mib
	work, err := os.MkdirTemp(filepath.Dir(out), ".cache-disk-")
	if err != nil {
		return 0, v, err
	}
	defer os.RemoveAll(work)
	raw := filepath.Join(work, "disk.raw")
	f, err := os.Create(raw)
	if err != nil {
		return 0, v, err
	}
	if err := f.Truncate(sizeGiB * gib); err != nil {
		f.Close()
		return 0, v, err
	}
	if err := f.Close(); err != nil {
		return 0, v, err
	}
	// The tar records disk.raw's mode: the same whatever the umask.
	if err := os.Chmod(raw, 0o644); err != nil {
		return 0, v, err
	}
	sum := sha256.Sum256(index)
	id, err := uuid.FromBytes(sum[:16])
	if err != nil {
		return 0, v, err
	}
	mkfs := exec.CommandContext(ctx, "mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-L", FilesystemLabel, "-U", id.String(),
		"-E", "hash_seed="+id.String()+",root_owner=0:0", "-d", layoutDir, raw, strconv.FormatInt(fsBytes/4096, 10))
	// mke2fs 1.47.1 and later take their times (the superblock's, each
	// inode's ctime and crtime) from SOURCE_DATE_EPOCH; earlier ones from
	// E2FSPROGS_FAKE_TIME. Without either, a build crossing a second
	// boundary differs from the next.
	timeEnv := append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", epoch.Unix()), fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", epoch.Unix()))
	mkfs.Env = timeEnv
	if b, err := mkfs.CombinedOutput(); err != nil {
		return 0, v, fmt.Errorf("mke2fs (e2fsprogs; apt-get install -y e2fsprogs): %v: %s", err, b)
	}
	store, err := storeScript(layoutDir, raw)
	if err != nil {
		return 0, v, err
	}
	if err := pinTimes(ctx, raw, paths, store, timeEnv); err != nil {
		return 0, v, err
	}
	// The hash tree last, over the finished filesystem.
	if v, err = formatVerity(ctx, raw, fsBytes, sum); err != nil {
		return 0, v, err
	}
	tmp := filepath.Join(work, "disk.tar.gz")
	// GNU tar's gzip records no name or time with -n.
	tarc := exec.CommandContext(ctx, "tar", "--format=oldgnu", "-S", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
		"-C", work, "-I", "gzip -n", "-cf", tmp, "disk.raw")
	if b, err := tarc.CombinedOutput(); err != nil {
		return 0, v, fmt.Errorf("tar: %v: %s", err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		return 0, v, err
	}
	return sizeGiB, v, nil
}

// formatVerity writes the dm-verity hash tree of raw's first fsBytes
// after them, in the same file, with veritysetup format: sha256, 4 KiB
// blocks, the superblock at the offset (as the podVM's
// veritysetup open reads it), a salt and UUID from sum (index.json's
// digest) instead of random ones, so two builds match.
func formatVerity(ctx context.Context, raw string, fsBytes int64, sum [32]byte) (Verity, error) {
	salt := sha256.Sum256(append([]byte("caa-gcp-t4 cache verity salt\n"), sum[:]...))
	id, err := uuid.FromBytes(salt[16:])
	if err != nil {
		return Verity{}, err
	}
	cmd := exec.CommandContext(ctx, "veritysetup", "format", "--hash=sha256", "--data-block-size=4096", "--hash-block-size=4096",
		"--data-blocks="+strconv.FormatInt(fsBytes/4096, 10), "--hash-offset="+strconv.FormatInt(fsBytes, 10),
		"--salt="+hex.EncodeToString(salt[:]), "--uuid="+id.String(), raw, raw)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return Verity{}, fmt.Errorf("veritysetup format (cryptsetup-bin; apt-get install -y cryptsetup-bin): %v: %s", err, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Root hash" {
			root := strings.TrimSpace(val)
			if len(root) == 64 && strings.Trim(root, "0123456789abcdef") == "" {
				return Verity{RootHash: root, HashOffset: fsBytes}, nil
			}
		}
	}
	return Verity{}, fmt.Errorf("veritysetup format printed no root hash: %s", b)
}

// pinTimes sets every time the filesystem records to the epoch with
// debugfs. mke2fs before 1.47.1 (Debian 12 ships 1.47.0) copies each
// file's atime and ctime from the build machine, and SOURCE_DATE_EPOCH
// does not clamp them there: the atime is when mke2fs read the file and
// the ctime when the layout was written, so two builds of the same images
// differed. Setting them after the fact holds for every e2fsprogs
// version, and is a no-op where mke2fs already clamped them.
func pinTimes(ctx context.Context, raw string, paths []string, store string, env []string) error {
	var script strings.Builder
	script.WriteString(store)
	t := strconv.FormatInt(epoch.Unix(), 10)
	for _, p := range append([]string{"/", "/lost+found"}, paths...) {
		// debugfs reads its script split at blanks, with double quotes
		// grouping: a layout's paths are digests and fixed names, so
		// anything else is refused rather than quoted.
		if strings.ContainsAny(p, "\"\\ \t\n\r") {
			return fmt.Errorf("cache layout path %q: only digests and OCI layout names can go on the disk", p)
		}
		for _, f := range []string{"atime", "ctime", "mtime", "crtime"} {
			fmt.Fprintf(&script, "sif \"%s\" %s %s\nsif \"%s\" %s_extra 0\n", p, f, t, p, f)
		}
	}
	for _, f := range []string{"mtime", "wtime", "lastcheck", "mkfs_time"} {
		fmt.Fprintf(&script, "ssv %s %s\n", f, t)
	}
	cmds := raw + ".debugfs"
	if err := os.WriteFile(cmds, []byte(script.String()), 0o600); err != nil {
		return err
	}
	defer os.Remove(cmds)
	dbg := exec.CommandContext(ctx, "debugfs", "-w", "-f", cmds, raw)
	dbg.Env = env
	b, err := dbg.CombinedOutput()
	if err != nil {
		return fmt.Errorf("debugfs (e2fsprogs; apt-get install -y e2fsprogs), setting the disk's times: %v: %s", err, b)
	}
	// debugfs reports a failed request on its output and still exits 0.
	for _, line := range strings.Split(string(b), "\n") {
		// mknod names the inode it allocates.
		if line != "" && !strings.HasPrefix(line, "debugfs ") && !strings.HasPrefix(line, "debugfs:") && !strings.HasPrefix(line, "Allocated inode: ") {
			return fmt.Errorf("debugfs, setting the disk's times: %s", strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// storeScript is the debugfs commands that give the store's layer trees on
// the disk what their entry lists say and a directory written without
// root cannot hold (imagestore.Entry): whiteouts (character devices 0/0),
// devices and FIFOs, each path's owner, mode and mtime (its atime the same,
// as image-rs sets both, image-rs/src/stream/unpack.rs:397-445; ctime and
// crtime the epoch), opaque marks and xattrs. Xattr values go through
// files beside raw. An empty layout store gives no commands.
func storeScript(layoutDir, raw string) (string, error) {
	man, all, err := imagestore.Entries(layoutDir)
	if err != nil {
		return "", fmt.Errorf("the pre-unpacked store: %w", err)
	}
	var b strings.Builder
	t := strconv.FormatInt(epoch.Unix(), 10)
	nx := 0
	for _, l := range man.Layers {
		dir := "/" + imagestore.StoreDir + "/" + imagestore.LayersDir + "/" + strconv.Itoa(l.Index)
		for _, e := range all[l.Index] {
			p := dir
			if e.Path != "." {
				p += "/" + e.Path
			}
			// Names debugfs cannot take are refused when the layer is
			// unpacked (imagestore's entryName).
			typ := map[string]uint32{imagestore.TypeDir: 0o040000, imagestore.TypeFile: 0o100000, imagestore.TypeHardlink: 0o100000,
				imagestore.TypeSymlink: 0o120000, imagestore.TypeChar: 0o020000, imagestore.TypeWhiteout: 0o020000,
				imagestore.TypeBlock: 0o060000, imagestore.TypeFifo: 0o010000}[e.Type]
			// debugfs's mknod takes a name in its current directory.
			parent, base := path.Split(p)
			switch e.Type {
			case imagestore.TypeWhiteout:
				fmt.Fprintf(&b, "cd \"%s\"\nmknod \"%s\" c 0 0\ncd /\n", parent, base)
			case imagestore.TypeChar:
				fmt.Fprintf(&b, "cd \"%s\"\nmknod \"%s\" c %d %d\ncd /\n", parent, base, e.Major, e.Minor)
			case imagestore.TypeBlock:
				fmt.Fprintf(&b, "cd \"%s\"\nmknod \"%s\" b %d %d\ncd /\n", parent, base, e.Major, e.Minor)
			case imagestore.TypeFifo:
				fmt.Fprintf(&b, "cd \"%s\"\nmknod \"%s\" p\ncd /\n", parent, base)
			}
			fmt.Fprintf(&b, "sif \"%s\" mode 0%o\nsif \"%s\" uid %d\nsif \"%s\" gid %d\n", p, typ|e.Mode, p, e.UID, p, e.GID)
			for f, v := range map[string]string{"mtime": strconv.FormatInt(e.Mtime, 10), "atime": strconv.FormatInt(e.Mtime, 10), "ctime": t, "crtime": t} {
				fmt.Fprintf(&b, "sif \"%s\" %s %s\nsif \"%s\" %s_extra 0\n", p, f, v, p, f)
			}
			if e.Opaque {
				fmt.Fprintf(&b, "ea_set \"%s\" trusted.overlay.opaque y\n", p)
			}
			for _, k := range sortedKeys(e.Xattrs) {
				vf := fmt.Sprintf("%s.xattr%d", raw, nx)
				nx++
				if err := os.WriteFile(vf, e.Xattrs[k], 0o600); err != nil {
					return "", err
				}
				fmt.Fprintf(&b, "ea_set -f \"%s\" \"%s\" \"%s\"\n", vf, p, k)
			}
		}
	}
	return b.String(), nil
}

func sortedKeys(m map[string][]byte) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
