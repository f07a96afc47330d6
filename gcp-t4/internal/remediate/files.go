package remediate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// BackupSuffix names the one-time copy of a file taken before our first
// change to it; it is never overwritten, so it keeps what GKE wrote.
const BackupSuffix = ".gcp-t4.bak"

// WriteAtomic replaces path with data so that a reader (containerd, GKE,
// a crash) only ever sees the old or the new content: temp file in the
// same directory, fsync, rename, fsync of the directory. The file mode of
// an existing file is kept.
func WriteAtomic(path string, data []byte) error { return writeAtomic(path, data, nil) }

// writeAtomic takes a hook run between the temp write and the rename; only
// the crash test sets it, to kill the writer exactly there.
func writeAtomic(path string, data []byte, beforeRename func(tmp string)) error {
	dir := filepath.Dir(path)
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp file next to %s: %w", path, err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if beforeRename != nil {
		beforeRename(name)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", name, path, err)
	}
	ok = true
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// BackupOnce copies path to path+BackupSuffix unless that backup exists.
func BackupOnce(path string, data []byte) error {
	bak := path + BackupSuffix
	if _, err := os.Stat(bak); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stat backup %s: %w", bak, err)
	}
	return WriteAtomic(bak, data)
}

// CleanTemps removes temp files a killed writer left next to path; they
// never replace anything, but they should not pile up.
func CleanTemps(path string) {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"))
	for _, m := range matches {
		os.Remove(m)
	}
}

// HostLock is the advisory lock kata-deploy takes around its own edits of
// the containerd configuration (flock on /run/lock/kata-deploy.lock), so
// the two never interleave.
type HostLock struct{ Path string }

// Acquire blocks until the lock is held or ctx ends; release with the
// returned function.
func (l HostLock) Acquire(ctx context.Context) (func(), error) {
	if l.Path == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o755); err != nil {
		return nil, fmt.Errorf("create lock directory for %s: %w", l.Path, err)
	}
	f, err := os.OpenFile(l.Path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open host lock %s (mount the host's /run/lock): %w", l.Path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", l.Path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for host lock %s held by another installer: %w", l.Path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
