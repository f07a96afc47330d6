package cachebuild

// `gcp-t4 cache model`: a model's files as an OCI image, the pattern KServe
// calls a modelcar. On the cache disk its layers are unpacked in the
// pre-unpacked store like any image's, so a podVM with the disk mounts the
// weights in place: nothing is downloaded, from the registry, Cloud
// Storage or the Hub, and nothing crosses Cloud NAT. The image's process
// (cmd/modelcar) links its model directory for the serving container of
// the same pod (internal/modelcar).
//
// The image is reproducible: the same files and holder give the same
// digest on any machine at any time. Every header is fixed (owner 0:0,
// files 0444, directories 0555, the disk's fixed time), entries are sorted, and layers are
// plain tar: weights do not compress (fp16), and a plain layer's digest is
// its diff_id, so image-rs checks one hash and unpacks with no decoder.

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/modelcar"
)

// ownLayer is the size from which a file gets a layer of its own: each
// safetensors shard then is one layer, which image-rs fetches and unpacks
// alongside the others on a store miss, and which stays the same blob when
// another file of the model changes.
const ownLayer = 32 << 20

// modelUser is the user the image runs as: the Ray image's ray user
// (uid 1000, gid 100), which must be the serving container's for it to
// read /proc/PID/root (internal/modelcar).
const modelUser = "1000:100"

// ModelOptions say how to build a model image.
type ModelOptions struct {
	// Holder is cmd/modelcar built for linux/amd64, static.
	Holder string
	// OwnLayer is the size from which a file gets a layer of its own (0:
	// ownLayer).
	OwnLayer int64
	// Exclude are path.Match patterns of paths (relative to the model's
	// directory) left out, such as consolidated.safetensors.
	Exclude []string
}

// ModelSummary is what ModelImage put in the image.
type ModelSummary struct {
	Name     string
	Files    int
	Bytes    int64
	Layers   int
	Skipped  []string // hidden or excluded paths left out
	Holder   string
	Manifest v1.Hash
}

// entry is one tar entry of a layer: a directory (src "") or a file read
// from src.
type entry struct {
	name string // in the image, without a leading slash
	src  string
	mode int64
	size int64
}

// modelLayer is a layer written from entries on each read: plain tar, so
// its digest and diff_id are one hash, computed once when it is made.
type modelLayer struct {
	entries []entry
	hash    v1.Hash
	size    int64
}

var _ v1.Layer = (*modelLayer)(nil)

func newModelLayer(entries []entry) (*modelLayer, error) {
	l := &modelLayer{entries: entries}
	h := sha256.New()
	n, err := l.writeTo(h)
	if err != nil {
		return nil, err
	}
	l.size = n
	l.hash = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	return l, nil
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (l *modelLayer) writeTo(w io.Writer) (int64, error) {
	c := &counter{w: w}
	tw := tar.NewWriter(c)
	for _, e := range l.entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		if e.src == "" {
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.name+"/"
		} else {
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return c.n, err
		}
		if e.src == "" {
			continue
		}
		f, err := os.Open(e.src)
		if err != nil {
			return c.n, err
		}
		n, err := io.Copy(tw, f)
		f.Close()
		if err == nil && n != e.size {
			err = fmt.Errorf("%s changed while the image was made (%d bytes, was %d): make it again", e.src, n, e.size)
		}
		if err != nil {
			return c.n, err
		}
	}
	err := tw.Close()
	return c.n, err
}

func (l *modelLayer) open() (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		_, err := l.writeTo(pw)
		pw.CloseWithError(err)
	}()
	return pr, nil
}

func (l *modelLayer) Digest() (v1.Hash, error)             { return l.hash, nil }
func (l *modelLayer) DiffID() (v1.Hash, error)             { return l.hash, nil }
func (l *modelLayer) Compressed() (io.ReadCloser, error)   { return l.open() }
func (l *modelLayer) Uncompressed() (io.ReadCloser, error) { return l.open() }
func (l *modelLayer) Size() (int64, error)                 { return l.size, nil }
func (l *modelLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }

// CheckHolder refuses a file that cannot run as a podVM container's
// process: it must be a static linux/amd64 executable (the image has no
// libc and no loader).
func CheckHolder(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("the modelcar binary %s: %w (make build writes bin/modelcar, static, for linux/amd64)", p, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("the modelcar binary %s is %s %s, not a linux/amd64 executable: build it with GOOS=linux GOARCH=amd64 (make build does)", p, f.Machine, f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("the modelcar binary %s is dynamically linked: the image has no loader; build it with CGO_ENABLED=0 (make build does)", p)
		}
	}
	return nil
}

