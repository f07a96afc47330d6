package remediate

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// Runtime is a containerd version.
type Runtime struct {
	Major, Minor int
	Raw          string
}

var versionRe = regexp.MustCompile(`(\d+)\.(\d+)(?:\.\d+)?`)

// ParseRuntimeVersion reads "v1.7.29", "1.7.29+unknown", "containerd://2.0.4"
// or "2.2.1-gke.0".
func ParseRuntimeVersion(s string) (Runtime, error) {
	m := versionRe.FindStringSubmatch(s)
	if m == nil {
		return Runtime{}, fmt.Errorf("containerd version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Runtime{Major: major, Minor: minor, Raw: s}, nil
}

func (r Runtime) String() string {
	if r.Raw != "" {
		return r.Raw
	}
	return fmt.Sprintf("%d.%d", r.Major, r.Minor)
}

// SameMinor reports whether two versions are the same release line.
func (r Runtime) SameMinor(o Runtime) bool { return r.Major == o.Major && r.Minor == o.Minor }

// MaxSchema is the newest config version the runtime accepts: 1.x rejects
// anything above 2, 2.0–2.2 above 3, 2.3 introduced 4.
func (r Runtime) MaxSchema() int {
	switch {
	case r.Major < 2:
		return 2
	case r.Major == 2 && r.Minor < 3:
		return 3
	default:
		return 4
	}
}

// MigratesEachFile reports whether the release migrates every imported file
// to its own config version before merging it: from containerd 2.3.0
// LoadConfigWithPlugins migrates a file whose version is below the merged one
// (cmd/containerd/server/config/config.go at v2.3.0 and v2.4.2). Before it
// (v1.7.29 services/server/config/config.go, v2.0.14 and v2.2.1
// cmd/containerd/server/config/config.go) files are merged as they are and
// the plugins' migration later runs once, from the merged version.
func (r Runtime) MigratesEachFile() bool { return r.Major > 2 || r.Major == 2 && r.Minor >= 3 }

// Containerd runs the node's own containerd binary for what containerd
// itself decides without a daemon: `containerd --config F config dump`
// prints the configuration containerd builds from F, its imports and its
// built-in defaults (migrated to the release's layout on 2.x). Every
// candidate change is checked with it before anything is written, so the
// merge rules (imports, globs, whole-table replacement on 1.7, version
// migration, BOM acceptance, defaults) are those of the exact release that
// will load the files, not a model of ours.
type Containerd struct {
	// Binary is the containerd executable as this process sees it (the
	// host's, under Root).
	Binary string
	// Root is the host root the binary belongs to; a dynamically linked
	// binary runs through that root's own loader and libraries, since the
	// container's may differ or be missing. "" or "/" is this process's root.
	Root    string
	Timeout time.Duration
}

// command builds the invocation, through the host's ELF interpreter when
// the binary has one and lives under another root.
func (c Containerd) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	if c.Binary == "" {
		return nil, errors.New("no containerd binary configured (--containerd-binary)")
	}
	argv := append([]string{c.Binary}, args...)
	if c.Root != "" && c.Root != "/" {
		interp, err := elfInterpreter(c.Binary)
		if err != nil {
			return nil, err
		}
		if interp != "" {
			loader := filepath.Join(c.Root, interp)
			if _, err := os.Stat(loader); err != nil {
				return nil, fmt.Errorf("containerd binary %s is dynamically linked, but its loader %s is not under the host root: %w", c.Binary, interp, err)
			}
			argv = append([]string{loader, "--inhibit-cache", "--library-path", strings.Join(libraryDirs(c.Root), ":")}, argv...)
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	return cmd, nil
}

func elfInterpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("containerd binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", fmt.Errorf("containerd binary %s: read its ELF interpreter: %w", path, err)
			}
			return string(bytes.TrimRight(b, "\x00")), nil
		}
	}
	return "", nil
}

// libraryDirs are the usual glibc library directories of a Debian/Ubuntu
// (multiarch) or other host root, those that exist.
func libraryDirs(root string) []string {
	var out []string
	for _, d := range []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"} {
		p := filepath.Join(root, d)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

func (c Containerd) run(ctx context.Context, args ...string) ([]byte, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd, err := c.command(ctx, args...)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", c.Binary, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return out, nil
}

// lastLine keeps containerd's own error ("containerd: failed to ...").
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Version is `containerd --version`.
func (c Containerd) Version(ctx context.Context) (Runtime, error) {
	out, err := c.run(ctx, "--version")
	if err != nil {
		return Runtime{}, err
	}
	// "containerd github.com/containerd/containerd/v2 v2.0.14 <commit>" or,
	// built from the module, "... 2.2.1+unknown".
	f := strings.Fields(string(out))
	for i := len(f) - 1; i >= 0; i-- {
		if r, err := ParseRuntimeVersion(f[i]); err == nil && !strings.Contains(f[i], "/") {
			return r, nil
		}
	}
	return Runtime{}, fmt.Errorf("%s --version printed %q: no version in it", c.Binary, strings.TrimSpace(string(out)))
}

// Dump is `containerd --config main config dump`, decoded.
func (c Containerd) Dump(ctx context.Context, main string) (map[string]any, error) {
	out, err := c.run(ctx, "--config", main, "config", "dump")
	if err != nil {
		return nil, err
	}
	doc, err := tomledit.Decode(out)
	if err != nil {
		return nil, fmt.Errorf("%s config dump printed TOML that does not parse: %w", c.Binary, err)
	}
	return doc, nil
}

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
// is for containerd.
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

// MergedVersion is the config version containerd merges files into, before
// the plugins' migration. On 1.7 and 2.0–2.2 a later file's non-zero version
// replaces the merged one (mergo.WithOverride); a 2.x file without a version
// is first migrated to the merged version (LoadConfig's `case 0, 1`). From
// 2.3 every file is migrated on its own, so the merged version never leaves
// the main file's settings unmigrated: the main file's is returned.
func MergedVersion(run Runtime, files []LoadFile) int {
	if len(files) == 0 {
		return 0
	}
	if run.MigratesEachFile() {
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

var bom = []byte("\xef\xbb\xbf")

func stripBOM(b []byte) []byte { return bytes.TrimPrefix(b, bom) }
