//go:build !linux

package imagestore

import (
	"errors"
	"io/fs"
)

// Apply needs Linux's mknod, chown and trusted xattrs.
func Apply(string) error { return errors.New("applying a store's owners and whiteouts needs Linux") }

func checkApplied(string, Entry, fs.FileInfo) error {
	return errors.New("checking a store's owners and whiteouts needs Linux")
}