// ModelImage makes the image of the model in dir: a layer with the
// modelcar binary, then the model's files under /models, the small ones
// in one layer and each file of ownLayer or more in its own.
func ModelImage(dir string, o ModelOptions) (v1.Image, ModelSummary, error) {
	var sum ModelSummary
	if err := CheckHolder(o.Holder); err != nil {
		return nil, sum, err
	}
	for _, p := range o.Exclude {
		if _, err := path.Match(p, ""); err != nil {
			return nil, sum, fmt.Errorf("-exclude %q: %w", p, err)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, sum, err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return nil, sum, fmt.Errorf("-dir %s: not a directory (the model's files, as hf download --local-dir writes them): %v", dir, err)
	}
	sum.Name = filepath.Base(abs)
	models := strings.TrimPrefix(modelcar.ModelsDir, "/")
	var files []entry
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(abs, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), ".") || slices.ContainsFunc(o.Exclude, func(pat string) bool { ok, _ := path.Match(pat, rel); return ok }) {
			// hf download's own .cache/ and git's files are not the
			// model's.
			sum.Skipped = append(sum.Skipped, rel)
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		// A link (the Hub's cache layout links into its blobs) is read
		// through; anything but a regular file at its end is refused.
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file (%s): a model image holds files and directories only", rel, st.Mode().Type())
		}
		files = append(files, entry{name: models + "/" + rel, src: p, mode: 0o444, size: st.Size()})
		return nil
	})
	if err != nil {
		return nil, sum, fmt.Errorf("reading the model in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, sum, fmt.Errorf("-dir %s holds no file of a model", dir)
	}
	slices.SortFunc(files, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	// withDirs puts before the files each directory they are in, so that
	// every layer states its directories' owner and mode itself.
	withDirs := func(fs []entry) []entry {
		seen := map[string]bool{}
		var out []entry
		for _, f := range fs {
			var dirs []entry
			for d := path.Dir(f.name); d != "." && !seen[d]; d = path.Dir(d) {
				seen[d] = true
				dirs = append([]entry{{name: d, mode: 0o555}}, dirs...)
			}
			out = append(append(out, dirs...), f)
		}
		return out
	}
	holder, err := os.Stat(o.Holder)
	if err != nil {
		return nil, sum, err
	}
	groups := [][]entry{{{name: strings.TrimPrefix(modelcar.Binary, "/"), src: o.Holder, mode: 0o555, size: holder.Size()}}}
	own := o.OwnLayer
	if own <= 0 {
		own = ownLayer
	}
	var small []entry
	var large [][]entry
	for _, f := range files {
		sum.Files++
		sum.Bytes += f.size
		if f.size >= own {
			large = append(large, []entry{f})
		} else {
			small = append(small, f)
		}
	}
	if len(small) > 0 {
		groups = append(groups, small)
	}
	groups = append(groups, large...)
	var layers []v1.Layer
	for _, g := range groups {
		l, err := newModelLayer(withDirs(g))
		if err != nil {
			return nil, sum, fmt.Errorf("hashing the layer of %s: %w", g[0].name, err)
		}
		layers = append(layers, l)
	}
	sum.Layers = len(layers)
	sum.Holder = o.Holder
	cfg := &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: epoch.UTC()},
		Config: v1.Config{
			Entrypoint: []string{modelcar.Binary},
			User:       modelUser,
			Labels: map[string]string{
				modelcar.Label:                   sum.Name,
				modelcar.BytesLabel:              strconv.FormatInt(sum.Bytes, 10),
				"org.opencontainers.image.title": sum.Name,
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, sum, err
	}
	img = mutate.MediaType(mutate.ConfigMediaType(img, types.OCIConfigJSON), types.OCIManifestSchema1)
	for _, l := range layers {
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: epoch.UTC()}, CreatedBy: "gcp-t4 cache model"}}); err != nil {
			return nil, sum, err
		}
	}
	if sum.Manifest, err = img.Digest(); err != nil {
		return nil, sum, err
	}
	return img, sum, nil
}

