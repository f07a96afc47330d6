// Package startup is what the project knows about a podVM pod's start:
// every deadline on its path (who owns it, its default, what it bounds,
// where it is set, the source it was read in) and the phases a start goes
// through, with the figure each is estimated from and that figure's
// source. It is data (startup.yaml), read strictly; `gcp-t4 plan` models a
// start from it, `gcp-t4 install` and the node sidecar set the deadlines we
// own from it, and preflight checks the cluster against it, so a value
// lives in one row.
package startup

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

//go:embed startup.yaml
var catalogYAML []byte

// Kinds of figure a phase is estimated from.
const (
	KindMeasured   = "measured"   // measured in this repository, command in docs/benchmarks.md
	KindVendor     = "vendor"     // a vendor's documentation
	KindReport     = "report"     // an issue, PR or case study, not checked here
	KindAssumption = "assumption" // ours: the user overrides it with the phase's flag
)

// Routes a phase's bytes may take instead of its own rates
// (Phase.Routes).
const (
	RouteCache = "cache" // an image read from the podVM's cache disk (docs/cache.md)
	// RouteStore is an image the cache disk holds unpacked: the pull is a
	// manifest fetch and an overlay mount (docs/cache.md, "pre-unpacked store").
	RouteStore = "store"
	RouteGCS   = "gcs" // weights from Cloud Storage, through Private Google Access
	// RouteLocal is weights at a local path of the pod (a model image's,
	// docs/cache.md "Weights"): nothing is downloaded; the engine reads
	// them from the disk that holds them.
	RouteLocal = "local"
)

// Who sets a deadline.
const (
	SetByInstall  = "install"  // gcp-t4 install (and the node sidecar keeps it)
	SetByWorkload = "workload" // the workload's manifest (annotation, env, field)
	SetByNode     = "node"     // the node's configuration: the cluster admin
	SetByFixed    = "fixed"    // left at its owner's default by us; How says where it can be changed
)

// Deadline IDs the code refers to; the rest are data only.
const (
	KubeletRuntimeRequest = "kubelet-runtime-request"
	KataCreateContainer   = "kata-create-container"
)

// Source is where a fact was read.
type Source struct {
	ID string `json:"id"`
	// Repo, Path and Commit for source code read at a pinned commit.
	Repo   string `json:"repo,omitempty"`
	Path   string `json:"path,omitempty"`
	Commit string `json:"commit,omitempty"`
	Where  string `json:"where,omitempty"` // function, setting or line
	// URL for documentation.
	URL string `json:"url,omitempty"`
	// File for a measurement of ours: a file of this repository (the
	// section of docs/benchmarks.md with the command).
	File string `json:"file,omitempty"`
	// Note says what was read there.
	Note string `json:"note"`
}

