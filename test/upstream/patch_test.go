package upstream_test

import (
	"bytes"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const cpModule = "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"

// repoRoot is the caa-gcp-t4 checkout this module lives in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// apiCheckBin builds caa-api-check once per test binary, so each patch run
// does not go run it again.
func apiCheckBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(sharedDir, "caa-api-check")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	run(t, ".", nil, "go", "build", "-o", bin, "./cmd/caa-api-check")
	return bin
}

var sharedDir string

// ours is a snapshot of the parts of this repository the patch script
// reads, taken once, so that every run in these tests sees the same
// sources even while someone edits the working tree.
func ours(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(sharedDir, "ours")
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	tmp := dir + ".tmp"
	for _, sub := range []string{"scripts/upstream-patch", "src/cloud-providers"} {
		if err := os.CopyFS(filepath.Join(tmp, sub), os.DirFS(filepath.Join(repoRoot(t), sub))); err != nil {
			t.Fatalf("snapshot of %s: %v", sub, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "upstream-test")
	if err != nil {
		panic(err)
	}
	sharedDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false"), env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// syntheticTree builds the upstream-shaped tree of testdata/upstream with
// our fork's provider API copied in, lets change alter it, and commits it to
// a fresh git repository, as an upstream checkout would be.
func syntheticTree(t *testing.T, change func(t *testing.T, dir string)) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/upstream")); err != nil {
		t.Fatal(err)
	}
	fork := filepath.Join(ours(t), "src", "cloud-providers")
	cp := filepath.Join(dir, "src", "cloud-providers")
	err := filepath.WalkDir(fork, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fork, p)
		if d.IsDir() {
			if rel == "gcpt4" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(cp, rel), 0o755)
		}
		if (strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go")) || rel == "go.sum" {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(cp, rel), data, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(t, dir)
	}
	env := []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"}
	run(t, dir, env, "git", "init", "-q")
	run(t, dir, env, "git", "add", "-A")
	run(t, dir, env, "git", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "synthetic upstream")
	return dir
}

// patch runs the patch script the way `make upstream-patch` does.
func patch(t *testing.T, tree, out string, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{filepath.Join(ours(t), "scripts", "upstream-patch", "patch.sh"), "-o", out}, extra...)
	args = append(args, tree)
	return runErr(repoRoot(t), []string{"CAA_API_CHECK=" + apiCheckBin(t)}, "bash", args...)
}

