package cachebuild

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	toml "github.com/pelletier/go-toml/v2"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/initdata"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
)

// cdhConfig is the part of confidential-data-hub's configuration file the
// generator may write, with CDH's names (guest-components dcd55ea1:
// confidential-data-hub/hub/src/config/mod.rs CdhConfig and KbsConfig,
// image-rs/src/config.rs ImageConfig, image-rs/src/registry/mod.rs Config,
// Registry, Mirror). Decoded with unknown fields refused, so the generator
// writes nothing CDH does not read. Pointers mark what CDH requires.
type cdhConfig struct {
	Socket string `toml:"socket"`
	KBC    *struct {
		Name    *string `toml:"name"` // required: no serde default
		URL     string  `toml:"url"`
		KBSCert *string `toml:"kbs_cert"`
	} `toml:"kbc"`
	Image *struct {
		RegistryConfig *struct {
			UnqualifiedSearchRegistries []string       `toml:"unqualified-search-registries"`
			Registry                    []registryRule `toml:"registry"`
		} `toml:"registry_config"`
	} `toml:"image"`
}

// strict decodes TOML with unknown keys refused.
func strict(t *testing.T, text string, into any) {
	t.Helper()
	d := toml.NewDecoder(strings.NewReader(text))
	d.DisallowUnknownFields()
	if err := d.Decode(into); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
}

// The initdata reads as CAA's process-user-data reads it (go-toml v2, CAA
// v0.22.0 pkg/initdata: algorithm, version, data), carries an empty
// aa.toml and a cdh.toml, and that cdh.toml has CDH's required [kbc] name
// and one registry rule per repository: the prefix image-rs matches
// (docker.io and library/ filled in), the same location, and a mirror at
// the path the podVM's mirror serves, over HTTP.
func TestInitdataIsWhatEachReaderReads(t *testing.T) {
	d := "@sha256:" + strings.Repeat("a", 64)
	repos, err := repositories([]string{
		"rayproject/ray-llm" + d,
		"index.docker.io/rayproject/ray-llm:2.52.0-py311-cu128" + d,
		"busybox" + d,
		"docker.io/library/busybox:1.36",
		"quay.io/prometheus/busybox:latest",
		"localhost:5000/team/app",
	})
	if err != nil {
		t.Fatal(err)
	}
	text, err := initdataTOML(repos, "127.0.0.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Algorithm string            `toml:"algorithm"`
		Version   string            `toml:"version"`
		Data      map[string]string `toml:"data"`
	}
	strict(t, text, &body)
	if body.Algorithm != "sha256" || body.Version != "0.1.0" {
		t.Errorf("algorithm %q, version %q", body.Algorithm, body.Version)
	}
	if keys := slices.Sorted(func(y func(string) bool) {
		for k := range body.Data {
			if !y(k) {
				return
			}
		}
	}); !slices.Equal(keys, []string{"aa.toml", "cdh.toml"}) {
		t.Errorf("data holds %v; want aa.toml (empty, as without initdata) and cdh.toml, nothing else", keys)
	}
	if body.Data["aa.toml"] != "" {
		t.Errorf("aa.toml %q, want empty", body.Data["aa.toml"])
	}
	var cdh cdhConfig
	strict(t, body.Data["cdh.toml"], &cdh)
	if cdh.KBC == nil || cdh.KBC.Name == nil || *cdh.KBC.Name != "offline_fs_kbc" || cdh.KBC.URL != "" {
		t.Errorf("[kbc] %+v: CDH refuses a file without kbc.name; offline_fs_kbc with no URL is its default without a file", cdh.KBC)
	}
	if cdh.Image == nil || cdh.Image.RegistryConfig == nil {
		t.Fatal("no [image.registry_config]")
	}
	type want struct {
		prefix  string
		mirrors []string
	}
	var got []want
	for _, r := range cdh.Image.RegistryConfig.Registry {
		if r.Location != r.Prefix || r.Insecure || r.Blocked {
			t.Errorf("rule %+v: want location = prefix, TLS to the registry, not blocked", r)
		}
		w := want{prefix: r.Prefix}
		for _, m := range r.Mirror {
			if !m.Insecure {
				t.Errorf("mirror %s: the podVM's mirror speaks plain HTTP", m.Location)
			}
			w.mirrors = append(w.mirrors, m.Location)
		}
		got = append(got, w)
	}
	// The mirror serves an image under the path it was named by to cache
	// build, host dropped: busybox and library/busybox are two paths.
	if !reflect.DeepEqual(got, []want{
		{"docker.io/library/busybox", []string{"127.0.0.1:5000/busybox", "127.0.0.1:5000/library/busybox"}},
		{"docker.io/rayproject/ray-llm", []string{"127.0.0.1:5000/rayproject/ray-llm"}},
		{"localhost:5000/team/app", []string{"127.0.0.1:5000/team/app"}},
		{"quay.io/prometheus/busybox", []string{"127.0.0.1:5000/prometheus/busybox"}},
	}) {
		t.Errorf("rules %+v", got)
	}
	if _, err := initdataTOML(nil, "127.0.0.1:5000"); err == nil {
		t.Error("no repositories accepted")
	}
	if _, err := initdataTOML(repos, `127.0.0.1:5000"\n[x]`); err == nil {
		t.Error("a mirror address that would inject TOML accepted")
	}
}

