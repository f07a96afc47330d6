//go:build !linux

package cachemirror

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// openBeneath, where there is no openat (the operator's CLI off Linux;
// the podVM is Linux): each component is checked with Lstat before the
// open and the file opened is the one checked. A layout changed while it
// is read can race this; the mirror, which serves tenants, runs on Linux.
func openBeneath(root *os.File, dir string, parts []string) (*os.File, error) {
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		st, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return nil, &fs.PathError{Op: "open", Path: p, Err: ErrLink}
		}
	}
	name := filepath.Join(parts...)
	before, _ := os.Lstat(filepath.Join(dir, name))
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || !os.SameFile(before, st) {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w, or changed while opened", errNotRegular)}
	}
	return f, nil
}
