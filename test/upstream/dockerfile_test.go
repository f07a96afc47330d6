package upstream_test

import (
	"go/version"
	"golang.org/x/mod/modfile"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

type dockerfile struct {
	raw    string
	args   map[string]string // global ARG defaults
	stages map[string]instructions.Stage
	final  instructions.Stage
}

// parseDockerfile reads the repository's Dockerfile with BuildKit's own
// parser, as `docker build` would.
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	path := filepath.Join(repoRoot(t), "Dockerfile")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("BuildKit cannot parse the Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile warning at line %d: %s", w.Location.Start.Line, w.Short)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("BuildKit cannot read the Dockerfile's instructions: %v", err)
	}
	raw, _ := os.ReadFile(path)
	d := dockerfile{raw: string(raw), args: map[string]string{}, stages: map[string]instructions.Stage{}}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				d.args[kv.Key] = *kv.Value
			}
		}
	}
	for _, s := range stages {
		d.stages[s.Name] = s
	}
	if len(stages) == 0 {
		t.Fatal("the Dockerfile has no stages")
	}
	d.final = stages[len(stages)-1]
	return d
}

// makeVar reads `NAME ?= value` from the repository's Makefile.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*\?=\s*(\S+)\s*$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("the Makefile has no %s ?= line", name)
	}
	return m[1]
}

func goDirective(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), path))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("%s has no go line", path)
	}
	return "go" + m[1]
}

