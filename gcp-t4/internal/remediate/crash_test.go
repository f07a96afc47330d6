package remediate

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashHelperEnv = "GCPT4_REMEDIATE_CRASH_HELPER"

// TestKillBetweenTempAndRename runs a real reconcile in a child process,
// SIGKILLs it after the temp file is written and fsynced but before the
// rename, and checks the config is exactly what it was.
func TestKillBetweenTempAndRename(t *testing.T) {
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		crashHelper(t, dir)
		return
	}
	// The child checks with a real containerd; build it here, in the
	// parent, which knows -short (the child is not passed it).
	f := newFixture(t, gkeFixture(t))
	checker(t, f.rel)
	orig, _ := os.ReadFile(f.cfg.Target.Config)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillBetweenTempAndRename$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+f.dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tmp := ""
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "TEMP ") {
			cmd.Process.Kill()
			t.Fatalf("helper said %q, want TEMP <path>", l)
		}
		tmp = strings.TrimPrefix(l, "TEMP ")
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("helper never reached the rename")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want killed by SIGKILL", err)
	}

	got, _ := os.ReadFile(f.cfg.Target.Config)
	if string(got) != string(orig) {
		t.Fatalf("config changed by a writer killed before its rename:\n%s", got)
	}
	if data, err := os.ReadFile(tmp); err != nil || !strings.Contains(string(data), "kata-remote") {
		t.Fatalf("temp file %s (%v): the kill did not land between write and rename", tmp, err)
	}
	// The next run converges and clears the leftover.
	r := f.remediator(t, Deps{})
	if res, err := r.Reconcile(context.Background()); err != nil || len(res.Wrote) != 1 {
		t.Fatalf("reconcile after the crash: %+v %v", res, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(f.cfg.Target.Config), ".*tmp-*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func crashHelper(t *testing.T, dir string) {
	rel := first(t, inPlace, "edited in place") // newFixture's
	probe := &fakeProbe{version: strings.TrimPrefix(rel.Version, "v"), state: HandlerState{Known: true}}
	r, err := New(fixtureConfig(dir), Deps{Probe: probe, Restarter: &fakeRestarter{}, Containerd: checker(t, rel)})
	if err != nil {
		t.Fatal(err)
	}
	// Only the config write takes the hook; the state write before it does not.
	r.beforeRename = func(tmp string) {
		fmt.Printf("TEMP %s\n", tmp)
		os.Stdout.Sync()
		select {} // wait for the kill
	}
	r.Reconcile(context.Background())
	t.Fatal("reconcile returned; the helper should have been killed before the rename")
}