// The annotation is base64 of gzip of the TOML, as kata's shim decodes it
// (cf82bb35 src/runtime/pkg/oci/utils.go: base64.StdEncoding, then gzip);
// the same TOML always gives the same value, and the digest is sha256 of
// the TOML, what process-user-data computes for algorithm sha256.
func TestInitdataAnnotationRoundTrips(t *testing.T) {
	var toml, ann, dig bytes.Buffer
	for _, c := range []struct {
		args []string
		out  *bytes.Buffer
	}{{nil, &toml}, {[]string{"-annotation"}, &ann}, {[]string{"-digest"}, &dig}} {
		var e bytes.Buffer
		if code := Main(context.Background(), append(append([]string{"initdata"}, c.args...), "rayproject/ray-llm"), c.out, &e, nil); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, e.String())
		}
	}
	v := strings.TrimSuffix(ann.String(), "\n")
	zr, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(v)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil || string(b) != toml.String() {
		t.Fatalf("the annotation decodes to %q (%v), want the TOML %q", b, err, toml.String())
	}
	if again, _ := initdata.Encode(toml.String()); again != v {
		t.Error("the same TOML encoded twice differs")
	}
	sum := sha256.Sum256(b)
	if got := strings.TrimSpace(dig.String()); got != hex.EncodeToString(sum[:]) {
		t.Errorf("-digest %s, want sha256 of the TOML %x", got, sum)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"initdata"}, 2, "no images"},
		{[]string{"initdata", "-annotation", "-digest", "rayproject/ray-llm"}, 2, "give one"},
		{[]string{"initdata", "Not/A/Reference"}, 2, "Not/A/Reference"},
		{[]string{"initdata", "-layout", t.TempDir()}, 1, "not an OCI image layout"},
		{[]string{"initdata", "-h"}, 0, "usage: gcp-t4 cache initdata"},
		{[]string{"check", "-layout", t.TempDir()}, 2, "-k KUSTOMIZATION or -f MANIFEST"},
		{[]string{"check", "-h"}, 0, "usage: gcp-t4 cache check"},
	} {
		var o, e bytes.Buffer
		// Help goes to stdout, errors to stderr.
		got := Main(context.Background(), c.args, &o, &e, nil)
		text := e.String()
		if c.code == 0 {
			text = o.String()
		}
		if got != c.code || !strings.Contains(text, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, got, text, c.code, c.want)
		}
	}
}

