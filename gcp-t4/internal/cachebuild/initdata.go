package cachebuild

// `gcp-t4 cache initdata` and `gcp-t4 cache check`: the pod side of the
// cache. A podVM's registry mirror (cachemirror) serves the cache disk on
// 127.0.0.1:5000, but image-rs, inside confidential-data-hub (CDH), asks a
// mirror only when CDH's configuration names it, and that configuration
// reaches the podVM only in the pod's initdata. initdata writes that
// initdata, so nobody writes it by hand; check reads a workload's manifests
// and says, container by container, whether its image will come from the
// cache, and why not where it will not.
//
// What the generated initdata must hold, read at the pins:
//   - The annotation: kata's shim (kata-containers cf82bb35,
//     src/runtime/pkg/oci/utils.go addHypervisorInitdataOverrides) reads
//     io.katacontainers.config.hypervisor.cc_init_data as base64 (standard,
//     padded) of gzip of a TOML document {algorithm, version, data} and
//     passes the TOML to CAA (src/runtime/virtcontainers/remote.go); the
//     remote hypervisor's configuration enables the annotation
//     (src/runtime/config/configuration-remote.toml.in), and kata-deploy
//     passes io.katacontainers.* pod annotations to the shim
//     (tools/packaging/kata-deploy/binary/src/runtime/containerd.rs).
//   - CAA v0.22.0 (38d0fcf7) encodes it again into /run/peerpod/initdata
//     (pkg/adaptor/cloud/cloud.go, pkg/util/cloud.go); process-user-data
//     writes the data entries named aa.toml, cdh.toml and policy.rego to
//     /run/peerpod and the digest of the TOML, in its algorithm, to
//     /run/peerpod/initdata.digest (pkg/userdata/provision.go,
//     pkg/initdata/initdata.go).
//   - CDH (guest-components dcd55ea1, confidential-data-hub/hub/src/
//     config/mod.rs) refuses a configuration file without [kbc] name: only
//     socket and kbc.url have defaults there. Without a file it uses the
//     KBC offline_fs_kbc with no URL (attestation-agent/src/config/
//     aa_kbc_params.rs, AaKbcParams::default); the generated file says the
//     same, so nothing changes but the image section. [image] given, the
//     image settings come from it with image-rs's serde defaults
//     (image-rs/src/config.rs) instead of the kernel command line, which
//     on the caa-gcp-t4 podVM carries none of them.
//   - image-rs reads [image.registry_config] as containers-registries.conf
//     (image-rs/src/registry/mod.rs): a [[registry]] rule whose prefix
//     occurs in the reference, followed by its end or ':', '/' or '@',
//     sends the pull to each of its mirrors first (insecure: plain HTTP),
//     then to its location. The reference is matched as oci-spec's
//     Reference prints it: docker.io for Docker Hub and library/ for its
//     one-word names (oci-spec-rs v0.9.0, src/distribution/reference.rs,
//     the port of distribution/reference this file uses).
//   - aa.toml is given empty, as process-user-data writes it when a pod
//     has no initdata (generateDummyInitdata), so attestation-agent starts
//     as it does without initdata; no policy.rego, so the podVM keeps its
//     own default policy.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/distribution/reference"
	toml "github.com/pelletier/go-toml/v2"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/initdata"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
)

// repository is one repository of the cache as each side names it.
type repository struct {
	// Prefix is the repository as image-rs matches a reference to it:
	// registry/path, Docker Hub's docker.io and library/ filled in.
	Prefix string
	// Paths are where the mirror serves it (cachemirror: the reference's
	// path without its registry host, as the image was named to cache
	// build); usually one.
	Paths []string
}

// repositoryOf is ref's repository: the prefix image-rs matches and the
// path the mirror serves it under when the cache was built from ref as
// written.
func repositoryOf(ref string) (prefix, path string, err error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", fmt.Errorf("image %q: %w", ref, err)
	}
	return reference.TrimNamed(n).String(), cachemirror.RepositoryPath(ref), nil
}

