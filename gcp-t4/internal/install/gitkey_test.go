package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

// gitIn runs git in dir with the test's environment and fails the test on
// an error; it returns stdout.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

// isolateGit keeps the machine's git configuration and any repository
// above the test's directories out of the answers: no global or system
// configuration (a global core.excludesFile could ignore key.json), and
// no search for a repository above root.
func isolateGit(t *testing.T, root string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is missing: the check under test asks git (apt-get install -y git): %v", err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// TestInstallRefusesAKeyGitWouldCommit runs `gcp-t4 install --render
// --credentials-file` on a key in a fresh git repository: refused with
// exit 2 while git would add it (and `git add -A` then does add it, so
// the message is git's own answer), accepted once .gitignore names it, and
// accepted outside any work tree and where git is not installed.
func TestInstallRefusesAKeyGitWouldCommit(t *testing.T) {
	root := t.TempDir()
	isolateGit(t, root)
	repo := filepath.Join(root, "repo")
	if err := os.Mkdir(repo, 0o700); err != nil {
		t.Fatal(err)
	}
	gitIn(t, repo, "init", "-q")
	key := testKey()
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	install := func(keyPath string) (int, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args := append(slices.Clone(requiredFlags), "--render", "--set", ClusterIDKey+"=5e2f3c1a-0000-4000-8000-000000000000", "--credentials-file", keyPath)
		code := Main(t.Context(), args, &stdout, &stderr, nil)
		return code, stderr.String()
	}
	unchanged := func(p string) {
		t.Helper()
		b, err := os.ReadFile(p)
		st, serr := os.Stat(p)
		if err != nil || serr != nil || !bytes.Equal(b, key) || st.Mode().Perm() != 0o600 {
			t.Errorf("%s changed by the refusal: %v %v, mode %v", p, err, serr, st.Mode())
		}
	}

	// In the work tree, not ignored: refused, naming the file, git add
	// and both fixes; the file as it was.
	inRepo := filepath.Join(repo, "deploy", "key.json")
	write(inRepo)
	code, stderr := install(inRepo)
	for _, want := range []string{"--credentials-file " + `"` + inRepo + `"`, "`git add` there would commit it", "move it out of the work tree", "add it to .gitignore", repo} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal without %q:\n%s", want, stderr)
		}
	}
	if code != 2 {
		t.Errorf("exit %d for a key git would commit, want 2 (misuse)\n%s", code, stderr)
	}
	unchanged(inRepo)
	// The message is git's answer: git add does take the file.
	gitIn(t, repo, "add", "-A")
	if staged := gitIn(t, repo, "diff", "--cached", "--name-only"); !strings.Contains(staged, "deploy/key.json") {
		t.Fatalf("git add -A did not stage the key the check refused (%q): the check and git disagree", staged)
	}
	// Tracked: refused even once .gitignore names it (git ignores rules
	// for tracked files).
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("key.json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stderr := install(inRepo); code != 2 || !strings.Contains(stderr, "git tracks this service account key") || !strings.Contains(stderr, "git rm --cached") {
		t.Errorf("a tracked key: exit %d\n%s", code, stderr)
	}
	unchanged(inRepo)

	// Ignored and untracked: accepted.
	gitIn(t, repo, "rm", "-q", "--cached", "deploy/key.json")
	gitIn(t, repo, "add", "-A")
	if staged := gitIn(t, repo, "diff", "--cached", "--name-only"); strings.Contains(staged, "key.json") {
		t.Fatalf("git add -A staged the ignored key (%q)", staged)
	}
	if code, stderr := install(inRepo); code != 0 {
		t.Errorf("an ignored key refused: exit %d\n%s", code, stderr)
	}

	// Outside any work tree (the guide's place): accepted.
	outside := filepath.Join(root, "home", ".config", "caa-gcp-t4", "caa-key.json")
	write(outside)
	if code, stderr := install(outside); code != 0 {
		t.Errorf("a key outside any work tree refused: exit %d\n%s", code, stderr)
	}

	// No git on PATH: no check, the key in the work tree accepted.
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := install(inRepo); code != 2 {
		t.Fatalf("with git, the unignored key is accepted again (exit %d): the next case would prove nothing", code)
	}
	t.Setenv("PATH", t.TempDir())
	if code, stderr := install(inRepo); code != 0 {
		t.Errorf("without git: exit %d, want no check\n%s", code, stderr)
	}
}

// TestInstallMDKeepsTheKeyOutOfTheRepository runs docs/install.md's env
// and identity steps as TestAgainstAPIServer/InstallMDWalkthrough does
// (the same commands, the same handlers, no cluster needed): CAA's key
// lands outside the repository, mode 0600 in a 0700 directory, where
// install's check accepts it; and every command of the page that hands
// the key on names that place, never a file in the working directory.
func TestInstallMDKeepsTheKeyOutOfTheRepository(t *testing.T) {
	w := &walk{home: t.TempDir(), workdir: t.TempDir(), out: map[string]string{},
		vars: map[string]string{"PROJECT": "demo-project", "BUCKET": "test-bucket"}}
	_, steps := docSteps(t)
	for _, step := range []string{"env", "identity"} {
		if len(steps[step]) == 0 {
			t.Fatalf("docs/install.md has no %s step", step)
		}
		for _, c := range steps[step] {
			w.run(t, step, c.Text)
		}
	}
	w.keyLeftTheRepository(t)
	if strings.Contains(w.vars["BUCKET"], "gs://") || !strings.HasPrefix(w.vars["KEYDIR"], w.home+"/") {
		t.Errorf("env: BUCKET %q (a name, as the runbook's), KEYDIR %q (under the home %s)", w.vars["BUCKET"], w.vars["KEYDIR"], w.home)
	}

	blocks, err := doccmd.File(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	keyArg := regexp.MustCompile(`(?:-credentials-file[ =]|--from-file=GCP_CREDENTIALS=)(\S+)`)
	n := 0
	for _, c := range doccmd.Commands(blocks) {
		for _, m := range keyArg.FindAllStringSubmatch(c.Text, -1) {
			n++
			if m[1] != `"$KEYDIR/caa-key.json"` {
				t.Errorf("docs/install.md line %d hands on the key as %s, not the identity step's \"$KEYDIR/caa-key.json\"", c.Line, m[1])
			}
		}
	}
	if n < 3 {
		t.Errorf("docs/install.md hands the key on %d times; want preflight's, install's and the Helm Secret's", n)
	}
}
