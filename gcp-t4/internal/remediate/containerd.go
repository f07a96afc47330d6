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
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

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
func (c Containerd) Version(ctx context.Context) (containerdrelease.Version, error) {
	out, err := c.run(ctx, "--version")
	if err != nil {
		return containerdrelease.Version{}, err
	}
	// "containerd github.com/containerd/containerd/v2 v2.0.14 <commit>" or,
	// built from the module, "... 2.2.1+unknown".
	f := strings.Fields(string(out))
	for i := len(f) - 1; i >= 0; i-- {
		if v, err := containerdrelease.ParseVersion(f[i]); err == nil && !strings.Contains(f[i], "/") {
			return v, nil
		}
	}
	return containerdrelease.Version{}, fmt.Errorf("%s --version printed %q: no version in it", c.Binary, strings.TrimSpace(string(out)))
}

// Dump is `containerd --config main config dump`, decoded: the
// configplan.Checker the planner proves its changes with.
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
