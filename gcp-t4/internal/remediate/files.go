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

// resolve follows path's symlinks: a symlinked config.toml is replaced at
// its target, and the link stays a link.
func resolve(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A file that does not exist yet (our drop-in) is created at path,
		// but a dangling link is not followed into the void.
		if _, lerr := os.Lstat(path); errors.Is(lerr, fs.ErrNotExist) {
			return path, nil
		}
		return "", fmt.Errorf("%s is a symlink whose target does not exist (or is not mounted into this pod)", path)
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	return real, nil
}

// WriteAtomic replaces path (its target, when path is a symlink) with data
// so that a reader (containerd, GKE, a crash) only ever sees the old or the
// new content: temp file in the same directory, fsync, rename, fsync of the
// directory. The file mode of an existing file is kept.
func WriteAtomic(path string, data []byte) error { return writeAtomic(path, data, nil) }

// writeAtomic takes a hook run between the temp write and the rename; only
// the crash test sets it, to kill the writer exactly there. Errors name the
// file being replaced, never the random temp name, so that a retry of the
// same failure reads the same.
func writeAtomic(path string, data []byte, beforeRename func(tmp string)) error {
	target, err := resolve(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(target)
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(target); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create a temp file next to %s: %w", target, bare(err))
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
		return fmt.Errorf("write the new %s: %w", target, bare(err))
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod the new %s: %w", target, bare(err))
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync the new %s: %w", target, bare(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close the new %s: %w", target, bare(err))
	}
	if beforeRename != nil {
		beforeRename(name)
	}
	if err := os.Rename(name, target); err != nil {
		return fmt.Errorf("replace %s: %w", target, bare(err))
	}
	ok = true
	return syncDir(dir)
}

// bare drops the path from a *PathError or *LinkError (a temp name).
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// removeFile deletes path (its target when a symlink, and then the link).
func removeFile(path string) error {
	target, err := resolve(path)
	if err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", target, bare(err))
	}
	if target != path {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, bare(err))
		}
	}
	return syncDir(filepath.Dir(target))
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

// CleanTemps removes temp files a killed writer left next to path; they
// never replace anything, but they should not pile up.
func CleanTemps(path string) {
	target, err := resolve(path)
	if err != nil {
		return
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".tmp-*"))
	for _, m := range matches {
		os.Remove(m)
	}
}

// errOpenForWrite says another process holds the file open for writing.
var errOpenForWrite = errors.New("open for writing by another process")

// openForWrite reports whether any process has path open for writing. A
// Linux read lease (fcntl F_SETLEASE, F_RDLCK) is granted only while no
// process does (fcntl(2); fs/locks.c check_conflicting_open); it needs the
// caller to own the file or hold CAP_LEASE, which uid 0 on root-owned
// files does. The lease is released at once. known is false when the
// kernel or file system cannot tell (leases disabled, not the owner).
func openForWrite(path string) (open, known bool) {
	f, err := os.Open(path)
	if err != nil {
		return false, false
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY) {
			return true, true
		}
		return false, false
	}
	unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return false, true
}

// settled says whether path can be acted on: no writer has it open and it
// has not changed for quiet. wait is how long to wait before asking again.
func settled(path string, quiet time.Duration, now time.Time) (wait time.Duration, why string) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, ""
	}
	if open, _ := openForWrite(path); open {
		return max(quiet, 200*time.Millisecond), fmt.Sprintf("%s is %v", path, errOpenForWrite)
	}
	if age := now.Sub(st.ModTime()); quiet > 0 && age < quiet {
		return quiet - age, fmt.Sprintf("%s changed %s ago", path, age.Round(time.Millisecond))
	}
	return 0, ""
}

// HostLock is the advisory lock kata-deploy takes around its own edits of
// the containerd configuration (flock on the host's
// /run/lock/kata-deploy.lock, from kata-deploy 4.1.0: main.rs
// acquire_node_mutation_lock at ddcb1ad8d2; 4.0.0 takes none), so the two
// never interleave.
type HostLock struct{ Path string }

// Acquire waits up to ctx for the lock; release with the returned function.
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
			return nil, fmt.Errorf("%w: %s is held by another installer (kata-deploy 4.1+ holds it while it installs)", errLockBusy, l.Path)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var errLockBusy = errors.New("host lock busy")

// readOptional reads a file that may not exist (nil, nil).
func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}