// repositories groups refs by the repository image-rs matches, sorted.
func repositories(refs []string) ([]repository, error) {
	paths := map[string][]string{}
	for _, r := range refs {
		prefix, path, err := repositoryOf(r)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(paths[prefix], path) {
			paths[prefix] = append(paths[prefix], path)
		}
	}
	var out []repository
	for p, ps := range paths {
		sort.Strings(ps)
		out = append(out, repository{Prefix: p, Paths: ps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix < out[j].Prefix })
	return out, nil
}

// layoutImage is one image a layout's index.json names, as the mirror
// reads it.
type layoutImage = cachemirror.Image

// tomlString quotes s as a TOML basic string. The values written are image
// references and host:port, whose characters need no escape; anything
// else is refused rather than escaped, so the text stays what every TOML
// reader on the path (Go's in kata and CAA, Rust's in CDH) reads alike.
func tomlString(s string) (string, error) {
	if !regexp.MustCompile(`^[A-Za-z0-9._:/@-]*$`).MatchString(s) {
		return "", fmt.Errorf("%q: only letters, digits and . _ : / @ - are written", s)
	}
	return `"` + s + `"`, nil
}

// initdataTOML is the initdata for a pod whose images in repos come from
// the cache mirror at mirror (host:port, in the podVM's own network
// namespace, where CDH runs). The text is deterministic: the same
// repositories give the same bytes, so the same digest.
func initdataTOML(repos []repository, mirror string) (string, error) {
	if len(repos) == 0 {
		return "", errors.New("no repositories: name the cache's images, or its layout")
	}
	if _, err := tomlString(mirror); err != nil {
		return "", fmt.Errorf("mirror: %w", err)
	}
	var cdh strings.Builder
	cdh.WriteString("# gcp-t4 cache initdata: image-rs pulls these repositories from the podVM's cache mirror\n")
	cdh.WriteString("# first, then from their registries. [kbc] is required in a CDH config file; this is\n")
	cdh.WriteString("# the KBC CDH uses without one.\n")
	cdh.WriteString("[kbc]\nname = \"offline_fs_kbc\"\nurl = \"\"\n")
	for _, r := range repos {
		p, err := tomlString(r.Prefix)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&cdh, "\n[[image.registry_config.registry]]\nprefix = %s\nlocation = %s\n", p, p)
		for _, path := range r.Paths {
			l, err := tomlString(mirror + "/" + path)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&cdh, "\n[[image.registry_config.registry.mirror]]\nlocation = %s\ninsecure = true\n", l)
		}
	}
	// A TOML multi-line literal string drops the newline after its opening
	// quotes, so each file's text is exactly what follows that line.
	return "algorithm = \"sha256\"\nversion = \"0.1.0\"\n\n[data]\n\"aa.toml\" = '''\n'''\n\"cdh.toml\" = '''\n" + cdh.String() + "'''\n", nil
}

// initdataDigest is what process-user-data writes to
// /run/peerpod/initdata.digest for this initdata (sha256 of the TOML, hex)
// and what the podVM measures into PCR 8 and prints on its console.
func initdataDigest(initdata string) string {
	s := sha256.Sum256([]byte(initdata))
	return hex.EncodeToString(s[:])
}

// initdataDoc is the initdata TOML's shape, as kata's shim and CAA read it.
type initdataDoc struct {
	Algorithm string            `toml:"algorithm"`
	Version   string            `toml:"version"`
	Data      map[string]string `toml:"data"`
}

// registryRule is a [[registry]] of image-rs's registries configuration.
type registryRule struct {
	Prefix   string `toml:"prefix"`
	Location string `toml:"location"`
	Insecure bool   `toml:"insecure"`
	Blocked  bool   `toml:"blocked"`
	Mirror   []struct {
		Location string `toml:"location"`
		Insecure bool   `toml:"insecure"`
	} `toml:"mirror"`
}

