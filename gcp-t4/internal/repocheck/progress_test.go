package repocheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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

// fakeGo is a go that prints a package, then says nothing until the test
// writes a line to $FAKE_GO_GATE (a FIFO), then prints another and exits
// with $FAKE_GO_EXIT. `go list` (what build and deps ask first) answers
// at once. The gate makes "silent for longer than every timeout" a fact
// the test waits for, not a sleep it hopes is long enough.
const fakeGo = `#!/bin/sh
if [ "$1" = list ]; then echo example.com/fake/a; echo example.com/fake/b; exit 0; fi
echo example.com/fake/a
echo "ok  	example.com/fake/a	0.1s"
read -r _ <"$FAKE_GO_GATE"
echo example.com/fake/b
echo "ok  	example.com/fake/b	0.1s"
exit "$FAKE_GO_EXIT"
`

// wrapperCase is one way the Makefile runs a wrapper script around a
// long command, and the line the wrapper prints when that command has
// been silent past its timeout.
type wrapperCase struct {
	script string
	args   []string
	silent string
}

// wrapperCases: every mode of every wrapper script that reads a
// command's output with a timeout (TestEveryTimedWrapperIsChecked finds
// them). A timeout taken for the end of input once killed a cold
// `make demo` at 50 % with "Error 141" (go build dead of SIGPIPE).
func wrapperCases(goBin string) []wrapperCase {
	return []wrapperCase{
		{"scripts/go-progress.sh", []string{"build", "./..."}, "(go is still at work"},
		{"scripts/go-progress.sh", []string{"deps", "./..."}, "(go is still at work"},
		{"scripts/go-progress.sh", []string{"install", "example.com/fake@v1.0.0"}, "(go is still at work"},
		{"scripts/go-progress.sh", []string{"watch", goBin, "test", "./..."}, "nothing printed for"},
	}
}

// TestWrappersOutliveSilence runs each wrapper around a go that stays
// silent until the wrapper has said so (its timeout passed, shortened to
// a second by GO_PROGRESS_SILENCE), then goes on: the wrapper must follow
// it to the end, print its last lines and pass its exit status through.
func TestWrappersOutliveSilence(t *testing.T) {
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range wrapperCases(goBin) {
		for _, exitCode := range []int{0, 3} {
			name := fmt.Sprintf("%s %s exit %d", c.script, c.args[0], exitCode)
			gate := filepath.Join(dir, fmt.Sprintf("gate-%d-%d", i, exitCode))
			if err := syscall.Mkfifo(gate, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(root(t), c.script), c.args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GO="+goBin, "GO_PROGRESS_SILENCE=1", "FAKE_GO_GATE="+gate, fmt.Sprintf("FAKE_GO_EXIT=%d", exitCode))
			pipe, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// A wrapper that takes the silence for the end of input
			// returns while the command still waits at its gate, and
			// bash waits for the command: the run would never end. This
			// bound only turns that hang into a failure; the gate, not
			// the clock, orders the run.
			hung := time.AfterFunc(time.Minute, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
			var out strings.Builder
			opened := false
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				out.WriteString(sc.Text() + "\n")
				// The wrapper said the command is silent: only now may
				// the command go on.
				if !opened && strings.Contains(sc.Text(), c.silent) {
					opened = true
					f, err := os.OpenFile(gate, os.O_WRONLY, 0)
					if err != nil {
						t.Fatal(err)
					}
					_, _ = f.WriteString("go on\n")
					f.Close()
				}
			}
			err = cmd.Wait()
			hung.Stop()
			if !opened {
				t.Errorf("%s: the wrapper ended without saying the command was silent (it would have killed it):\n%s", name, out.String())
				continue
			}
			got := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				got = exit.ExitCode()
			} else if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got != exitCode {
				t.Errorf("%s: exit %d, want the command's %d (141 is SIGPIPE: the wrapper stopped reading):\n%s", name, got, exitCode, out.String())
			}
			// What the command printed after its silence, passed through.
			last := "ok  \texample.com/fake/b"
			if !strings.Contains(out.String(), last) {
				t.Errorf("%s: output lacks %q, what the command printed after its silence:\n%s", name, last, out.String())
			}
		}
	}
}

// TestEveryTimedWrapperIsChecked: a tracked shell script that reads with
// a timeout (read -t) wraps a command's output, and is held by
// TestWrappersOutliveSilence; a new one must be added there.
func TestEveryTimedWrapperIsChecked(t *testing.T) {
	out, err := exec.Command("git", "-C", root(t), "ls-files", "*.sh").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	checked := map[string]bool{}
	for _, c := range wrapperCases("go") {
		checked[c.script] = true
	}
	timed := regexp.MustCompile(`\bread\b[^\n]*\s-t\b`)
	for _, f := range strings.Fields(string(out)) {
		b, err := os.ReadFile(filepath.Join(root(t), f))
		if err != nil {
			t.Fatal(err)
		}
		if timed.Match(b) && !checked[f] {
			t.Errorf("%s reads with a timeout (read -t): add its modes to wrapperCases so a silent command is shown not to kill it", f)
		}
	}
}
