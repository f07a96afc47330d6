package repocheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeToolGo answers what test/controlplane/build.sh and go-progress.sh
// ask go on a cold cache, without compiling: the module's version, the
// tool directive's packages, nothing stale, and a build that writes its
// -o file and logs the call.
const fakeToolGo = `#!/bin/sh
case "$1 $2" in
"list -m") echo "$FAKE_VERSION"; exit 0 ;;
"list tool") printf '%s\n' $FAKE_TOOLS; exit 0 ;;
esac
[ "$1" = list ] && exit 0
if [ "$1" = build ]; then
	echo "build $*" >>"$FAKE_LOG"
	while [ $# -gt 0 ]; do
		if [ "$1" = -o ]; then printf 'binary\n' >"$2"; fi
		shift
	done
	exit 0
fi
exit 1
`

// toolPackages are the packages of a tool module's tool directives.
func toolPackages(t *testing.T, gomod string) []string {
	t.Helper()
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	block := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "tool (":
			block = true
		case block && line == ")":
			block = false
		case block && line != "":
			pkgs = append(pkgs, line)
		case strings.HasPrefix(line, "tool "):
			pkgs = append(pkgs, strings.TrimPrefix(line, "tool "))
		}
	}
	return pkgs
}

// TestToolBuildColdPath runs test/controlplane/build.sh's cold path (the
// one only a fresh machine takes) for every tool module, against a go
// that compiles nothing: each build must put its cache entry where the
// next run and the tests look (the tool's own name; a CNI bin dir of the
// plugins' names), leave no temporary directory, and a second run must
// reuse it without building. A cold run of make test once failed here:
// etcd's package ends in /v3, and the binary was written as "v3".
func TestToolBuildColdPath(t *testing.T) {
	r := root(t)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeToolGo), 0o755); err != nil {
		t.Fatal(err)
	}
	tools, err := os.ReadDir(filepath.Join(r, "test", "controlplane", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	majorSuffix := regexp.MustCompile(`/v[0-9]+$`)
	for _, tool := range tools {
		name := tool.Name()
		pkgs := toolPackages(t, filepath.Join(r, "test", "controlplane", "tools", name, "go.mod"))
		if len(pkgs) == 0 {
			t.Errorf("tools/%s/go.mod names no tool", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			cache, log := t.TempDir(), filepath.Join(t.TempDir(), "go.log")
			run := func() string {
				cmd := exec.Command(filepath.Join(r, "test", "controlplane", "build.sh"), name, "v9.9.9")
				cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "XDG_CACHE_HOME="+cache,
					"FAKE_VERSION=v9.9.9", "FAKE_TOOLS="+strings.Join(pkgs, " "), "FAKE_LOG="+log, "GO=")
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				if err := cmd.Run(); err != nil {
					t.Fatalf("build.sh %s: %v\n%s", name, err, errb.String())
				}
				return strings.TrimSpace(out.String())
			}
			entry := filepath.Join(cache, "caa-gcp-t4", name+"-v9.9.9")
			got := run()
			var want []string
			if len(pkgs) == 1 {
				want = []string{filepath.Join(entry, name)}
				if got != want[0] {
					t.Errorf("prints %q, want %q", got, want[0])
				}
			} else {
				for _, p := range pkgs {
					want = append(want, filepath.Join(entry, filepath.Base(majorSuffix.ReplaceAllString(p, ""))))
				}
				if got != entry {
					t.Errorf("prints %q, want the directory %q", got, entry)
				}
			}
			for _, f := range want {
				if st, err := os.Stat(f); err != nil || st.Mode().Perm()&0o111 == 0 {
					t.Errorf("cache entry %s: %v", f, err)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(entry, ".build.*")); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			builds, _ := os.ReadFile(log)
			if n := strings.Count(string(builds), "\n"); n != len(pkgs) {
				t.Errorf("%d builds, want %d:\n%s", n, len(pkgs), builds)
			}
			if again := run(); again != got {
				t.Errorf("second run prints %q, want %q", again, got)
			}
			if after, _ := os.ReadFile(log); !bytes.Equal(after, builds) {
				t.Errorf("the second run built again:\n%s", after)
			}
		})
	}
}