// parseInitdata reads an annotation value down to the registry rules its
// cdh.toml gives image-rs (none when it has no cdh.toml or no rules).
func parseInitdata(annotation string) (initdataDoc, []registryRule, error) {
	text, err := initdata.Decode(annotation)
	if err != nil {
		return initdataDoc{}, nil, err
	}
	var id initdataDoc
	if err := toml.Unmarshal([]byte(text), &id); err != nil {
		return initdataDoc{}, nil, fmt.Errorf("the initdata is not TOML: %w", err)
	}
	cdh, ok := id.Data["cdh.toml"]
	if !ok {
		return id, nil, nil
	}
	var c struct {
		Image struct {
			RegistryConfig struct {
				Registry []registryRule `toml:"registry"`
			} `toml:"registry_config"`
		} `toml:"image"`
	}
	if err := toml.Unmarshal([]byte(cdh), &c); err != nil {
		return id, nil, fmt.Errorf("its cdh.toml is not TOML: %w", err)
	}
	return id, c.Image.RegistryConfig.Registry, nil
}

// pull is one place image-rs tries for an image.
type pull struct {
	Ref    string
	HTTP   bool // plain HTTP (the rule's or mirror's insecure)
	Mirror bool
}

// pullOrder is where image-rs at dcd55ea1 tries to pull ref under rules, in
// order (image-rs/src/registry/mod.rs, handle_registry_tasks, for a
// reference that needs no unqualified search: with the default
// unqualified-search-registries, ["docker.io"], a Docker Hub reference is
// tried as it is). The rule whose prefix matches longest wins; its mirrors
// come first, then its location, or the reference itself. blocked reports
// a rule that blocks the pull. A model for checking, not image-rs itself.
func pullOrder(ref string, rules []registryRule) (pulls []pull, blocked bool, err error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, false, err
	}
	// oci-spec gives a reference with neither tag nor digest the tag
	// latest, and prints it.
	s := reference.TagNameOnly(n).String()
	best, length := -1, -1
	for i, r := range rules {
		prefix := r.Prefix
		if prefix == "" {
			prefix = r.Location // validate_and_tidy
		}
		if l, ok := matchPrefix(s, prefix); ok && l > length {
			best, length = i, l
		}
	}
	if best < 0 {
		return []pull{{Ref: s}}, false, nil
	}
	r := rules[best]
	if r.Blocked {
		return nil, true, nil
	}
	for _, m := range r.Mirror {
		pulls = append(pulls, pull{Ref: m.Location + s[length:], HTTP: m.Insecure, Mirror: true})
	}
	if r.Location != "" {
		pulls = append(pulls, pull{Ref: r.Location + s[length:], HTTP: r.Insecure})
	} else {
		pulls = append(pulls, pull{Ref: s})
	}
	return pulls, false, nil
}

// matchPrefix is image-rs's match_reference_prefix: the prefix's first
// occurrence in the reference, which must end the reference or be followed
// by ':', '/' or '@'; a "*." prefix matches a host's last labels.
func matchPrefix(ref, prefix string) (int, bool) {
	boundary := func(pos int) (int, bool) {
		if pos == len(ref) || strings.ContainsRune(":/@", rune(ref[pos])) {
			return pos, true
		}
		return 0, false
	}
	if rest, ok := strings.CutPrefix(prefix, "*"); ok && strings.HasPrefix(rest, ".") {
		pos := strings.Index(ref, rest)
		if pos < 0 || strings.Contains(ref[:pos], "/") {
			return 0, false
		}
		return boundary(pos + len(rest))
	}
	pos := strings.Index(ref, prefix)
	if pos < 0 {
		return 0, false
	}
	return boundary(pos + len(prefix))
}

var initdataUsage = cli.Usage{
	Synopsis: []string{"gcp-t4 cache initdata [-layout DIR] [-mirror HOST:PORT] [-annotation | -digest] [IMAGE...]"},
	About: []string{"Prints the initdata a pod needs for the podVM's cache mirror to serve its images (docs/cache.md): " +
		"a confidential-data-hub configuration whose image-rs registries configuration has, for each repository of " +
		"the cache, a rule that tries the mirror first and the image's own registry after it. The images are the " +
		"cache's (-layout, the directory cache build wrote) and those named, as they were named to cache build. " +
		"-annotation prints the value of the pod annotation " + initdata.Annotation + " (base64 of gzip); -digest the " +
		"sha256 the podVM measures and prints on its serial console (CAA-GCP-T4-INITDATA)."},
}

