package repocheck

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lanesRun is one run of scripts/lanes.sh: its output so far is read line
// by line, so a test can wait for what a lane said before it acts.
type lanesRun struct {
	cmd  *exec.Cmd
	out  *bufio.Scanner
	text strings.Builder
	hung *time.Timer
}

func startLanes(t *testing.T, dir string, args ...string) *lanesRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(root(t), "scripts", "lanes.sh"), args...)
	cmd.Dir = dir
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &lanesRun{cmd: cmd, out: bufio.NewScanner(pipe)}
	// Only turns a hang (a lane never stopped) into a failure; FIFOs, not
	// the clock, order each run.
	r.hung = time.AfterFunc(time.Minute, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return r
}

// until reads lines until one contains s, and returns it.
func (r *lanesRun) until(t *testing.T, s string) string {
	t.Helper()
	for r.out.Scan() {
		r.text.WriteString(r.out.Text() + "\n")
		if strings.Contains(r.out.Text(), s) {
			return r.out.Text()
		}
	}
	t.Fatalf("the run ended without %q:\n%s", s, r.text.String())
	return ""
}

// end reads the rest and returns the exit status.
func (r *lanesRun) end(t *testing.T) (int, string) {
	t.Helper()
	for r.out.Scan() {
		r.text.WriteString(r.out.Text() + "\n")
	}
	err := r.cmd.Wait()
	r.hung.Stop()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), r.text.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, r.text.String()
}

// gone: the process with that pid has ended, waited for through a pidfd
// (it becomes readable when the process exits, child of ours or not): the
// script returns once its side lane's leader is reaped, and the lane's
// other processes die of the signal a moment later.
func gone(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(time.Minute/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 1
	}
}

// TestLanes runs every path of scripts/lanes.sh, which make test uses to
// build and boot the podVM beside the Go checks: both lanes pass; the side
// lane fails (its status, named); the main lane fails (the side lane and
// its children stopped, the main lane's status); SIGTERM and SIGINT to the
// script (both lanes stopped, 143 and 130).
func TestLanes(t *testing.T) {
	dir := t.TempDir()
	fifo := func(name string) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	r := startLanes(t, dir, "side", "echo one; echo two >&2", "sh", "-c", "echo main")
	code, out := r.end(t)
	for _, want := range []string{"side | one\n", "side | two\n", "main\n", "lanes: main lane and side passed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("both pass: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}

	r = startLanes(t, dir, "podvm-test", "echo boot failed; exit 4", "true")
	code, out = r.end(t)
	if code != 4 || !strings.Contains(out, "podvm-test | boot failed") || !strings.Contains(out, "podvm-test failed (exit 4)") {
		t.Errorf("side lane fails: exit %d, want 4 and the lane named:\n%s", code, out)
	}

	// The side lane starts a child that waits at a FIFO nobody opens, and
	// says its pids; the main lane fails once it has read them.
	hold := fifo("hold")
	said := fifo("said")
	side := `cat ` + hold + ` & echo "pids $$ $!" >` + said + `; wait`
	r = startLanes(t, dir, "side", side, "sh", "-c", "cat "+said+"; exit 5")
	line := r.until(t, "pids ")
	code, out = r.end(t)
	if code != 5 || !strings.Contains(out, "lanes: the main lane failed (exit 5); stopping side") {
		t.Errorf("main lane fails: exit %d, want 5 and the side lane stopped:\n%s", code, out)
	}
	for _, f := range strings.Fields(strings.TrimPrefix(line, "pids "))[:2] {
		pid, _ := strconv.Atoi(f)
		if pid == 0 || !gone(pid) {
			t.Errorf("main lane fails: the side lane's process %s is still running", f)
		}
	}

	for _, sig := range []struct {
		s    syscall.Signal
		code int
	}{{syscall.SIGTERM, 143}, {syscall.SIGINT, 130}} {
		mainHold := fifo("main-" + sig.s.String())
		sideHold := fifo("side-" + sig.s.String())
		ready := fifo("ready-" + sig.s.String())
		// Each lane says its pid, then waits at a FIFO; the script is
		// signalled once both have spoken.
		r = startLanes(t, dir, "side", `echo "side $$"; exec cat `+sideHold,
			"sh", "-c", `echo "main $$" >`+ready+`; exec cat `+mainHold)
		sidePid := r.until(t, "side | side ")
		rd, err := os.ReadFile(ready)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Process.Signal(sig.s); err != nil {
			t.Fatal(err)
		}
		code, out = r.end(t)
		if code != sig.code || !strings.Contains(out, "stopping both lanes") {
			t.Errorf("%v: exit %d, want %d and both lanes stopped:\n%s", sig.s, code, sig.code, out)
		}
		for _, f := range []string{strings.Fields(sidePid)[3], strings.Fields(string(rd))[1]} {
			if pid, _ := strconv.Atoi(f); pid == 0 || !gone(pid) {
				t.Errorf("%v: lane process %s is still running:\n%s", sig.s, f, out)
			}
		}
	}

	r = startLanes(t, dir, "side")
	if code, out := r.end(t); code != 2 || !strings.Contains(out, "usage: lanes.sh") {
		t.Errorf("no command: exit %d, want 2 and the usage:\n%s", code, out)
	}
}