// Ref is the source in one line.
func (s Source) Ref() string {
	if s.Repo != "" {
		r := fmt.Sprintf("%s %s@%s", s.Repo, s.Path, short(s.Commit))
		if s.Where != "" {
			r += " (" + s.Where + ")"
		}
		return r
	}
	if s.File != "" {
		return s.File
	}
	return s.URL
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// Duration is a time.Duration written as Go writes one ("60s", "2m").
type Duration struct{ time.Duration }

// UnmarshalJSON reads "90s"-style strings only: a bare number has no unit.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if len(b) < 2 || b[0] != '"' {
		return fmt.Errorf("duration %s: write it as a string with a unit, e.g. \"60s\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the Go form.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// Deadline is one timer on a pod's start path.
type Deadline struct {
	ID    string `json:"id"`
	Owner string `json:"owner"` // kubelet, kata-remote, CAA, KubeRay, Ray, vLLM
	// Setting is the name the owner reads it under.
	Setting string   `json:"setting"`
	Default Duration `json:"default"`
	// NoDefault: the owner sets no deadline unless it is configured
	// (Default is then 0s).
	NoDefault bool `json:"noDefault,omitempty"`
	// Factor multiplies the setting where the owner applies a multiple of
	// it (kubelet gives RunPodSandbox twice its runtime request timeout).
	Factor float64 `json:"factor,omitempty"`
	// Bounds: the first and last phase it covers, and the call it bounds.
	From string `json:"from"`
	To   string `json:"to"`
	Call string `json:"call"`
	// SetBy is who sets it (SetBy* constants); Install is the value gcp-t4
	// install sets, where SetBy is "install".
	SetBy   string    `json:"setBy"`
	Install *Duration `json:"install,omitempty"`
	// Annotation is the annotation that sets it for one pod (or, for a
	// KubeRay setting, on the Ray object), if any; Env the container
	// environment variable that does.
	Annotation string `json:"annotation,omitempty"`
	Env        string `json:"env,omitempty"`
	// Seconds: the annotation or variable is whole seconds; otherwise a Go
	// duration or whole seconds.
	Seconds bool `json:"seconds,omitempty"`
	// Flag is gcp-t4 plan's flag for the value the cluster has, where the
	// cluster (not the manifest) sets it; rows of one setting share it.
	Flag string `json:"flag,omitempty"`
	// Retried: when it fires the step is tried again (it costs time and
	// shows as an error on the pod) rather than failing the start.
	Retried bool `json:"retried,omitempty"`
	// How tells a user how to raise it; OnExpiry what happens when it fires.
	How      string `json:"how"`
	OnExpiry string `json:"onExpiry"`
	Source   string `json:"source"`
	// Kinds are the workload kinds whose pods it bounds (a KubeRay
	// annotation on a RayService bounds nothing of a plain Pod); none:
	// every kind.
	Kinds []string `json:"kinds,omitempty"`
}

// Applies says whether the deadline bounds a workload of kind ("": any).
func (d Deadline) Applies(kind string) bool {
	return kind == "" || len(d.Kinds) == 0 || slices.Contains(d.Kinds, kind)
}

// Scale is the deadline's length for a setting v.
func (d Deadline) Scale(v time.Duration) time.Duration {
	if d.Factor == 0 {
		return v
	}
	return time.Duration(float64(v) * d.Factor)
}

// Phase is one step of a start, in order.
type Phase struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// A phase takes Fixed, or Size / Rate where it moves bytes (Size and
	// Rate name inputs; Rate may list several, comma-separated, of which
	// the slowest applies), or both (a fixed part plus the transfer).
	Fixed *Duration `json:"fixed,omitempty"`
	Size  string    `json:"size,omitempty"`
	Rate  string    `json:"rate,omitempty"`
	// NAT: the bytes of this phase go through Cloud NAT.
	NAT bool `json:"nat,omitempty"`
	// Routes are other ways the phase's bytes may come, by name (Route*),
	// each with its own rates (as Rate: the slowest applies). Bytes that
	// come by a route do not go through Cloud NAT. The caller picks one
	// per start (Inputs.Routes); without one the phase takes Rate.
	Routes map[string]string `json:"routes,omitempty"`
	Kind   string            `json:"kind"`
	// Flag is gcp-t4 plan's flag for the phase's fixed part, or, for a
	// phase without one, for its size.
	Flag   string `json:"flag"`
	Source string `json:"source"`
	Note   string `json:"note,omitempty"`
}

// Rate is a transfer rate input.
type Rate struct {
	ID   string  `json:"id"`
	MBps float64 `json:"mbps"` // 10^6 bytes a second
	// Efficiency scales MBps (a client's achieved share of the link), 1 if 0.
	Efficiency float64 `json:"efficiency,omitempty"`
	Kind       string  `json:"kind"`
	Flag       string  `json:"flag"`
	Source     string  `json:"source"`
	Note       string  `json:"note,omitempty"`
}

// Effective is MBps × Efficiency.
func (r Rate) Effective() float64 {
	if r.Efficiency == 0 {
		return r.MBps
	}
	return r.MBps * r.Efficiency
}

// Image is the size of a known container image.
type Image struct {
	// Repository, as written in a pod spec without tag; Tag "" matches any.
	Repository string  `json:"repository"`
	Tag        string  `json:"tag,omitempty"`
	MB         float64 `json:"mb"` // compressed, what a pull moves
	Kind       string  `json:"kind"`
	Source     string  `json:"source"`
	Note       string  `json:"note,omitempty"`
}

// Catalog is startup.yaml.
type Catalog struct {
	Images    []Image    `json:"images"`
	Phases    []Phase    `json:"phases"`
	Rates     []Rate     `json:"rates"`
	Deadlines []Deadline `json:"deadlines"`
	Sources   []Source   `json:"sources"`
}

// Load parses the embedded catalogue.
func Load() (*Catalog, error) { return Parse(catalogYAML) }

// Parse reads a catalogue strictly and checks its references: every row
// cites a listed source, every phase reference exists, every figure has a
// kind and a flag to override it.
func Parse(data []byte) (*Catalog, error) {
	var c Catalog
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("startup catalogue: %w", err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("startup catalogue: %w", err)
	}
	return &c, nil
}

func (c *Catalog) validate() error {
	var errs []error
	sources := map[string]bool{}
	for _, s := range c.Sources {
		if s.ID == "" || sources[s.ID] {
			errs = append(errs, fmt.Errorf("source %q: empty or repeated id", s.ID))
		}
		sources[s.ID] = true
		n := 0
		for _, set := range []bool{s.Repo != "", s.URL != "", s.File != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, fmt.Errorf("source %s: give one of repo (with path and commit), url, or file (of this repository)", s.ID))
		}
		if s.Repo != "" && (s.Path == "" || len(s.Commit) < 12) {
			errs = append(errs, fmt.Errorf("source %s: a repository source needs a path and a commit of 12+ hex digits", s.ID))
		}
	}
	cite := func(what, id string) {
		for _, one := range strings.Split(id, ",") {
			if !sources[strings.TrimSpace(one)] {
				errs = append(errs, fmt.Errorf("%s: source %q is not listed under sources", what, one))
			}
		}
	}
	kinds := []string{KindMeasured, KindVendor, KindReport, KindAssumption}
	phases := map[string]int{}
	rates := map[string]bool{}
	for _, r := range c.Rates {
		rates[r.ID] = true
		if r.MBps <= 0 || !slices.Contains(kinds, r.Kind) || r.Flag == "" {
			errs = append(errs, fmt.Errorf("rate %s: needs mbps > 0, a kind (%s) and a flag", r.ID, strings.Join(kinds, ", ")))
		}
		cite("rate "+r.ID, r.Source)
	}
	for i, p := range c.Phases {
		if _, dup := phases[p.ID]; dup || p.ID == "" {
			errs = append(errs, fmt.Errorf("phase %q: empty or repeated id", p.ID))
		}
		phases[p.ID] = i
		if p.Fixed == nil && p.Size == "" {
			errs = append(errs, fmt.Errorf("phase %s: give fixed, or size and rate", p.ID))
		}
		if (p.Size == "") != (p.Rate == "") {
			errs = append(errs, fmt.Errorf("phase %s: size and rate go together", p.ID))
		}
		for _, r := range strings.Split(p.Rate, ",") {
			if p.Rate != "" && !rates[strings.TrimSpace(r)] {
				errs = append(errs, fmt.Errorf("phase %s: rate %q is not listed under rates", p.ID, r))
			}
		}
		for name, rs := range p.Routes {
			if p.Size == "" || name == "" || rs == "" {
				errs = append(errs, fmt.Errorf("phase %s: route %q: a route is a name and its rates, on a phase with a size", p.ID, name))
			}
			for _, r := range strings.Split(rs, ",") {
				if !rates[strings.TrimSpace(r)] {
					errs = append(errs, fmt.Errorf("phase %s: route %s: rate %q is not listed under rates", p.ID, name, r))
				}
			}
		}
		if !slices.Contains(kinds, p.Kind) || p.Flag == "" {
			errs = append(errs, fmt.Errorf("phase %s: needs a kind (%s) and a flag", p.ID, strings.Join(kinds, ", ")))
		}
		cite("phase "+p.ID, p.Source)
	}
	for _, im := range c.Images {
		if im.Repository == "" || im.MB <= 0 || !slices.Contains(kinds, im.Kind) {
			errs = append(errs, fmt.Errorf("image %q: needs a repository, mb > 0 and a kind", im.Repository))
		}
		cite("image "+im.Repository, im.Source)
	}
	ids := map[string]bool{}
	for _, d := range c.Deadlines {
		if ids[d.ID] || d.ID == "" {
			errs = append(errs, fmt.Errorf("deadline %q: empty or repeated id", d.ID))
		}
		ids[d.ID] = true
		f, okf := phases[d.From]
		t, okt := phases[d.To]
		if !okf || !okt || f > t {
			errs = append(errs, fmt.Errorf("deadline %s: from %q and to %q must be listed phases, in order", d.ID, d.From, d.To))
		}
		if !slices.Contains([]string{SetByInstall, SetByWorkload, SetByNode, SetByFixed}, d.SetBy) {
			errs = append(errs, fmt.Errorf("deadline %s: setBy %q: use install, workload, node or fixed", d.ID, d.SetBy))
		}
		if (d.SetBy == SetByInstall) != (d.Install != nil) {
			errs = append(errs, fmt.Errorf("deadline %s: install gives the value gcp-t4 install sets, exactly when setBy is install", d.ID))
		}
		if (d.Default.Duration <= 0) != d.NoDefault || d.How == "" || d.OnExpiry == "" || d.Call == "" {
			errs = append(errs, fmt.Errorf("deadline %s: needs a default above 0s (or 0s with noDefault), the call it bounds, how to raise it and what happens when it fires", d.ID))
		}
		cite("deadline "+d.ID, d.Source)
	}
	return errors.Join(errs...)
}