func TestDockerfilePinsMatchTheMakefile(t *testing.T) {
	d := parseDockerfile(t)
	pins := []struct{ arg, makeVar, trim string }{
		{"UPSTREAM_RELEASE", "UPSTREAM_RELEASE", ""},
		{"UPSTREAM_GO_VERSION", "UPSTREAM_GO", "go"},
		{"GO_VERSION", "IMAGE_GO", "go"},
	}
	for _, p := range pins {
		got, ok := d.args[p.arg]
		if !ok {
			t.Errorf("the Dockerfile has no global ARG %s with a default", p.arg)
			continue
		}
		want := strings.TrimPrefix(makeVar(t, p.makeVar), p.trim)
		if got != want {
			t.Errorf("Dockerfile ARG %s=%s, Makefile %s says %s: change both", p.arg, got, p.makeVar, want)
		}
		// Defined once: every other use goes through the ARG.
		if n := strings.Count(d.raw, got); n != 1 {
			t.Errorf("%s (%s) appears %d times in the Dockerfile; use ${%s}", got, p.arg, n, p.arg)
		}
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(d.args["UPSTREAM_RELEASE"]) {
		t.Errorf("UPSTREAM_RELEASE %q is not a release tag", d.args["UPSTREAM_RELEASE"])
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(d.args["UPSTREAM_COMMIT"]) {
		t.Errorf("UPSTREAM_COMMIT %q is not a full commit id", d.args["UPSTREAM_COMMIT"])
	}
	// The Go versions must be able to build what they build.
	if v, need := "go"+d.args["GO_VERSION"], goDirective(t, "go.work"); version.Compare(v, need) < 0 {
		t.Errorf("GO_VERSION %s is older than go.work's %s", v, need)
	}
	if v, need := "go"+d.args["UPSTREAM_GO_VERSION"], goDirective(t, "src/cloud-providers/go.mod"); version.Compare(v, need) < 0 {
		t.Errorf("UPSTREAM_GO_VERSION %s is older than src/cloud-providers/go.mod's %s", v, need)
	}
	if v, need := "go"+d.args["GO_VERSION"], goDirective(t, "test/upstream/go.mod"); version.Compare(v, need) < 0 {
		t.Errorf("GO_VERSION %s is older than test/upstream/go.mod's %s (the image builds caa-api-check)", v, need)
	}
	if !regexp.MustCompile(`^[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}$`).MatchString(d.args["BASE_IMAGE"]) {
		t.Errorf("BASE_IMAGE %q is not pinned by digest", d.args["BASE_IMAGE"])
	}
}

func TestDockerfileStages(t *testing.T) {
	d := parseDockerfile(t)
	bases := map[string]string{
		"gcp-t4":           "golang:${GO_VERSION}-trixie",
		"caa":              "golang:${UPSTREAM_GO_VERSION}-trixie",
		"iptables-wrapper": "golang:${UPSTREAM_GO_VERSION}-trixie",
	}
	for name, base := range bases {
		s, ok := d.stages[name]
		if !ok {
			t.Errorf("no stage %q", name)
			continue
		}
		if s.BaseName != base {
			t.Errorf("stage %s is FROM %s, want %s", name, s.BaseName, base)
		}
	}
	if d.final.BaseName != "${BASE_IMAGE}" {
		t.Errorf("final stage is FROM %s, want ${BASE_IMAGE}", d.final.BaseName)
	}

	runs := func(stage string) string {
		var all []string
		for _, c := range d.stages[stage].Commands {
			if r, ok := c.(*instructions.RunCommand); ok {
				all = append(all, strings.Join(r.CmdLine, " "))
			}
		}
		return strings.Join(all, "\n")
	}
	caa := runs("caa")
	for _, want := range []string{
		`git clone --quiet --depth 1 --branch "${UPSTREAM_RELEASE}" "${UPSTREAM_REPO}"`,
		`"${UPSTREAM_COMMIT}"`,
		"CAA_API_CHECK=/usr/local/bin/caa-api-check ours/scripts/upstream-patch/patch.sh",
		"CGO_ENABLED=0 go build -trimpath -tags gcp_t4 ",
		"./cmd/cloud-api-adaptor",
		"help | grep -qw gcp-t4",
		// upstream's gcp provider is not linked: no setting can start it.
		"! /out/cloud-api-adaptor help | grep -qxE '[[:space:]]*gcp'",
	} {
		if !strings.Contains(caa, want) {
			t.Errorf("stage caa does not run %q", want)
		}
	}
	if m := regexp.MustCompile(`-tags[ =]\S*`).FindAllString(caa, -1); len(m) != 1 || m[0] != "-tags gcp_t4" {
		t.Errorf("stage caa builds with %q; want only -tags gcp_t4 (the image runs gcp-t4 alone)", m)
	}
	ours := runs("gcp-t4")
	for _, want := range []string{"CGO_ENABLED=0 go build", "-o /out/ ./cmd/gcp-t4 ./cmd/gcp-t4-node", "./cmd/caa-api-check"} {
		if !strings.Contains(ours, want) {
			t.Errorf("stage gcp-t4 does not run %q", want)
		}
	}
}

func TestDockerfileFinalStage(t *testing.T) {
	d := parseDockerfile(t)
	var user string
	labels := map[string]string{}
	copied := map[string]string{} // file -> destination
	for _, c := range d.final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				labels[kv.Key] = kv.Value
			}
		case *instructions.CopyCommand:
			for _, src := range c.SourcePaths {
				copied[c.From+":"+src] = c.DestPath
			}
		case *instructions.RunCommand:
			if user != "" {
				t.Errorf("RUN after USER %s in the final stage: %v", user, c.CmdLine)
			}
		}
	}
	// Root, stated: upstream's peerpods chart (templates/daemonset.yaml at
	// v0.22.0, 38d0fcf7) adds NET_ADMIN and SYS_ADMIN but sets no
	// runAsUser, and CAA needs root for them; TestInstallSetsEveryUser
	// keeps our own manifests off this default.
	if uid, _, _ := strings.Cut(user, ":"); uid != "0" {
		t.Errorf("final stage USER %q; want an explicit USER 0:0 (the Helm chart relies on the image's user)", user)
	}
	var cmd []string
	for _, c := range d.final.Commands {
		switch c := c.(type) {
		case *instructions.CmdCommand:
			cmd = c.CmdLine
		case *instructions.EntrypointCommand:
			t.Errorf("ENTRYPOINT %v: the operator CLI must stay reachable as `docker run IMAGE gcp-t4 ...`; use CMD", c.CmdLine)
		}
	}
	if len(cmd) != 1 || cmd[0] != "/usr/local/bin/entrypoint.sh" {
		t.Errorf("CMD %v, want [/usr/local/bin/entrypoint.sh] as upstream's image", cmd)
	}
	for key, want := range map[string]string{
		"org.opencontainers.image.title":         "caa-gcp-t4",
		"org.opencontainers.image.licenses":      "Apache-2.0",
		"org.opencontainers.image.version":       "${VERSION}",
		"org.opencontainers.image.revision":      "${REVISION}",
		"org.opencontainers.image.source":        "${SOURCE}",
		"org.opencontainers.image.base.name":     "${BASE_IMAGE}",
		"io.github.caa-gcp-t4.upstream.release":  "${UPSTREAM_RELEASE}",
		"io.github.caa-gcp-t4.upstream.revision": "${UPSTREAM_COMMIT}",
		"io.github.caa-gcp-t4.upstream.source":   "${UPSTREAM_REPO}",
		"io.github.caa-gcp-t4.upstream.go":       "${UPSTREAM_GO_VERSION}",
		"io.github.caa-gcp-t4.go":                "${GO_VERSION}",
		"org.opencontainers.image.description":   "${UPSTREAM_RELEASE}",
	} {
		if got, ok := labels[key]; !ok || !strings.Contains(strings.Trim(got, `"`), want) {
			t.Errorf("label %s = %q, want it to carry %s", key, got, want)
		}
	}
	for src := range copied {
		if strings.HasSuffix(src, "entrypoint.sh") && src != ":scripts/image/entrypoint.sh" {
			t.Errorf("final stage copies %s: the image's only entrypoint is ours, which starts gcp-t4 alone", src)
		}
	}
	for src, dest := range map[string]string{
		"caa:/out/cloud-api-adaptor":   "/usr/local/bin/",
		":scripts/image/entrypoint.sh": "/usr/local/bin/entrypoint.sh",
		"gcp-t4:/out/gcp-t4":           "/usr/local/bin/",
		"gcp-t4:/out/gcp-t4-node":      "/usr/local/bin/",
	} {
		if got, ok := copied[src]; !ok || got != dest {
			t.Errorf("final stage copies %s to %q, want %s", src, got, dest)
		}
	}
}

