package cachebuild

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
	"github.com/caa-gcp-t4/gcp-t4/internal/initdata"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

const (
	repoRoot   = "../../.."
	runbookDoc = repoRoot + "/docs/runbook-mistral-tp2.md"
)

// Why a command of the runbook's cache block is not run here: each is
// run by the runbook test that has what it needs.
const (
	skipOnEmulator = "runs against Google Cloud: gcp-t4/internal/install's TestAgainstAPIServer/RunbookMistralTP2 runs it on the GCE emulator and a real API server"
	skipUpload     = "uploads to Cloud Storage, which no test here models: the file it uploads is checked here, and the image import that reads it runs on the GCE emulator (gcp-t4/internal/install)"
	skipRegistry   = "sets up Artifact Registry, which a stand-in registry plays here, needing neither a repository made nor credentials"
	skipHub        = "downloads from the Hugging Face Hub: a stand-in download (two shards, the configuration, the tokenizer and the download's own .cache/) is put where it would write"
)

// TestRunbookCachePath runs docs/runbook-mistral-tp2.md's image cache
// block (<!-- cache-path -->) as written, in order, from the root of a copy
// of the repository's example, on the admin's machine as the runbook says
// it is: real skopeo, kustomize CLI and bash, gcp-t4 cache in this process.
// What this machine cannot supply is put where the admin's would have it,
// and nothing else: Docker Hub is a stand-in registry holding the Ray
// image's tag as a two-platform index, which skopeo reaches through a
// registries.conf (a wrapper on PATH adds --registries-conf) and gcp-t4
// through a transport that sends Docker Hub's hosts to it. After each
// command it checks what the next relies on; afterwards, that every pod of
// the example now names the digest the cache holds, that the layout serves
// it, and that the prose quotes what the commands print.
func TestRunbookCachePath(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skopeo, the kustomize CLI and mke2fs; skipped with -short")
	}
	// make's pinned build (the version matching gcp-t4's kustomize/api),
	// else the admin's own.
	kustomize := os.Getenv("KUSTOMIZE_BIN")
	if kustomize == "" {
		var err error
		if kustomize, err = exec.LookPath("kustomize"); err != nil {
			t.Fatal("KUSTOMIZE_BIN is not set and no kustomize is on PATH; run `make controlplane` (builds the kustomize CLI once, cached by version) or the tests through `make test`")
		}
	}
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Fatal("skopeo is missing: run test/cache/deps.sh as root (make test does), or apt-get install -y skopeo")
	}
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Fatal("mke2fs is missing: apt-get install -y e2fsprogs")
	}
	blocks, err := doccmd.File(runbookDoc)
	if err != nil {
		t.Fatal(err)
	}
	block, ok := doccmd.ByMarker(blocks, "cache-path")
	if !ok {
		t.Fatal("the runbook has no <!-- cache-path --> block")
	}
	doc, err := os.ReadFile(runbookDoc)
	if err != nil {
		t.Fatal(err)
	}

	// The admin's checkout of the example, and the image its pods name.
	root := t.TempDir()
	example := filepath.Join(root, "install/examples/mistral-tp2")
	if err := os.CopyFS(example, os.DirFS(filepath.Join(repoRoot, "install/examples/mistral-tp2"))); err != nil {
		t.Fatal(err)
	}
	committed := rayImage(t, example)

	// Docker Hub, standing in: the tag names an index of two platforms.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tr := redirect{to: u}
	img := func() v1.Image {
		i, err := random.Image(2048, 3)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	amd64Image := img()
	index := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: amd64Image, Descriptor: v1.Descriptor{Platform: &amd64}},
		mutate.IndexAddendum{Add: img(), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	tagged, err := name.ParseReference(committed)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tagged, index, remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
	indexDigest, _ := index.Digest()
	amd64Digest, _ := amd64Image.Digest()

	// What the admin's machine has, pointed at the stand-in.
	shims := t.TempDir()
	conf := filepath.Join(shims, "registries.conf")
	repo := strings.TrimPrefix(tagged.Context().Name(), "index.docker.io/")
	writeFile(t, conf, fmt.Sprintf("[[registry]]\nprefix = \"docker.io/%s\"\nlocation = \"%s/%s\"\ninsecure = true\n", repo, u.Host, repo), 0o644)
	writeFile(t, filepath.Join(shims, "skopeo"), fmt.Sprintf("#!/bin/sh\nexec %s --registries-conf %s \"$@\"\n", skopeo, conf), 0o755)
	writeFile(t, filepath.Join(shims, "kustomize"), fmt.Sprintf("#!/bin/sh\nexec %s \"$@\"\n", kustomize), 0o755)
	saved := remote.DefaultTransport
	remote.DefaultTransport = tr
	t.Cleanup(func() { remote.DefaultTransport = saved })
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials but the admin's, and there are none
	// The admin's home, new: the block writes the layout and its image
	// file there, outside the checkout.
	home := t.TempDir()
	// PROJECT, REGION and UPLOAD come from the runbook's earlier steps,
	// which this block follows in the same shell (the podVM image's upload
	// exports UPLOAD, a bucket's name); the test holds the runbook to
	// exporting them.
	vars := map[string]string{"HOME": home, "PROJECT": "example-project", "REGION": "us-central1", "UPLOAD": "example-project-podvm"}
	for _, want := range []string{"export PROJECT=", " REGION=", "export UPLOAD=$PROJECT-podvm"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Fatalf("docs/runbook-mistral-tp2.md no longer says %q, which the cache block relies on", want)
		}
	}
	env := func() []string {
		e := append(os.Environ(), "PATH="+shims+":"+os.Getenv("PATH"))
		for k, v := range vars {
			e = append(e, k+"="+v)
		}
		return e
	}
	bash := func(dir, script string) string {
		t.Helper()
		cmd := exec.Command("bash", "-euc", script)
		cmd.Dir, cmd.Env = dir, env()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, stderr.String())
		}
		return string(out)
	}

	// The modelcar binary, where make build puts it: beside gcp-t4 (here,
	// this test's binary), for cache model to find as the admin's does.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(filepath.Dir(exe), "modelcar")
	hb, err := os.ReadFile(holder(t))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, beside, string(hb), 0o755)
	t.Cleanup(func() { os.Remove(beside) })
	cwd, prev := root, root
	ran := map[string]string{} // what ran -> its output
	gcpT4 := func(line int, text string) string {
		t.Helper()
		args, err := doccmd.Fields(text, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		t.Chdir(cwd)
		var out, errb bytes.Buffer
		if code := Main(context.Background(), args[2:], &out, &errb, nil); code != 0 {
			t.Fatalf("line %d: %s: exit %d\n%s%s", line, text, code, out.String(), errb.String())
		}
		return out.String()
	}
	var layout, disk string // where cache build wrote them
	exportRE := regexp.MustCompile(`(?:^export | )([A-Z_][A-Z0-9_]*)=`)
	for _, c := range block.Commands {
		switch text := c.Text; {
		case regexp.MustCompile(`^export [A-Z_]+=\$\(gcp-t4 [^()]*\)$`).MatchString(text):
			// The shell sets it from what gcp-t4 prints: gcp-t4 runs here.
			name, inner, _ := strings.Cut(strings.TrimPrefix(text, "export "), "=$(")
			inner = strings.TrimSuffix(inner, ")")
			out := gcpT4(c.Line, inner)
			vars[name] = strings.TrimSpace(out)
			ran[inner[:strings.Index(inner+" -", " -")]] = out
		case strings.HasPrefix(text, "export "):
			// The shell sets them; read back what it set.
			names := exportRE.FindAllStringSubmatch(text, -1)
			script := text
			for _, n := range names {
				script += fmt.Sprintf("\nprintf '%%s\\0' \"$%s\"", n[1])
			}
			vals := strings.Split(strings.TrimSuffix(bash(cwd, script), "\x00"), "\x00")
			for i, n := range names {
				vars[n[1]] = vals[i]
			}
			ran["export"] += text + "\n"
		case text == "cd -":
			cwd, prev = prev, cwd
		case strings.HasPrefix(text, "cd "):
			dir := filepath.Join(cwd, strings.TrimPrefix(text, "cd "))
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				t.Fatalf("line %d: %s: no such directory in the checkout", c.Line, text)
			}
			cwd, prev = dir, cwd
		case strings.HasPrefix(text, "kustomize edit "):
			ran["kustomize"] += bash(cwd, text)
		case strings.HasPrefix(text, "sed -i "):
			ran["sed"] = bash(cwd, text)
		case strings.HasPrefix(text, "hf download "):
			args, err := doccmd.Fields(text, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
			if err != nil {
				t.Fatalf("line %d: %v", c.Line, err)
			}
			dir := ""
			for i, a := range args {
				if a == "--local-dir" && i+1 < len(args) {
					dir = args[i+1]
				}
			}
			if !strings.HasPrefix(dir, home+string(filepath.Separator)) {
				t.Fatalf("line %d: hf download writes to %q, not under the admin's home", c.Line, dir)
			}
			for name, body := range map[string]string{"config.json": "{}", "tokenizer.json": "{}", "model-00001-of-00002.safetensors": "shard one",
				"model-00002-of-00002.safetensors": "shard two", ".cache/huggingface/download/x.metadata": "etag"} {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, p, body, 0o644)
			}
			t.Logf("line %d: not run here: %s\n    %s", c.Line, text, skipHub)
		case strings.HasPrefix(text, "gcloud artifacts repositories create "), strings.HasPrefix(text, "gcloud auth configure-docker "):
			t.Logf("line %d: not run here: %s\n    %s", c.Line, text, skipRegistry)
		case strings.HasPrefix(text, "gcp-t4 cache "):
			args, err := doccmd.Fields(text, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
			if err != nil {
				t.Fatalf("line %d: %v", c.Line, err)
			}
			t.Chdir(cwd)
			if args[2] == "build" {
				for i, a := range args[:len(args)-1] {
					switch a {
					case "-o":
						layout = args[i+1]
					case "-disk":
						disk = args[i+1]
					}
				}
			}
			var out, errb bytes.Buffer
			if code := Main(context.Background(), args[2:], &out, &errb, nil); code != 0 {
				t.Fatalf("line %d: %s: exit %d\n%s%s", c.Line, text, code, out.String(), errb.String())
			}
			ran[strings.Join(args[:3], " ")+" "+args[len(args)-1]] = out.String()
		case strings.HasPrefix(text, "gcloud storage cp "):
			// What the upload needs: the image file build wrote.
			args, err := doccmd.Fields(text, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
			if err != nil {
				t.Fatalf("line %d: %v", c.Line, err)
			}
			f := args[3]
			if !filepath.IsAbs(f) {
				f = filepath.Join(cwd, f)
			}
			if st, err := os.Stat(f); err != nil || st.Size() == 0 || f != disk {
				t.Errorf("line %d: %s uploads %s, not the file the build wrote (%s): %v", c.Line, text, f, disk, err)
			}
			t.Logf("line %d: not run here: %s\n    %s", c.Line, text, skipUpload)
		case strings.HasPrefix(text, "gcloud compute images create "), strings.HasPrefix(text, "gcp-t4 install "), strings.HasPrefix(text, "gcp-t4 preflight "):
			t.Logf("line %d: not run here: %s\n    %s", c.Line, text, skipOnEmulator)
		default:
			t.Fatalf("line %d: this test has no rule for %q: run it here or name the test that runs it", c.Line, text)
		}
	}

	// The dm-verity value the install step gives the provider is the one
	// the build printed, read back from the file it wrote beside the image.
	built := ""
	for k, out := range ran {
		if strings.HasPrefix(k, "gcp-t4 cache build ") {
			built += out
		}
	}
	if printed := regexp.MustCompile(`GCP_CACHE_VERITY=(root=[0-9a-f]{64},offset=[0-9]+) `).FindStringSubmatch(built); printed == nil || vars["CACHE_VERITY"] != printed[1] {
		t.Errorf("CACHE_VERITY=%q after the block; cache build printed %v", vars["CACHE_VERITY"], printed)
	}
	// The digest skopeo resolved is the tag's: the index's.
	if vars["RAY_IMAGE"] != committed {
		t.Errorf("RAY_IMAGE=%s; the example's pods name %s", vars["RAY_IMAGE"], committed)
	}
	if vars["RAY_DIGEST"] != indexDigest.String() {
		t.Fatalf("RAY_DIGEST=%q; the tag names %s", vars["RAY_DIGEST"], indexDigest)
	}
	// The pins reached every pod of the example, through the one
	// component: the Ray image in every Ray container, the model image
	// (cache model's, pushed to the stand-in Artifact Registry under the
	// project's repository) in every model sidecar.
	pinned := repo + "@" + indexDigest.String()
	modelRepo := "us-central1-docker.pkg.dev/example-project/models/mistral-nemo-instruct-2407"
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(modelRepo) + `@sha256:[0-9a-f]{64}$`).MatchString(vars["MODEL_IMAGE"]) {
		t.Fatalf("MODEL_IMAGE=%q; want cache model's image by digest in %s", vars["MODEL_IMAGE"], modelRepo)
	}
	sidecars := 0
	for _, dir := range []string{"", "nccl-check", "single-podvm"} {
		for _, w := range renderExample(t, filepath.Join(example, dir)) {
			for _, g := range w.Groups {
				for _, c := range g.Spec.Containers {
					if c.Image != pinned {
						t.Errorf("%s %s %s: image %s after the pin, want %s", dir, w.Name, c.Name, c.Image, pinned)
					}
				}
				for _, c := range g.Spec.InitContainers {
					sidecars++
					if c.Image != vars["MODEL_IMAGE"] {
						t.Errorf("%s %s %s: image %s after the pin, want %s", dir, w.Name, c.Name, c.Image, vars["MODEL_IMAGE"])
					}
				}
			}
		}
	}
	if sidecars != 3 {
		t.Errorf("%d model sidecars; want the RayService's head and worker and the one-podVM head", sidecars)
	}
	// The layout and its image file, about 20 GB for the real image, are
	// outside the checkout (a `git add -A` there takes neither): the
	// checkout holds what was copied into it and nothing more.
	for _, p := range []string{layout, disk} {
		if p == "" || !strings.HasPrefix(p, home+string(filepath.Separator)) {
			t.Errorf("cache build wrote %q, not under the admin's home %s (-o %q, -disk %q)", p, home, layout, disk)
		}
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 1 || entries[0].Name() != "install" {
		t.Errorf("the block left files in the checkout's root: %v %v", entries, err)
	}
	// The layout holds the index and its linux/amd64 image, and the
	// mirror serves both by digest under the pods' repository.
	m, err := cachemirror.Open(layout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ms := httptest.NewServer(m)
	defer ms.Close()
	for _, d := range []v1.Hash{indexDigest, amd64Digest} {
		resp, err := http.Get(ms.URL + "/v2/" + repo + "/manifests/" + d.String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the mirror answers %d for %s@%s", resp.StatusCode, repo, d)
		}
	}
	// check's verdicts, as the prose quotes them; the one-podVM layout,
	// which the block does not check, is served too.
	flat := strings.Join(strings.Fields(string(doc)), " ")
	for dir, summary := range map[string]string{
		"install/examples/mistral-tp2":            "5 containers, 5 from the cache, 0 of a cached repository not served from it",
		"install/examples/mistral-tp2/nccl-check": "2 containers, 2 from the cache, 0 of a cached repository not served from it",
	} {
		out, ok := ran["gcp-t4 cache check "+dir]
		if !ok {
			t.Errorf("the block does not check %s", dir)
			continue
		}
		if !strings.HasSuffix(out, summary+"\n") || strings.Count(out, "the cache (127.0.0.1:5000/") != strings.Count(out, "\n")-2 {
			t.Errorf("check %s:\n%s\nwant every container from the cache and %q", dir, out, summary)
		}
	}
	if !strings.Contains(flat, "`5 containers, 5 from the cache, 0 of a cached repository not served from it`") {
		t.Error("the runbook does not quote check's summary for the example as it prints it")
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"check", "-layout", layout, "-k", filepath.Join(example, "single-podvm")}, &out, &errb, nil); code != 0 {
		t.Errorf("the one-podVM layout is not served from the cache:\n%s%s", out.String(), errb.String())
	}
	// The digest the podVM prints for the pods' initdata.
	digestOut, ok := ran["gcp-t4 cache initdata "+layout]
	if !ok {
		t.Fatal("the block does not print the initdata's digest")
	}
	ann := renderExample(t, example)[0].Groups[0].Annotations[initdata.Annotation]
	text, err := initdata.Decode(ann)
	if err != nil || strings.TrimSpace(digestOut) != initdataDigest(text) {
		t.Errorf("initdata -digest printed %q; the pods' initdata has %s (%v)", digestOut, initdataDigest(text), err)
	}
	// Both images are in the layout and the model's files in its
	// pre-unpacked store, where a podVM mounts them.
	imgs, err := cachemirror.Images(layout)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, i := range imgs {
		refs = append(refs, i.Ref)
	}
	if !slices.Contains(refs, "docker.io/"+repo+"@"+indexDigest.String()) || !slices.Contains(refs, vars["MODEL_IMAGE"]) {
		t.Errorf("the layout holds %v; want the Ray image and %s", refs, vars["MODEL_IMAGE"])
	}
	man, entries, err := imagestore.Entries(layout)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, l := range man.Layers {
		for _, e := range entries[l.Index] {
			stored = append(stored, e.Path)
		}
	}
	if !slices.Contains(stored, "models/model-00002-of-00002.safetensors") || slices.ContainsFunc(stored, func(p string) bool { return strings.Contains(p, ".cache") }) {
		t.Errorf("the store holds %v; want the model's shards and not the download's .cache", stored)
	}
	for _, want := range []string{"export", "kustomize", "sed", "gcp-t4 cache model", "gcp-t4 cache initdata", "gcp-t4 cache build " + vars["MODEL_IMAGE"]} {
		if _, ok := ran[want]; !ok {
			t.Errorf("no command of the block did %q (ran %v)", want, slices.Collect(maps.Keys(ran)))
		}
	}
}

// rayImage is the image the example's pods name as committed (the tag).
func rayImage(t *testing.T, example string) string {
	t.Helper()
	var images []string
	for _, w := range renderExample(t, example) {
		for _, g := range w.Groups {
			for _, c := range g.Spec.Containers {
				if !slices.Contains(images, c.Image) {
					images = append(images, c.Image)
				}
			}
		}
	}
	if len(images) != 1 {
		t.Fatalf("the example's pods name %v; want one image", images)
	}
	return images[0]
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}