// initdataMain is `gcp-t4 cache initdata`.
func initdataMain(_ context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	fs := cli.NewFlagSet("gcp-t4 cache initdata", initdataUsage)
	layout := fs.String("layout", "", "the cache's OCI layout (cache build -o): its images")
	mirror := fs.String("mirror", cachemirror.Listen, "the mirror's address in the podVM")
	annotation := fs.Bool("annotation", false, "print the annotation's value (base64 of gzip) instead of the TOML")
	digest := fs.Bool("digest", false, "print the initdata's sha256 (hex) instead of the TOML")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if *annotation && *digest {
		return cli.Misuse(fs, stderr, "-annotation and -digest print different things: give one")
	}
	refs := fs.Args()
	if *layout != "" {
		imgs, err := cachemirror.Images(*layout)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 cache initdata: %v\n", err)
			return 1
		}
		for _, i := range imgs {
			refs = append(refs, i.Ref)
		}
	}
	if len(refs) == 0 {
		return cli.Misuse(fs, stderr, "no images: give -layout DIR (cache build's -o) or the images as named to cache build")
	}
	repos, err := repositories(refs)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache initdata: %v\n", err)
		return 2
	}
	text, err := initdataTOML(repos, *mirror)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache initdata: %v\n", err)
		return 2
	}
	switch {
	case *annotation:
		v, err := initdata.Encode(text)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 cache initdata: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, v)
	case *digest:
		fmt.Fprintln(stdout, initdataDigest(text))
	default:
		fmt.Fprint(stdout, text)
	}
	return 0
}

var checkUsage = cli.Usage{
	Synopsis: []string{"gcp-t4 cache check -layout DIR (-k KUSTOMIZATION | -f MANIFEST) [-mirror HOST:PORT]"},
	About: []string{"Says, for every container of every pod the manifests make, where the podVM will pull its image " +
		"from: the cache at DIR (cache build -o), or its registry, and why. An image of a repository the cache holds " +
		"must be pinned by the digest the cache was built from, and its pod must carry initdata whose registries " +
		"configuration sends image-rs to the mirror first (gcp-t4 cache initdata); the check follows image-rs's own " +
		"rules. Exits 1 when a container of a cached repository would not be served from the cache."},
}

// checkMain is `gcp-t4 cache check`.
func checkMain(_ context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	fs := cli.NewFlagSet("gcp-t4 cache check", checkUsage)
	layout := fs.String("layout", "", "the cache's OCI layout (cache build -o)")
	kdir := fs.String("k", "", "a kustomization, rendered as kubectl apply -k renders it")
	file := fs.String("f", "", "a manifest file")
	mirror := fs.String("mirror", cachemirror.Listen, "the mirror's address in the podVM")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return code
	}
	switch {
	case *layout == "":
		return cli.Misuse(fs, stderr, "-layout DIR is required: the directory cache build -o wrote")
	case (*kdir == "") == (*file == ""):
		return cli.Misuse(fs, stderr, "give the workload with -k KUSTOMIZATION or -f MANIFEST, one of them")
	}
	imgs, err := cachemirror.Images(*layout)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache check: %v\n", err)
		return 1
	}
	ws, err := readWorkloads(*kdir, *file)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache check: %v\n", err)
		return 1
	}
	rows, err := check(ws, imgs, *mirror)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache check: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tIMAGE\tFROM")
	bad, cached := 0, 0
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Pod, r.Container, r.Image, r.From)
		if r.Problem {
			bad++
		}
		if r.Cached {
			cached++
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "%d containers, %d from the cache, %d of a cached repository not served from it\n", len(rows), cached, bad)
	if bad > 0 {
		return 1
	}
	return 0
}