// TestDockerignoreKeepsWhatTheBuildCopies checks every file under each COPY
// source survives .dockerignore (with BuildKit's matcher), and that the
// rest of the repository, bin/ and .git included, stays out of the context.
func TestDockerignoreKeepsWhatTheBuildCopies(t *testing.T) {
	root := repoRoot(t)
	excluded, sources := buildContext(t, root)
	if len(sources) == 0 {
		t.Fatal("no COPY from the build context")
	}
	for _, pattern := range sources {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		if len(matches) == 0 && strings.ContainsAny(pattern, "*?[") {
			continue // an optional file, absent here
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(root, m)
			checkCopied(t, root, rel, excluded)
		}
		if len(matches) == 0 {
			t.Errorf("COPY source %s does not exist", pattern)
		}
	}
	for _, p := range []string{"bin/gcp-t4", ".git/HEAD", "README.md", "test/upstream/testdata/upstream/src/cloud-providers/go.mod"} {
		if !excluded(p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
	if slices.Contains(sources, ".") {
		t.Error("COPY . defeats the narrow build context")
	}
}

// checkCopied asserts every file under src (but testdata, which Go never
// builds) is in the build context.
func checkCopied(t *testing.T, root, src string, excluded func(string) bool) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(root, src), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if e.IsDir() && e.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !e.IsDir() {
			n++
			if excluded(filepath.ToSlash(rel)) {
				t.Errorf(".dockerignore drops %s, which COPY %s needs", rel, src)
			}
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Errorf("COPY source %s: %v (%d files)", src, err, n)
	}
}

// TestImageHasTheCommandsInstallRuns ties the image to the manifests that
// run it: every /usr/local/bin program a manifest under install/ starts must
// be one the final stage puts there.
func TestImageHasTheCommandsInstallRuns(t *testing.T) {
	d := parseDockerfile(t)
	inImage := map[string]bool{}
	for _, c := range d.final.Commands {
		cp, ok := c.(*instructions.CopyCommand)
		if !ok {
			continue
		}
		for _, src := range cp.SourcePaths {
			switch {
			case cp.DestPath == "/usr/local/bin/":
				inImage[filepath.Base(src)] = true
			case filepath.Dir(cp.DestPath) == "/usr/local/bin":
				inImage[filepath.Base(cp.DestPath)] = true
			}
		}
	}
	re := regexp.MustCompile(`/usr/local/bin/([A-Za-z0-9._-]+)`)
	found := 0
	err := filepath.WalkDir(filepath.Join(repoRoot(t), "install"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || (!strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml")) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(data), -1) {
			found++
			if !inImage[m[1]] {
				t.Errorf("%s runs /usr/local/bin/%s, which the image does not have", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Error("no manifest under install/ names a /usr/local/bin program; this check has nothing to hold")
	}
}

// TestLocalReplacesAreInTheBuildContext: Go reads the go.mod of every
// module a local replace names on each build, tests-only ones included, so
// each must be copied into the image build or `go build ./gcp-t4` fails.
func TestLocalReplacesAreInTheBuildContext(t *testing.T) {
	root := repoRoot(t)
	copied := copiedFromContext(t, root)
	checked := 0
	for _, modDir := range []string{"gcp-t4", "src/cloud-providers"} {
		data, err := os.ReadFile(filepath.Join(root, modDir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := modfile.Parse(modDir+"/go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range mf.Replace {
			if !modfile.IsDirectoryPath(r.New.Path) {
				continue
			}
			target := filepath.ToSlash(filepath.Join(modDir, r.New.Path, "go.mod"))
			checked++
			if !copied(target) {
				t.Errorf("%s/go.mod replaces %s with %s, but the image build does not copy %s", modDir, r.Old.Path, r.New.Path, target)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no local replace found; the test checks nothing")
	}
}

// copiedFromContext returns whether the image build copies the file rel
// (slash path from the repository root) from the build context.
func copiedFromContext(t *testing.T, root string) func(rel string) bool {
	t.Helper()
	excluded, sources := buildContext(t, root)
	return func(rel string) bool {
		if excluded(rel) {
			return false
		}
		for _, src := range sources {
			if src == rel || strings.HasPrefix(rel, strings.TrimSuffix(src, "/")+"/") {
				return true
			}
		}
		return false
	}
}

// TestGoWorkModulesAreCopiedWhole: the image builds gcp-t4 in the
// workspace (the Dockerfile copies go.work), which needs every module
// go.work uses, and the binary embeds files of one of them (install/, the
// kustomize tree): each file of each, testdata aside, must be copied.
func TestGoWorkModulesAreCopiedWhole(t *testing.T) {
	root := repoRoot(t)
	copied := copiedFromContext(t, root)
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(wf.Use) < 3 {
		t.Fatalf("go.work uses %d modules; want gcp-t4, install and src/cloud-providers at least", len(wf.Use))
	}
	for _, u := range wf.Use {
		dir := filepath.Clean(u.Path)
		n := 0
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && e.Name() == "testdata" {
				return filepath.SkipDir
			}
			if e.IsDir() {
				return nil
			}
			n++
			rel, _ := filepath.Rel(root, p)
			if !copied(filepath.ToSlash(rel)) {
				t.Errorf("go.work uses %s, but the image build does not copy %s", dir, rel)
			}
			return nil
		})
		if err != nil || n == 0 {
			t.Errorf("go.work module %s: %v (%d files)", dir, err, n)
		}
	}
}

// buildContext returns what the image build sees: a matcher for the paths
// .dockerignore leaves out (BuildKit's own), and the COPY sources taken
// from the build context.
func buildContext(t *testing.T, root string) (excluded func(string) bool, sources []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded = func(p string) bool {
		ex, err := pm.MatchesOrParentMatches(p)
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	for _, s := range parseDockerfile(t).stages {
		for _, c := range s.Commands {
			if cp, ok := c.(*instructions.CopyCommand); ok && cp.From == "" {
				sources = append(sources, cp.SourcePaths...)
			}
		}
	}
	return excluded, sources
}
