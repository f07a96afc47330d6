package repocheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// progress runs scripts/go-progress.sh in dir with an own build cache.
func progress(t *testing.T, dir, cache string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root(t), "scripts", "go-progress.sh"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOCACHE="+cache, "GOWORK=off", "GOFLAGS=-mod=mod")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestGoProgressCounts: the Makefile's Go steps say what they compile and
// count the packages as they go when the build cache lacks them (a fresh
// clone), and say nothing more when it has them, so a warm make demo stays
// a few lines. Two library packages that import nothing compile in well
// under a second into an empty cache.
func TestGoProgressCounts(t *testing.T) {
	mod := t.TempDir()
	files := map[string]string{
		"go.mod":   "module progresscheck\n\ngo 1.26\n",
		"a/a.go":   "package a\n\nfunc F() int { return 1 }\n",
		"b/b.go":   "package b\n\nimport \"progresscheck/a\"\n\nfunc G() int { return a.F() }\n",
		"bad/x.go": "package bad\n\nfunc H() { undefined() }\n",
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(mod, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	counted := regexp.MustCompile(`(?m)^  compiled 2 of 2 packages \(100%\), [0-9]+s$`)

	cache := t.TempDir()
	out, err := progress(t, mod, cache, "build", "./a ./b")
	if err != nil {
		t.Fatalf("cold build: %v\n%s", err, out)
	}
	if !strings.Contains(out, "go build: compiling 2 packages not yet in Go's build cache") ||
		!counted.MatchString(out) || !strings.Contains(out, "go build: done in ") {
		t.Errorf("a cold build does not say what it compiles, count to the end and say it is done:\n%s", out)
	}
	if out, err := progress(t, mod, cache, "build", "./a ./b"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("a warm build prints %q (err %v); want nothing", out, err)
	}

	// deps: what the packages (and their tests) import, counted, so the
	// go test or go vet after it finds them cached.
	cache = t.TempDir()
	out, err = progress(t, mod, cache, "deps", "./b")
	if err != nil {
		t.Fatalf("deps: %v\n%s", err, out)
	}
	if !strings.Contains(out, "go: first compiling the 2 packages that ./b and their tests import") || !counted.MatchString(out) {
		t.Errorf("deps does not say what it compiles and count it:\n%s", out)
	}
	if out, err := progress(t, mod, cache, "deps", "./b"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("warm deps prints %q (err %v); want nothing", out, err)
	}

	// watch passes a command's output and exit status through.
	out, err = progress(t, mod, cache, "watch", "sh", "-c", "echo 'ok  	x	0.1s'; exit 3")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || out != "ok  \tx\t0.1s\n" {
		t.Errorf("watch: err %v, output %q; want exit 3 and the line alone", err, out)
	}
	// A failed compile shows go's error, with go's exit status.
	out, err = progress(t, mod, cache, "build", "./bad")
	if !errors.As(err, &exit) || !strings.Contains(out, "undefined: undefined") {
		t.Errorf("a failing build: err %v, output %q; want go's error and a non-zero exit", err, out)
	}
}

// TestGoProgressWatchOutlivesSilence: `make unit` runs go test through
// the watch mode, which speaks up after each silent stretch. It once
// ended at the first one (it took a read timeout for end of input), so
// go test died of SIGPIPE in the middle of the suite. A command silent
// for longer than the stretch (GO_PROGRESS_SILENCE seconds; a minute in
// the Makefile) must be followed to its end, its lines and exit status
// passed through.
func TestGoProgressWatchOutlivesSilence(t *testing.T) {
	cmd := exec.Command(filepath.Join(root(t), "scripts", "go-progress.sh"), "watch", "sh", "-c", `echo "ok  a 0.1s"; sleep 3; echo "ok  b 0.1s"; exit 3`)
	cmd.Env = append(os.Environ(), "GO_PROGRESS_SILENCE=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit %v, want the command's 3:\n%s", err, out)
	}
	for _, want := range []string{"ok  a", "nothing printed for", "ok  b"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("watch output lacks %q:\n%s", want, out)
		}
	}
}
