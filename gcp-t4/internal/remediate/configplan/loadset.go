package configplan

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// LoadFile is one file containerd reads, in the order it reads them.
type LoadFile struct {
	Path    string // as containerd names it (imports resolved, not symlinks)
	Data    []byte
	Version int // its root `version`, 0 when it has none
}

// LoadSet lists the files containerd loads for main, in containerd's order:
// the main file, then its imports breadth-first, each entry cleaned and made
// absolute against the importing file's directory, an entry with `*` expanded
// with filepath.Glob (no match is fine), a file read once. This is
// resolveImports and the pending loop of LoadConfig, the same in v1.7.29
// (services/server/config/config.go), v2.0.14 and v2.4.2
// (cmd/containerd/server/config/config.go). A missing file is an error, as it
// is for containerd. override holds candidate contents by path.
func LoadSet(main string, override map[string][]byte) ([]LoadFile, error) {
	var out []LoadFile
	loaded := map[string]bool{}
	pending := []string{main}
	for len(pending) > 0 {
		p := pending[0]
		pending = pending[1:]
		if loaded[p] {
			continue
		}
		data, ok := override[p]
		if !ok {
			var err error
			if data, err = os.ReadFile(p); err != nil {
				if p == main {
					return nil, fmt.Errorf("read %s: %w", p, err)
				}
				return nil, fmt.Errorf("imported file %s: %w (containerd does not start while an import is missing)", p, err)
			}
		}
		doc, err := tomledit.Decode(stripBOM(data))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, p, err)
		}
		f := LoadFile{Path: p, Data: data}
		if v, ok := doc["version"].(int64); ok {
			f.Version = int(v)
		}
		imports, err := stringList(doc["imports"])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: imports: %v", ErrUnsupported, p, err)
		}
		for _, imp := range imports {
			imp = filepath.Clean(imp)
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(filepath.Dir(p), imp)
			}
			if strings.Contains(imp, "*") {
				m, err := filepath.Glob(imp)
				if err != nil {
					return nil, fmt.Errorf("%w: %s: imports entry %q: %v", ErrUnsupported, p, imp, err)
				}
				pending = append(pending, m...)
				continue
			}
			pending = append(pending, imp)
		}
		loaded[p] = true
		out = append(out, f)
	}
	return out, nil
}

// Loads reports whether path is one of files.
func Loads(files []LoadFile, path string) bool { return loads(files, path) }

func loads(files []LoadFile, path string) bool {
	for _, f := range files {
		if f.Path == path {
			return true
		}
	}
	return false
}

// MergedVersion is the config version containerd merges files into, before
// the plugins' migration. Where the release does not migrate each file
// (containerd 1.7, 2.0–2.2) a later file's non-zero version replaces the
// merged one (mergo.WithOverride); a 2.x file without a version is first
// migrated to the merged version (LoadConfig's `case 0, 1`). Where it
// migrates each file on its own (2.3+) the merged version never leaves the
// main file's settings unmigrated: the main file's is returned.
func MergedVersion(run containerdrelease.Runtime, files []LoadFile) int {
	if len(files) == 0 {
		return 0
	}
	if run.MigratesEachFile {
		return files[0].Version
	}
	v := 0
	for _, f := range files {
		if f.Version != 0 {
			v = f.Version
		}
	}
	return v
}

func lastWithVersion(files []LoadFile, v int) string {
	culprit := ""
	for _, f := range files {
		if f.Version == v {
			culprit = f.Path
		}
	}
	return culprit
}

var bom = []byte("\xef\xbb\xbf")

func stripBOM(b []byte) []byte { return bytes.TrimPrefix(b, bom) }

// stringList reads a decoded TOML array of strings (nil: none).
func stringList(v any) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of strings, got %T", v)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("want an array of strings, got an element of type %T", e)
		}
		out = append(out, s)
	}
	return out, nil
}

func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}