var modelUsage = cli.Usage{
	Synopsis: []string{"gcp-t4 cache model -dir DIR -push REPOSITORY[:TAG] [-holder FILE] [-exclude PATTERN]..."},
	About: []string{"Makes a model's files (DIR, as hf download --local-dir writes them) into an OCI image and pushes it: " +
		"a modelcar (docs/cache.md, \"Weights\"). The files are under /models, the small ones in one layer and each " +
		"large one (a safetensors shard) in its own, plain tar; the image's process is the modelcar binary, which links " +
		"/models for the serving container of the same pod. The image is reproducible: the same files give the same " +
		"digest. It prints REPOSITORY@sha256:DIGEST: give that to gcp-t4 cache build, beside the serving image, and to " +
		"the pods. Files and directories whose name starts with a dot (hf download's .cache/) are left out. " +
		"Registry credentials come from the Docker config (~/.docker/config.json), as for cache build."},
}

// modelMain is `gcp-t4 cache model`.
func modelMain(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	fs := cli.NewFlagSet("gcp-t4 cache model", modelUsage)
	dir := fs.String("dir", "", "the model's directory (its config.json, tokenizer and safetensors shards)")
	push := fs.String("push", "", "the repository to push to, with a tag if wanted (a registry in the podVMs' region, such as Artifact Registry)")
	holder := fs.String("holder", "", "the modelcar binary, static, linux/amd64 (default: modelcar beside this gcp-t4, where make build puts it)")
	var exclude patterns
	fs.Var(&exclude, "exclude", "leave out paths (relative to -dir) matching this pattern, such as consolidated.safetensors; repeatable")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.Misuse(fs, stderr, "unexpected argument %q: the model is -dir, the repository -push", fs.Arg(0))
	}
	if *dir == "" || *push == "" {
		return cli.Misuse(fs, stderr, "-dir DIR and -push REPOSITORY are both required: the model's files and where the image goes")
	}
	ref, err := name.ParseReference(*push)
	if err != nil {
		return cli.Misuse(fs, stderr, "-push %q: %v (a repository with its registry, such as REGION-docker.pkg.dev/PROJECT/REPO/NAME)", *push, err)
	}
	if _, ok := ref.(name.Digest); ok {
		return cli.Misuse(fs, stderr, "-push %q names a digest: give the repository (and a tag if wanted); the digest is printed once pushed", *push)
	}
	if *holder == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 cache model: finding the modelcar binary: %v (give -holder)\n", err)
			return 1
		}
		*holder = filepath.Join(filepath.Dir(exe), "modelcar")
	}
	// Hashing tens of GB takes minutes: say what is going on.
	fmt.Fprintf(stderr, "gcp-t4 cache model: hashing the files of %s into layers\n", *dir)
	img, sum, err := ModelImage(*dir, ModelOptions{Holder: *holder, Exclude: exclude})
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache model: %v\n", err)
		return 1
	}
	updates := make(chan v1.Update, 16)
	shown := make(chan struct{})
	go func() {
		defer close(shown)
		showPush(updates, stderr)
	}()
	err = remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithProgress(updates))
	<-shown
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache model: pushing to %s: %v\n", ref, err)
		return 1
	}
	for _, s := range sum.Skipped {
		fmt.Fprintf(stderr, "left out: %s\n", s)
	}
	fmt.Fprintf(stderr, "model %s: %d files, %.1f GB, in %d layers (the modelcar binary's and the model's), pushed to %s\n",
		sum.Name, sum.Files, float64(sum.Bytes)/1e9, sum.Layers, ref)
	fmt.Fprintln(stdout, ref.Context().Name()+"@"+sum.Manifest.String())
	return 0
}

// showPush prints the push's progress, a line each tenth of the bytes, until
// go-containerregistry closes updates.
func showPush(updates <-chan v1.Update, w io.Writer) {
	next := int64(0)
	for u := range updates {
		if u.Error != nil || u.Total <= 0 || u.Complete < next {
			continue
		}
		fmt.Fprintf(w, "gcp-t4 cache model: pushed %.1f of %.1f GB\n", float64(u.Complete)/1e9, float64(u.Total)/1e9)
		next = u.Complete + u.Total/10
	}
}

// patterns is a repeatable flag.
type patterns []string

func (p *patterns) String() string { return strings.Join(*p, ",") }

func (p *patterns) Set(v string) error {
	if _, err := path.Match(v, ""); err != nil {
		return err
	}
	*p = append(*p, v)
	return nil
}
