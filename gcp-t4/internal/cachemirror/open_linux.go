//go:build linux

package cachemirror

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// openBeneath opens the file parts name below root one component at a
// time, each with O_NOFOLLOW: a symbolic link anywhere on the path fails
// there (ELOOP) instead of being followed, and since no component is "."
// or "..", what is opened lies beneath root. openat2's
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS would say it in one call, but only
// golang.org/x/sys names it, and the podVM's binaries link the standard
// library only. Each directory on the way must be a directory and the
// file a regular file: O_NONBLOCK keeps a FIFO from holding the open, and
// the mode check after each open refuses it.
func openBeneath(root *os.File, dir string, parts []string) (*os.File, error) {
	fail := func(upTo int, err error) error {
		if errors.Is(err, syscall.ELOOP) {
			err = ErrLink
		}
		return &fs.PathError{Op: "open", Path: filepath.Join(parts[:upTo+1]...), Err: err}
	}
	rc, err := root.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var openErr error
	if err := rc.Control(func(rootFD uintptr) {
		at := int(rootFD)
		for i, p := range parts {
			// No O_DIRECTORY: on a link it fails ENOTDIR, not ELOOP, and
			// the link would go unnamed; the mode check below says it.
			next, err := openat(at, p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC)
			if at != int(rootFD) {
				syscall.Close(at)
			}
			if err != nil {
				openErr = fail(i, err)
				return
			}
			want, what := uint32(syscall.S_IFREG), errNotRegular
			if i < len(parts)-1 {
				want, what = syscall.S_IFDIR, errNotDir
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(next, &st); err != nil || st.Mode&syscall.S_IFMT != want {
				syscall.Close(next)
				if err == nil {
					err = fmt.Errorf("%w (mode %#o)", what, st.Mode&syscall.S_IFMT)
				}
				openErr = fail(i, err)
				return
			}
			at = next
		}
		fd = at
	}); err != nil {
		return nil, err
	}
	if openErr != nil {
		return nil, openErr
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, filepath.Join(parts...))), nil
}

// openat retries an open interrupted by a signal.
func openat(at int, name string, flags int) (int, error) {
	for {
		fd, err := syscall.Openat(at, name, flags, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}