// pullOrder models image-rs's rule choice (image-rs/src/registry/mod.rs at
// dcd55ea1): the longest prefix that occurs in the reference followed by
// its end or ':', '/', '@' wins; mirrors first, then the location (or the
// reference itself); a blocked rule blocks; a "*." prefix matches a host's
// last labels only; references read as oci-spec prints them (docker.io,
// library/, :latest when neither tag nor digest).
func TestPullOrderFollowsImageRS(t *testing.T) {
	d := "@sha256:" + strings.Repeat("b", 64)
	rules := []registryRule{
		{Prefix: "registry.example/team", Location: "internal.example/team", Mirror: []struct {
			Location string `toml:"location"`
			Insecure bool   `toml:"insecure"`
		}{{"m0.local/team", false}, {"m1.local:5000/t", true}}},
		{Prefix: "registry.example/team/secret", Blocked: true},
		{Prefix: "*.corp.example", Location: "pull.corp.example"},
		{Location: "docker.io/library/busybox", Mirror: []struct {
			Location string `toml:"location"`
			Insecure bool   `toml:"insecure"`
		}{{"127.0.0.1:5000/busybox", true}}},
	}
	for _, c := range []struct {
		ref     string
		want    []pull
		blocked bool
	}{
		{"registry.example/team/app:v1", []pull{{"m0.local/team/app:v1", false, true}, {"m1.local:5000/t/app:v1", true, true}, {"internal.example/team/app:v1", false, false}}, false},
		// "team" is not "teamwork": the prefix must end at a boundary.
		{"registry.example/teamwork/app:v1", []pull{{"registry.example/teamwork/app:v1", false, false}}, false},
		{"registry.example/team/secret/x" + d, nil, true},
		{"eu.corp.example/a/b" + d, []pull{{"pull.corp.example/a/b" + d, false, false}}, false},
		// The wildcard matches hosts only, not a path that contains it.
		{"other.example/eu.corp.example/b:1", []pull{{"other.example/eu.corp.example/b:1", false, false}}, false},
		// A prefix left empty is its location; Docker Hub's one-word name.
		{"busybox", []pull{{"127.0.0.1:5000/busybox:latest", true, true}, {"docker.io/library/busybox:latest", false, false}}, false},
		{"busybox" + d, []pull{{"127.0.0.1:5000/busybox" + d, true, true}, {"docker.io/library/busybox" + d, false, false}}, false},
	} {
		got, blocked, err := pullOrder(c.ref, rules)
		if err != nil || blocked != c.blocked || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v blocked %v (%v); want %+v blocked %v", c.ref, got, blocked, err, c.want, c.blocked)
		}
	}
}

// redirect sends requests for Docker Hub's registry to a stand-in, so a
// reference written as the example writes it (rayproject/ray-llm) resolves
// without the network.
type redirect struct{ to *url.URL }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	// Docker Hub's hosts, and Artifact Registry's (REGION-docker.pkg.dev).
	if req.URL.Host == "index.docker.io" || req.URL.Host == "registry-1.docker.io" || strings.HasSuffix(req.URL.Host, "-docker.pkg.dev") {
		req = req.Clone(req.Context())
		req.URL.Scheme, req.URL.Host, req.Host = r.to.Scheme, r.to.Host, r.to.Host
	}
	return http.DefaultTransport.RoundTrip(req)
}

