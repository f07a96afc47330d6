package node

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

// repoRoot is two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// gitRepo makes a repository with one commit holding files, and returns
// its path and HEAD.
func gitRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "--allow-empty", "-m", "test")
	return dir, git("rev-parse", "HEAD")
}

// TestDocCommandsCheckThePins runs docs/node-harness.md's commands as
// written. `make node-e2e UPSTREAM=… KATA=…` is run with the placeholders
// replaced by made checkouts and CAA_PIN set to the made CAA's commit (the
// real pin names a commit no test can make): checkouts that match the pins
// but lack the sources the stage builds get exit 2 naming the missing
// path, never a pass (the made checkouts hold no CAA or kata); a kata commit other than
// CAA's versions.yaml names, a missing path and a lone UPSTREAM each get
// exit 2 naming the variable. The bare `make node-e2e` is the command whose
// run is TestPodRunsOnARealNode: `make -n` shows it runs test/node/e2e.sh,
// which runs that test.
func TestDocCommandsCheckThePins(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed; the doc's commands are make targets")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed; the pin check reads checkouts with it")
	}
	root := repoRoot(t)
	blocks, err := doccmd.File(filepath.Join(root, "docs", "node-harness.md"))
	if err != nil {
		t.Fatal(err)
	}
	kata, kataHead := gitRepo(t, map[string]string{"README": "kata stand-in\n"})
	caa, caaHead := gitRepo(t, map[string]string{"src/cloud-api-adaptor/versions.yaml": "tools:\n  golang: 1.25.12\noci:\n  pause:\n    tag: \"3.9\"\n  kata-containers:\n    registry: example\n    reference: " + kataHead + " # v4.0.0\n"})
	other, _ := gitRepo(t, map[string]string{"README": "another commit\n"})

	run := func(cmdline string, env ...string) (int, string) {
		cmd := exec.Command("bash", "-c", cmdline)
		cmd.Dir = root
		// As typed at a shell: not inside the make that runs this test
		// with UPSTREAM and KATA, whose MAKEFLAGS and environment would
		// hand its KATA to a command that gives UPSTREAM alone.
		for _, kv := range os.Environ() {
			switch k, _, _ := strings.Cut(kv, "="); k {
			case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "UPSTREAM", "KATA":
			default:
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatalf("%s: %v", cmdline, err)
		}
		return 0, string(out)
	}
	var sawPlain, sawPins bool
	for _, c := range doccmd.Commands(blocks) {
		switch {
		case c.Text == "make node-e2e":
			sawPlain = true
			code, out := run("make -n node-e2e")
			if code != 0 || !strings.Contains(out, "test/node/e2e.sh") {
				t.Errorf("make -n node-e2e (exit %d) does not run test/node/e2e.sh:\n%s", code, out)
			}
			// It runs every test of this module, TestPodRunsOnARealNode
			// among them: no -run narrows it.
			script, err := os.ReadFile(filepath.Join(root, "test", "node", "e2e.sh"))
			if err != nil || !strings.Contains(string(script), "test -count=1 -v -timeout 40m .") || strings.Contains(string(script), " -run ") {
				t.Errorf("test/node/e2e.sh does not run every test of test/node (%v)", err)
			}
		case strings.HasPrefix(c.Text, "make node-e2e UPSTREAM="):
			sawPins = true
			with := func(u, k string) string {
				return strings.NewReplacer("/path/to/cloud-api-adaptor", u, "/path/to/kata-containers", k).Replace(c.Text)
			}
			if with("U", "K") == c.Text {
				t.Fatalf("line %d: %q has no /path/to/cloud-api-adaptor or /path/to/kata-containers to fill in", c.Line, c.Text)
			}
			cases := []struct {
				name, cmd, want string
			}{
				{"the pins, trees without the sources", with(caa, kata), "matches the pin but has no src/cloud-api-adaptor/cmd/cloud-api-adaptor"},
				{"kata at another commit", with(caa, other), "KATA=" + other + " is at "},
				{"no such UPSTREAM", with(filepath.Join(caa, "missing"), kata), "is not a directory"},
				{"UPSTREAM alone", strings.Replace(with(caa, kata), " KATA="+kata, "", 1), "UPSTREAM and KATA go together"},
			}
			for _, tc := range cases {
				code, out := run(tc.cmd, "CAA_PIN="+caaHead)
				if code != 2 || !strings.Contains(out, tc.want) {
					t.Errorf("%s: `%s` exit %d, want 2 and %q:\n%s", tc.name, tc.cmd, code, tc.want, out)
				}
			}
			// The real pin: the made checkout is not CAA v0.22.0.
			if code, out := run(with(caa, kata)); code != 2 || !strings.Contains(out, "not CAA's pinned 38d0fcf7") {
				t.Errorf("against the real CAA pin: exit %d, want 2 naming 38d0fcf7:\n%s", code, out)
			}
		default:
			t.Errorf("docs/node-harness.md line %d: %q is a command no test runs; add it here", c.Line, c.Text)
		}
	}
	if !sawPlain || !sawPins {
		t.Errorf("docs/node-harness.md gives `make node-e2e` %v and `make node-e2e UPSTREAM=… KATA=…` %v; want both", sawPlain, sawPins)
	}
}