// Phase returns the phase id.
func (c *Catalog) Phase(id string) (Phase, bool) {
	i := slices.IndexFunc(c.Phases, func(p Phase) bool { return p.ID == id })
	if i < 0 {
		return Phase{}, false
	}
	return c.Phases[i], true
}

// Rates are the rate ids a phase's bytes move at by route ("" for its
// own), comma-separated.
func (p Phase) Rates(route string) (string, error) {
	if route == "" {
		return p.Rate, nil
	}
	rs, ok := p.Routes[route]
	if !ok {
		return "", fmt.Errorf("phase %s has no route %q", p.ID, route)
	}
	return rs, nil
}

// Slowest is the slowest of the rates ids names (comma-separated), in
// MB/s, and its id: the stages of a transfer overlap (a layer unpacks
// while the next downloads), so the slowest sets the pace.
func Slowest(ids string, rates map[string]float64) (float64, string, error) {
	rate, pace := 0.0, ""
	for _, id := range strings.Split(ids, ",") {
		id = strings.TrimSpace(id)
		r := rates[id]
		if r <= 0 {
			return 0, "", fmt.Errorf("rate %s must be above 0", id)
		}
		if rate == 0 || r < rate {
			rate, pace = r, id
		}
	}
	return rate, pace, nil
}