// hub is a stand-in for Docker Hub holding the example's image under its
// tag (a 3-layer image), reached through the transport it returns.
func hub(t *testing.T) (tr http.RoundTripper, digest v1.Hash, img v1.Image, srv *httptest.Server) {
	t.Helper()
	srv = httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	tr = redirect{to: u}
	img, err := random.Image(4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference("rayproject/ray-llm:2.52.0-py311-cu128")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
	digest, _ = img.Digest()
	return tr, digest, img, srv
}

// The seam, end to end without Docker Hub: a cache built from the example's
// image named as the example names it, the initdata generated from that
// cache, and image-rs's rules (pullOrder) send a pull of the pinned image
// to the mirror first, which serves exactly that image. A real
// containers-registries.conf client (skopeo) given the same rules pulls it
// through the mirror with the registry gone.
func TestCachedImageIsPulledFromTheMirror(t *testing.T) {
	skopeoBin(t)
	tr, digest, img, srv := hub(t)
	dir := filepath.Join(t.TempDir(), "ray-llm-cache")
	// cache build wants the registry written out (name.StrictValidation).
	pinned := "rayproject/ray-llm@" + digest.String()
	if _, err := Build(context.Background(), dir, []string{"docker.io/" + pinned}, Options{Platform: amd64, Remote: []remote.Option{remote.WithTransport(tr)}}); err != nil {
		t.Fatal(err)
	}
	srv.Close() // from here on only the cache can serve
	m, err := cachemirror.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{h: m, n: map[string]int{}}
	ms := httptest.NewServer(c)
	defer ms.Close()
	mirror := strings.TrimPrefix(ms.URL, "http://")

	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"initdata", "-annotation", "-layout", dir, "-mirror", mirror}, &out, &errb, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	id, rules, err := parseInitdata(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	pulls, blocked, err := pullOrder(pinned, rules)
	if err != nil || blocked {
		t.Fatalf("pull order: %v, blocked %v", err, blocked)
	}
	want := []pull{{mirror + "/rayproject/ray-llm@" + digest.String(), true, true}, {"docker.io/rayproject/ray-llm@" + digest.String(), false, false}}
	if !reflect.DeepEqual(pulls, want) {
		t.Fatalf("image-rs tries %+v; want the mirror over HTTP, then Docker Hub: %+v", pulls, want)
	}
	ref, err := name.NewDigest(pulls[0].Ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("pulling %s from the mirror: %v", ref, err)
	}
	if gd, _ := got.Digest(); gd != digest {
		t.Fatalf("the mirror served %s, want %s", gd, digest)
	}
	for _, l := range mustLayers(t, img) {
		layer, err := got.LayerByDigest(l)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || h != l {
			t.Errorf("layer %s read back as %s (%v)", l, h, err)
		}
	}

	// The same rules as containers-registries.conf, to skopeo: image-rs
	// reads [image.registry_config] in that file's format.
	bin := skopeoBin(t)
	var cdh map[string]any
	if err := toml.Unmarshal([]byte(id.Data["cdh.toml"]), &cdh); err != nil {
		t.Fatal(err)
	}
	regs, err := toml.Marshal(cdh["image"].(map[string]any)["registry_config"])
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	conf := filepath.Join(tmp, "registries.conf")
	if err := os.WriteFile(conf, regs, 0o644); err != nil {
		t.Fatal(err)
	}
	before := c.n["blobs"]
	cmd := exec.Command(bin, "--registries-conf", conf, "--insecure-policy", "--tmpdir", tmp, "copy", "--override-os", "linux", "--override-arch", "amd64",
		"docker://"+pinned, "dir:"+filepath.Join(tmp, "pulled"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo with the generated rules, Docker Hub gone:\n%s\n%v\n%s", regs, err, b)
	}
	if c.n["blobs"]-before < 4 {
		t.Errorf("the mirror served %d blobs to skopeo; want the config and 3 layers", c.n["blobs"]-before)
	}
}

// The committed example carries, on every pod template, initdata equal to
// what `gcp-t4 cache initdata` writes for that pod's images: the two cannot
// drift. Compared decoded, as kata and CAA read it (and as the digest is
// taken): the same TOML compressed by another Go could differ in bytes.
func TestExampleCarriesTheGeneratedInitdata(t *testing.T) {
	pods := 0
	for _, dir := range []string{"mistral-tp2", "mistral-tp2/nccl-check", "mistral-tp2/single-podvm"} {
		for _, w := range renderExample(t, filepath.Join("../../../install/examples", dir)) {
			for _, g := range w.Groups {
				pods++
				var images []string
				for _, c := range append(slices.Clone(g.Spec.InitContainers), g.Spec.Containers...) {
					images = append(images, c.Image)
				}
				repos, err := repositories(images)
				if err != nil {
					t.Fatal(err)
				}
				want, err := initdataTOML(repos, cachemirror.Listen)
				if err != nil {
					t.Fatal(err)
				}
				v, ok := g.Annotations[initdata.Annotation]
				if !ok {
					t.Errorf("%s %s %s: no %s", dir, w.Name, g.Name, initdata.Annotation)
					continue
				}
				if got, err := initdata.Decode(v); err != nil || got != want {
					wantAnn, _ := initdata.Encode(want)
					t.Errorf("%s %s %s: the annotation decodes to\n%s(%v)\nwant what gcp-t4 cache initdata -annotation %s writes:\n%s", dir, w.Name, g.Name, got, err, strings.Join(images, " "), wantAnn)
				}
			}
		}
	}
	if pods != 5 {
		t.Errorf("found %d pod templates; want the RayService's head and worker, the two check pods and the one-podVM head", pods)
	}
}

// renderExample renders a kustomization as kubectl apply -k does and reads
// its pod templates as plan does.
func renderExample(t *testing.T, dir string) []plan.Workload {
	t.Helper()
	return renderFS(t, filesys.MakeFsOnDisk(), dir)
}

func renderFS(t *testing.T, fsys filesys.FileSystem, dir string) []plan.Workload {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := plan.ParseManifests(bytes.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// check says, per container, where the image comes from; every way a
// cached repository can miss the cache is named, and exits 1.
func TestCheckSaysWhereEachImageComesFrom(t *testing.T) {
	tr, digest, _, _ := hub(t)
	dir := filepath.Join(t.TempDir(), "ray-llm-cache")
	if _, err := Build(context.Background(), dir, []string{"docker.io/rayproject/ray-llm@" + digest.String()}, Options{Platform: amd64, Remote: []remote.Option{remote.WithTransport(tr)}}); err != nil {
		t.Fatal(err)
	}
	ann := func(refs ...string) string {
		repos, err := repositories(refs)
		if err != nil {
			t.Fatal(err)
		}
		text, err := initdataTOML(repos, cachemirror.Listen)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := initdata.Encode(text)
		return v
	}
	other := "sha256:" + strings.Repeat("c", 64)
	pod := func(name, annotation string, images ...string) string {
		s := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n", name)
		if annotation != "" {
			s += fmt.Sprintf("  annotations:\n    %s: %s\n", initdata.Annotation, annotation)
		}
		s += "spec:\n  containers:\n"
		for i, im := range images {
			s += fmt.Sprintf("    - name: c%d\n      image: %s\n", i, im)
		}
		return s + "---\n"
	}
	pinned := "rayproject/ray-llm@" + digest.String()
	manifest := pod("good", ann("rayproject/ray-llm"), pinned, "quay.io/prometheus/busybox:latest") +
		pod("by-tag", ann("rayproject/ray-llm"), "rayproject/ray-llm:2.52.0-py311-cu128") +
		pod("other-digest", ann("rayproject/ray-llm"), "rayproject/ray-llm@"+other) +
		pod("no-initdata", "", pinned) +
		pod("other-mirror", ann("quay.io/prometheus/busybox"), pinned)
	f := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"check", "-layout", dir, "-f", f}, &out, &errb, nil)
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		pinned + "  the cache (127.0.0.1:5000/rayproject/ray-llm)",
		"its registry: the cache does not hold quay.io/prometheus/busybox",
		"named by tag",
		"the cache holds docker.io/rayproject/ray-llm at " + digest.String() + ", not " + other,
		"the pod has no initdata",
		"the pod's initdata sends image-rs to docker.io/rayproject/ray-llm@" + digest.String() + " first",
		"6 containers, 1 from the cache, 4 of a cached repository not served from it",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	good := filepath.Join(t.TempDir(), "good.yaml")
	if err := os.WriteFile(good, []byte(pod("good", ann("rayproject/ray-llm"), pinned)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := Main(context.Background(), []string{"check", "-layout", dir, "-f", good}, &out, &errb, nil); code != 0 {
		t.Errorf("a pinned pod with the generated initdata: exit %d\n%s", code, out.String())
	}
}
