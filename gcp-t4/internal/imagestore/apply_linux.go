package imagestore

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// opaqueXattr and its value are what image-rs writes on an opaque
// directory (image-rs/src/stream/unpack.rs:207).
const opaqueXattr = "trusted.overlay.opaque"

// Apply gives a store's layer directories, as Write left them, what the
// entry lists say and a directory written without privilege cannot hold:
// owners, modes, times, whiteouts (character devices 0/0), devices, FIFOs,
// opaque marks and xattrs. It needs root (CAP_MKNOD, CAP_CHOWN,
// CAP_SYS_ADMIN for trusted xattrs). The cache disk gets the same from
// cachebuild's debugfs pass, without root; Apply is for a store used in
// place, as the overlay test does.
func Apply(mountPoint string) error {
	man, all, err := Entries(mountPoint)
	if err != nil {
		return err
	}
	for _, l := range man.Layers {
		dir := filepath.Join(mountPoint, StoreDir, LayersDir, strconv.Itoa(l.Index))
		entries := all[l.Index]
		// Children before parents, so a directory's mode (which may
		// forbid writing) and time are set after its contents.
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			p := filepath.Join(dir, filepath.FromSlash(e.Path))
			switch e.Type {
			case TypeWhiteout:
				err = syscall.Mknod(p, syscall.S_IFCHR, 0)
			case TypeChar:
				err = syscall.Mknod(p, syscall.S_IFCHR|e.Mode, int(mkdev(e.Major, e.Minor)))
			case TypeBlock:
				err = syscall.Mknod(p, syscall.S_IFBLK|e.Mode, int(mkdev(e.Major, e.Minor)))
			case TypeFifo:
				err = syscall.Mknod(p, syscall.S_IFIFO|e.Mode, 0)
			}
			if err != nil {
				return fmt.Errorf("layer %d, %q: %w", l.Index, e.Path, err)
			}
			if err := os.Lchown(p, e.UID, e.GID); err != nil {
				return err
			}
			if e.Type == TypeSymlink {
				continue // no mode, and the standard library sets no symlink times
			}
			if e.Opaque {
				if err := syscall.Setxattr(p, opaqueXattr, []byte("y"), 0); err != nil {
					return fmt.Errorf("layer %d, %q: %s: %w", l.Index, e.Path, opaqueXattr, err)
				}
			}
			for k, v := range e.Xattrs {
				if err := syscall.Setxattr(p, k, v, 0); err != nil {
					return fmt.Errorf("layer %d, %q: xattr %s: %w", l.Index, e.Path, k, err)
				}
			}
			if err := syscall.Chmod(p, e.Mode); err != nil {
				return err
			}
			t := time.Unix(e.Mtime, 0)
			if err := os.Chtimes(p, t, t); err != nil {
				return err
			}
		}
	}
	return nil
}

// mkdev is Linux's encoding of a device number (glibc's makedev).
func mkdev(major, minor int64) uint64 {
	return uint64(minor&0xff) | uint64(major&0xfff)<<8 | uint64(minor&^0xff)<<12 | uint64(major&^0xfff)<<32
}

// checkApplied checks what Apply (or the disk build) sets.
func checkApplied(p string, e Entry, st fs.FileInfo) error {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if int(s.Uid) != e.UID || int(s.Gid) != e.GID {
		return fmt.Errorf("owned by %d:%d, the list says %d:%d", s.Uid, s.Gid, e.UID, e.GID)
	}
	if e.Type != TypeSymlink && s.Mode&0o7777 != e.Mode {
		return fmt.Errorf("mode %04o, the list says %04o", s.Mode&0o7777, e.Mode)
	}
	if e.Type == TypeWhiteout && s.Rdev != 0 {
		return fmt.Errorf("a whiteout with device %#x, not 0/0", s.Rdev)
	}
	if e.Type == TypeDir {
		buf := make([]byte, 8)
		n, err := syscall.Getxattr(p, opaqueXattr, buf)
		opaque := err == nil && bytes.Equal(buf[:n], []byte("y"))
		if opaque != e.Opaque {
			return fmt.Errorf("opaque is %v, the list says %v", opaque, e.Opaque)
		}
	}
	return nil
}