func patches(t *testing.T, out string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(out, "*.patch"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestPatchSeriesOnSyntheticTree(t *testing.T) {
	tree := syntheticTree(t, nil)
	base := strings.TrimSpace(run(t, tree, nil, "git", "rev-parse", "HEAD"))
	out := filepath.Join(t.TempDir(), "series")
	work := filepath.Join(t.TempDir(), "patched")
	log, err := patch(t, tree, out, "-w", work)
	if err != nil {
		t.Fatalf("patch.sh failed: %v\n%s", err, log)
	}
	for _, want := range []string{"provider API matches", "patch 1: gcpt4 without the emulator builds and passes its tests",
		"patch 2: gcpt4 with the emulator builds and passes its tests", "cloud-api-adaptor builds with -tags gcp_t4 and lists gcp-t4", "peerpod-ctrl builds with -tags gcp_t4"} {
		if !strings.Contains(log, want) {
			t.Errorf("patch.sh output lacks %q:\n%s", want, log)
		}
	}

	t.Run("registration files", func(t *testing.T) {
		checkRegistration(t, filepath.Join(work, "src/cloud-api-adaptor/cmd/cloud-api-adaptor/gcp_t4.go"), "main")
		checkRegistration(t, filepath.Join(work, "src/peerpod-ctrl/controllers/gcp_t4.go"), "controllers")
	})

	t.Run("build tag gates the provider", func(t *testing.T) {
		caa := filepath.Join(work, "src/cloud-api-adaptor")
		bin := filepath.Join(t.TempDir(), "caa")
		run(t, caa, nil, "go", "build", "-tags", "gcp", "-o", bin, "./cmd/cloud-api-adaptor")
		if help := run(t, caa, nil, bin, "help"); strings.Contains(help, "gcp-t4") || !strings.Contains(help, "gcp") {
			t.Errorf("built without gcp_t4, help should list gcp but not gcp-t4:\n%s", help)
		}
		run(t, caa, nil, "go", "build", "-tags", "gcp,gcp_t4", "-o", bin, "./cmd/cloud-api-adaptor")
		if help := run(t, caa, nil, bin, "help"); !strings.Contains(help, "gcp-t4") {
			t.Errorf("built with gcp_t4, help should list gcp-t4:\n%s", help)
		}
	})

	t.Run("BUILTIN_CLOUD_PROVIDERS", func(t *testing.T) {
		mk, err := os.ReadFile(filepath.Join(work, "src/cloud-api-adaptor/Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		lines := regexp.MustCompile(`(?m)^\s*BUILTIN_CLOUD_PROVIDERS \?=.*$`).FindAllString(string(mk), -1)
		if len(lines) != 2 {
			t.Fatalf("want both BUILTIN_CLOUD_PROVIDERS lines, got %q", lines)
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, " gcp_t4") || strings.Count(l, "gcp_t4") != 1 {
				t.Errorf("BUILTIN_CLOUD_PROVIDERS line should end in one gcp_t4: %q", l)
			}
		}
	})

	t.Run("go mod tidy in the modules that replace cloud-providers", func(t *testing.T) {
		for _, m := range []string{"src/cloud-api-adaptor/go.mod", "src/peerpod-ctrl/go.mod"} {
			data, err := os.ReadFile(filepath.Join(work, m))
			if err != nil {
				t.Fatal(err)
			}
			// gcpt4's own dependencies must now be listed where it is linked.
			if !strings.Contains(string(data), "cloud.google.com/go/compute v1.64.0") {
				t.Errorf("%s does not require cloud.google.com/go/compute v1.64.0 after tidy:\n%s", m, data)
			}
		}
	})

	t.Run("commit series", func(t *testing.T) {
		files := patches(t, out)
		wantNames := []string{"0001-cloud-providers-add-the-gcp-t4-provider.patch",
			"0002-cloud-providers-gcpt4-add-a-test-only-GCE-emulator.patch",
			"0003-cloud-api-adaptor-link-gcp-t4-with-build-tag-gcp_t4.patch",
			"0004-peerpod-ctrl-link-gcp-t4-with-build-tag-gcp_t4.patch"}
		if len(files) != len(wantNames) {
			t.Fatalf("want %d patches, got %q", len(wantNames), files)
		}
		wantIn := [][]string{
			{"+++ b/src/cloud-providers/gcpt4/provider.go", "+++ b/src/cloud-providers/gcpt4/provider_test.go"},
			{"+++ b/src/cloud-providers/gcpt4/gcefake/server.go", "+++ b/src/cloud-providers/gcpt4/provider_gcefake_test.go", "Test-only."},
			{"+++ b/src/cloud-api-adaptor/cmd/cloud-api-adaptor/gcp_t4.go", "+//go:build gcp_t4", "src/cloud-api-adaptor/Makefile", "src/cloud-api-adaptor/go.mod"},
			{"+++ b/src/peerpod-ctrl/controllers/gcp_t4.go", "+package controllers", "src/peerpod-ctrl/go.mod"},
		}
		for i, f := range files {
			if filepath.Base(f) != wantNames[i] {
				t.Errorf("patch %d is %s, want %s", i+1, filepath.Base(f), wantNames[i])
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s := string(data)
			want := append(wantIn[i], "From: caa-gcp-t4 <", "Date: Thu, 1 Jan 2026 00:00:00 +0000", "Signed-off-by: caa-gcp-t4 <")
			if i == 0 {
				// git am and reviewers learn the base from the first patch.
				want = append(want, "base-commit: "+base)
			}
			for _, want := range want {
				if !strings.Contains(s, want) {
					t.Errorf("%s lacks %q", filepath.Base(f), want)
				}
			}
		}
		// The emulator is its own test-only patch: patch 1 has none of it,
		// patch 2 nothing else.
		for i, f := range files[:2] {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(`(?m)^\+\+\+ b/(\S+)$`).FindAllStringSubmatch(string(data), -1) {
				name := strings.TrimPrefix(m[1], "src/cloud-providers/")
				emulator := strings.HasPrefix(name, "gcpt4/gcefake/") || strings.HasSuffix(name, "_gcefake_test.go")
				switch {
				case i == 0 && emulator:
					t.Errorf("patch 1 has the emulator's %s", m[1])
				case i == 1 && !emulator && name != "go.mod" && name != "go.sum":
					t.Errorf("the test-only patch 2 has %s", m[1])
				}
			}
		}
		// The series applies in order (git am, as a reviewer would) to the
		// base it names, and gives exactly the tree that was built and tested.
		check := filepath.Join(t.TempDir(), "apply")
		run(t, "", nil, "git", "clone", "-q", tree, check)
		who := []string{"GIT_COMMITTER_NAME=reviewer", "GIT_COMMITTER_EMAIL=reviewer@example.invalid"}
		run(t, check, who, "git", append([]string{"-c", "commit.gpgsign=false", "am", "-q"}, files...)...)
		if got, want := run(t, check, nil, "git", "rev-parse", "HEAD^{tree}"), run(t, work, nil, "git", "rev-parse", "HEAD^{tree}"); got != want {
			t.Errorf("the series applied with git am gives tree %s, the patched tree is %s", strings.TrimSpace(got), strings.TrimSpace(want))
		}
	})

	t.Run("reproducible", func(t *testing.T) {
		again := filepath.Join(t.TempDir(), "again")
		// -n: gcpt4's tests passed in the first run; this one checks bytes.
		log, err := patch(t, tree, again, "-n")
		if err != nil {
			t.Fatalf("second run failed: %v\n%s", err, log)
		}
		// It says what it did, and claims no tests it did not run.
		for _, want := range []string{"patch 1: gcpt4 without the emulator builds and vets; its tests not run (-n)",
			"patch 2: gcpt4 with the emulator builds and vets; its tests not run (-n)"} {
			if !strings.Contains(log, want) {
				t.Errorf("patch.sh -n output lacks %q:\n%s", want, log)
			}
		}
		if strings.Contains(log, "passes its tests") {
			t.Errorf("patch.sh -n claims tests it did not run:\n%s", log)
		}
		first, second := patches(t, out), patches(t, again)
		if len(first) != len(second) {
			t.Fatalf("second run made %d patches, first %d", len(second), len(first))
		}
		for i := range first {
			a, _ := os.ReadFile(first[i])
			b, _ := os.ReadFile(second[i])
			if !bytes.Equal(a, b) {
				t.Errorf("%s differs between two runs on the same checkout", filepath.Base(first[i]))
			}
		}
	})
}

// checkRegistration asserts the file links gcpt4 under build tag gcp_t4 in
// the package the directory already uses, with nothing else in it.
func checkRegistration(t *testing.T, path, pkg string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	expr, err := constraint.Parse(first)
	if err != nil {
		t.Fatalf("%s: first line %q is not a build constraint: %v", path, first, err)
	}
	tags := map[string]bool{"gcp_t4": true}
	if !expr.Eval(func(tag string) bool { return tags[tag] }) || expr.Eval(func(string) bool { return false }) || expr.String() != "gcp_t4" {
		t.Errorf("%s: constraint %q, want exactly gcp_t4", path, expr)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, data, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name.Name != pkg {
		t.Errorf("%s: package %s, want %s", path, f.Name.Name, pkg)
	}
	if len(f.Imports) != 1 || len(f.Decls) != 1 {
		t.Fatalf("%s: want exactly one import and nothing else, got %d imports, %d decls", path, len(f.Imports), len(f.Decls))
	}
	imp := f.Imports[0]
	p, _ := strconv.Unquote(imp.Path.Value)
	if p != cpModule+"/gcpt4" || imp.Name == nil || imp.Name.Name != "_" {
		t.Errorf("%s: import %v %q, want a blank import of %s/gcpt4", path, imp.Name, p, cpModule)
	}
}

// TestRefusesDifferentProviderAPI changes three things gcpt4 relies on and
// expects the script to name each and make no patches.
func TestRefusesDifferentProviderAPI(t *testing.T) {
	tree := syntheticTree(t, func(t *testing.T, dir string) {
		cp := filepath.Join(dir, "src", "cloud-providers")
		edit(t, filepath.Join(cp, "types.go"), `Teardown() error`, `Teardown(ctx context.Context) error`)
		edit(t, filepath.Join(cp, "types.go"), `GPUs         int64`, `GPUs         int32`)
		edit(t, filepath.Join(cp, "util", "instance.go"), `func GenerateInstanceName(`, `func GeneratePodVMName(`)
	})
	out := filepath.Join(t.TempDir(), "series")
	log, err := patch(t, tree, out)
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v\n%s", err, log)
	}
	for _, want := range []string{
		"refusing", "provider API differs from the one gcpt4 targets",
		"changed  provider.Provider.Teardown", "want func() error", "got  func(context.Context) error",
		"changed  provider.InstanceTypeSpec.GPUs", "want int64", "got  int32",
		"missing  util.GenerateInstanceName", "want func(string, string, int) string",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("refusal message lacks %q:\n%s", want, log)
		}
	}
	if got := patches(t, out); len(got) != 0 {
		t.Errorf("a refused checkout produced patches: %q", got)
	}
}

func TestRefusesOtherLayout(t *testing.T) {
	tree := syntheticTree(t, func(t *testing.T, dir string) {
		if err := os.RemoveAll(filepath.Join(dir, "src", "peerpod-ctrl", "controllers")); err != nil {
			t.Fatal(err)
		}
	})
	log, err := patch(t, tree, filepath.Join(t.TempDir(), "series"))
	if err == nil || !strings.Contains(log, "src/peerpod-ctrl/controllers is missing") {
		t.Fatalf("want a refusal naming src/peerpod-ctrl/controllers, got %v\n%s", err, log)
	}
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s no longer contains %q; update the test's API change", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