// Deadline returns the row id.
func (c *Catalog) Deadline(id string) (Deadline, bool) {
	i := slices.IndexFunc(c.Deadlines, func(d Deadline) bool { return d.ID == id })
	if i < 0 {
		return Deadline{}, false
	}
	return c.Deadlines[i], true
}

// Source returns the source id.
func (c *Catalog) Source(id string) (Source, bool) {
	i := slices.IndexFunc(c.Sources, func(s Source) bool { return s.ID == id })
	if i < 0 {
		return Source{}, false
	}
	return c.Sources[i], true
}

// LookupImage returns the catalogued size of an image reference
// (registry/repository[:tag][@digest]); Docker Hub's short forms match
// their long ones.
func (c *Catalog) LookupImage(ref string) (Image, bool) {
	repo, tag := splitRef(ref)
	for _, im := range c.Images {
		if normalRepo(im.Repository) == repo && (im.Tag == "" || im.Tag == tag) {
			return im, true
		}
	}
	return Image{}, false
}

func splitRef(ref string) (repo, tag string) {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	return normalRepo(ref), tag
}

func normalRepo(r string) string {
	r = strings.TrimPrefix(strings.TrimPrefix(r, "docker.io/"), "index.docker.io/")
	return strings.TrimPrefix(r, "library/")
}

// InstallCreateContainerTimeout is the create_container_timeout gcp-t4
// install gives kata-remote, from its row.
func (c *Catalog) InstallCreateContainerTimeout() time.Duration {
	d, ok := c.Deadline(KataCreateContainer)
	if !ok || d.Install == nil {
		return 0
	}
	return d.Install.Duration
}
