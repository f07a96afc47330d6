package cachebuild

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// FilesystemLabel is the cache filesystem's label: the provider's device
// name for the disk, one name the podVM looks for.
const FilesystemLabel = gcpt4.CacheDeviceName

// epoch is every time the disk records: the disk is a function of the
// layout alone, so two builds of the same images are the same bytes, and
// a reviewer can rebuild and compare.
var epoch = time.Unix(0, 0)

// Disk makes the GCE image file of a layout: an ext4 filesystem holding
// the layout at its root, in a raw disk whose size is a whole number of
// GiB, packed as GCE imports images (a gzip'd tar, oldgnu format, sparse,
// with the one file disk.raw: compute/docs/import/import-existing-image).
// The filesystem's UUID and hash seed are derived from index.json and
// every time is the epoch, so the file is reproducible. It runs mke2fs
// (e2fsprogs) and tar, and leaves nothing behind on failure.
func Disk(ctx context.Context, layoutDir, out string) (sizeGiB int64, err error) {
	index, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
	if err != nil {
		return 0, fmt.Errorf("%s is not a cache layout: %w", layoutDir, err)
	}
	var bytes int64
	err = filepath.WalkDir(layoutDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			bytes += info.Size()
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
		return 0, err
	}
	// ext4's metadata (inode tables, journal) with room to spare: a tenth
	// more and 256 MiB, rounded up to whole GiB as GCE sizes disks.
	const gib = 1 << 30
	sizeGiB = (bytes + bytes/10 + 256<<20 + gib - 1) / gib
	work, err := os.MkdirTemp(filepath.Dir(out), ".cache-disk-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	raw := filepath.Join(work, "disk.raw")
	f, err := os.Create(raw)
	if err != nil {
		return 0, err
	}
	if err := f.Truncate(sizeGiB * gib); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	// The tar records disk.raw's mode: the same whatever the umask.
	if err := os.Chmod(raw, 0o644); err != nil {
		return 0, err
	}
	sum := sha256.Sum256(index)
	id, err := uuid.FromBytes(sum[:16])
	if err != nil {
		return 0, err
	}
	mkfs := exec.CommandContext(ctx, "mke2fs", "-q", "-F", "-t", "ext4", "-L", FilesystemLabel, "-U", id.String(),
		"-E", "hash_seed="+id.String()+",root_owner=0:0", "-d", layoutDir, raw)
	// mke2fs 1.47.1 and later take their times (the superblock's, each
	// inode's ctime and crtime) from SOURCE_DATE_EPOCH; earlier ones from
	// E2FSPROGS_FAKE_TIME. Without either, a build crossing a second
	// boundary differs from the next.
	mkfs.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", epoch.Unix()), fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", epoch.Unix()))
	if b, err := mkfs.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("mke2fs (e2fsprogs; apt-get install -y e2fsprogs): %v: %s", err, b)
	}
	tmp := filepath.Join(work, "disk.tar.gz")
	// GNU tar's gzip records no name or time with -n.
	tarc := exec.CommandContext(ctx, "tar", "--format=oldgnu", "-S", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
		"-C", work, "-I", "gzip -n", "-cf", tmp, "disk.raw")
	if b, err := tarc.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("tar: %v: %s", err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		return 0, err
	}
	return sizeGiB, nil
}