// readWorkloads renders a kustomization (as kubectl apply -k) or reads a
// manifest file into the pod templates plan reads.
func readWorkloads(kdir, file string) ([]plan.Workload, error) {
	var y []byte
	if kdir != "" {
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), kdir)
		if err != nil {
			return nil, fmt.Errorf("-k %s: %w", kdir, err)
		}
		if y, err = m.AsYaml(); err != nil {
			return nil, fmt.Errorf("-k %s: %w", kdir, err)
		}
	} else {
		var err error
		if y, err = os.ReadFile(file); err != nil {
			return nil, err
		}
	}
	ws, _, err := plan.ParseManifests(bytes.NewReader(y))
	return ws, err
}

// checkRow is one container's verdict.
type checkRow struct {
	Pod, Container, Image, From string
	// Cached: pulled from the mirror. Problem: its repository is in the
	// cache but it would not be.
	Cached, Problem bool
}

// check follows each container's image through image-rs's rules to the
// cache in imgs (served at mirror) or its registry.
func check(ws []plan.Workload, imgs []layoutImage, mirror string) ([]checkRow, error) {
	// repository prefix -> digests cache build was given -> mirror path
	cached := map[string]map[string]string{}
	for _, i := range imgs {
		prefix, path, err := repositoryOf(i.Ref)
		if err != nil {
			return nil, fmt.Errorf("the cache's %w", err)
		}
		if cached[prefix] == nil {
			cached[prefix] = map[string]string{}
		}
		cached[prefix][i.Digest] = path
	}
	var rows []checkRow
	for _, w := range ws {
		for _, g := range w.Groups {
			pod := w.Kind + "/" + w.Name
			if g.Name != "pod" {
				pod += " " + g.Name // a Ray head or worker group
			}
			ann, hasInitdata := g.Annotations[initdata.Annotation]
			var rules []registryRule
			var annErr error
			if hasInitdata {
				_, rules, annErr = parseInitdata(ann)
			}
			for _, c := range append(slices.Clone(g.Spec.InitContainers), g.Spec.Containers...) {
				row := checkRow{Pod: pod, Container: c.Name, Image: c.Image}
				row.From, row.Cached, row.Problem = judge(c.Image, cached, hasInitdata, rules, annErr, mirror)
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// judge says where image is pulled from, whether from the cache, and
// whether that is a problem (a cached repository not served from it).
func judge(image string, cached map[string]map[string]string, hasInitdata bool, rules []registryRule, annErr error, mirror string) (string, bool, bool) {
	n, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return fmt.Sprintf("not a reference: %v", err), false, true
	}
	repo := reference.TrimNamed(n).String()
	digests, ok := cached[repo]
	if !ok {
		return "its registry: the cache does not hold " + repo, false, false
	}
	d, ok := n.(reference.Digested)
	if !ok {
		return "its registry: named by tag; the mirror is asked by digest (pin it: the digest cache build was given), and image-rs checks the manifest only then", false, true
	}
	path, ok := digests[d.Digest().String()]
	if !ok {
		held := slices.Sorted(maps.Keys(digests))
		return fmt.Sprintf("its registry: the cache holds %s at %s, not %s", repo, strings.Join(held, ", "), d.Digest()), false, true
	}
	switch {
	case !hasInitdata:
		return "its registry: the pod has no initdata (" + initdata.Annotation + "), so image-rs knows no mirror (gcp-t4 cache initdata -annotation)", false, true
	case annErr != nil:
		return fmt.Sprintf("nowhere: the pod's initdata is unreadable: %v", annErr), false, true
	}
	pulls, blocked, err := pullOrder(image, rules)
	if err != nil {
		return err.Error(), false, true
	}
	if blocked {
		return "nowhere: the pod's initdata blocks " + repo, false, true
	}
	want := mirror + "/" + path
	for _, p := range pulls {
		if p.Mirror && p.HTTP && strings.HasPrefix(p.Ref, want+"@") {
			return "the cache (" + want + ")", true, false
		}
	}
	return fmt.Sprintf("its registry: the pod's initdata sends image-rs to %s first, not to the mirror %s over HTTP (gcp-t4 cache initdata)", pulls[0].Ref, want), false, true
}
