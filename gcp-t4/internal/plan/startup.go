package plan

import (
	"cmp"
	"flag"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	corev1 "k8s.io/api/core/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/fit"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// startupFlags are plan's overrides of the start-up catalogue, one flag
// per row that names one: phase times, sizes, rates, and the deadlines a
// cluster (not the manifest) sets. Their names come from the catalogue.
type startupFlags struct {
	cat *startup.Catalog
	// cacheDir is --cache, cache the layout it names once read (nil
	// without it); cacheGoal the start the cache is meant to reach.
	cacheDir  *string
	cache     *cacheLayout
	cacheGoal *time.Duration
	// the rest are per catalogue row
	fixed    map[string]*time.Duration // phase id → its fixed part
	sizes    map[string]*string        // size name → "10GB"
	rates    map[string]*float64       // rate id → MB/s
	settings map[string]*time.Duration // flag → the cluster's value
	set      map[string]bool           // flags given on the command line
	names    []string                  // the flags, in the catalogue's order, for -h
}

func registerStartup(fs *flag.FlagSet, cat *startup.Catalog) *startupFlags {
	sf := &startupFlags{cat: cat, fixed: map[string]*time.Duration{}, sizes: map[string]*string{},
		rates: map[string]*float64{}, settings: map[string]*time.Duration{}}
	// A phase's flag sets its fixed part, or, without one, its size
	// (startup.Phase.Flag).
	for _, p := range cat.Phases {
		if p.Fixed != nil {
			sf.fixed[p.ID] = fs.Duration(p.Flag, p.Fixed.Duration, fmt.Sprintf("start-up: %s (%s)", p.Title, p.Kind))
			sf.names = append(sf.names, p.Flag)
		} else if p.Size != "" {
			sf.sizes[p.Size] = fs.String(p.Flag, "", fmt.Sprintf("start-up: the %s size (e.g. 12GB); default: the catalogue's figure for the manifest's %s", p.Size, p.Size))
			sf.names = append(sf.names, p.Flag)
		}
	}
	for _, r := range cat.Rates {
		sf.rates[r.ID] = fs.Float64(r.Flag, r.Effective(), fmt.Sprintf("start-up: MB/s for %s (%s)", r.ID, r.Kind))
		sf.names = append(sf.names, r.Flag)
	}
	sf.cacheDir = fs.String("cache", "", "the cache disk's contents: the layout `DIR` that gcp-t4 cache build -o DIR wrote; images it holds (pinned by digest) are read from the cache disk, not through Cloud NAT (docs/cache.md)")
	sf.cacheGoal = fs.Duration("cache-goal", CacheGoal, "start-up: the time a pod's start with --cache is held to (issue 37's goal)")
	sf.names = append(sf.names, "cache-goal")
	def := cat.Defaults()
	for _, d := range cat.Deadlines {
		if d.Flag == "" || sf.settings[d.Flag] != nil {
			continue
		}
		sf.settings[d.Flag] = fs.Duration(d.Flag, def.Settings[d.ID], fmt.Sprintf("start-up: the cluster's %s %s (%s)", d.Owner, d.Setting, def.SetFrom[d.ID]))
		sf.names = append(sf.names, d.Flag)
	}
	return sf
}

// CacheGoal is issue 37's goal for a pod's start with the cache disk:
// insert to engine loaded, under 3 minutes (--cache-goal).
const CacheGoal = 3 * time.Minute

// noteSet records which flags were given, after parsing, and reads
// --cache.
func (sf *startupFlags) noteSet(fs *flag.FlagSet) error {
	sf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { sf.set[f.Name] = true })
	if *sf.cacheGoal <= 0 {
		return fmt.Errorf("--cache-goal %s: give a time above 0, e.g. 3m", *sf.cacheGoal)
	}
	if sf.set["cache"] {
		c, err := readCache(*sf.cacheDir)
		if err != nil {
			return err
		}
		sf.cache = c
	}
	return nil
}

// GroupStart is a group's modelled start.
type GroupStart struct {
	Workload string        `json:"workload"`
	Group    string        `json:"group"`
	Replicas int64         `json:"replicas"`
	Start    startup.Start `json:"start"`
	// Cache is the start with --cache against its goal.
	Cache *CacheStart `json:"cache,omitempty"`
	Notes []string    `json:"notes,omitempty"`
	// Sizes say where each size the start moves came from, by size name
	// ("image", "weights"): a flag, a catalogue, the cache layout, or
	// nowhere (unknown).
	Sizes map[string]SizeFrom `json:"sizes,omitempty"`
	// given are the start-up flags given on the command line: their
	// figures are the user's, not the catalogue's.
	given map[string]bool
}

// SizeFrom is where a size came from: From in words ("flag
// --image-size", "the start-up catalogue", "unknown"), with the
// catalogue row's Kind and Source where it came from one.
type SizeFrom struct {
	From   string `json:"from"`
	Kind   string `json:"kind,omitempty"`
	Source string `json:"source,omitempty"`
}

// CacheStart is a start with the cache disk (--cache) against the goal
// (--cache-goal).
type CacheStart struct {
	// Layout is --cache; Cached the pod's images read from the cache disk,
	// FromRegistry those pulled from their registries through Cloud NAT.
	Layout       string   `json:"layout"`
	Cached       []string `json:"cached,omitempty"`
	FromRegistry []string `json:"fromRegistry,omitempty"`
	// Total is the start with the cache (Start.Total); WithoutCache the
	// same start with every image pulled from its registry.
	Total        startup.Duration `json:"total"`
	WithoutCache startup.Duration `json:"withoutCache"`
	Goal         startup.Duration `json:"goal"`
	Met          bool             `json:"met"`
	// Over is Total less Goal; Causes the phases, longest first, whose
	// time makes up that gap.
	Over   startup.Duration `json:"over,omitzero"`
	Causes []string         `json:"causes,omitempty"`
}

// podImage is one of a pod's images as the start pulls it.
type podImage struct {
	ref   string
	bytes int64
	known bool
	route string // startup.RouteCache, or "": from its registry
	from  SizeFrom
	// modelBytes are the weights a model image holds (its label), from
	// the cache layout; 0 for any other image.
	modelBytes int64
	// pulled is what a pull of an image the store holds would move from
	// its registry (the layout's manifests; 0 when not there), for the
	// start without the cache.
	pulled int64
}

// modelImage is a pod's model image as the weights' note tells it.
type modelImage struct {
	ref, route string
	bytes      int64
}

// modelImageOf is the pod's model image (gcp-t4 cache model's, known by its
// label in the cache layout), if it has one.
func modelImageOf(images []podImage) (modelImage, bool) {
	for _, im := range images {
		if im.modelBytes > 0 {
			return modelImage{ref: im.ref, route: im.route, bytes: im.modelBytes}, true
		}
	}
	return modelImage{}, false
}

// startOf models one group's start from the catalogue, the manifest, the
// flags and the group's podVM (e: whether it gets a cache disk).
func (sf *startupFlags) startOf(w Workload, g Group, e Entry) (GroupStart, error) {
	cat := sf.cat
	in := cat.Defaults()
	gs := GroupStart{Workload: w.Kind + "/" + w.Name, Group: g.Name, Replicas: g.Replicas, Sizes: map[string]SizeFrom{}, given: sf.set}
	in.Kind = w.Kind
	for id, v := range sf.fixed {
		in.Fixed[id] = *v
	}
	for id, v := range sf.rates {
		if *v <= 0 {
			return gs, fmt.Errorf("--%s %g: give MB/s above 0", rateFlag(cat, id), *v)
		}
		in.Rates[id] = *v
	}
	for _, d := range cat.Deadlines {
		if d.Flag != "" {
			in.Settings[d.ID] = *sf.settings[d.Flag]
			if sf.set[d.Flag] {
				in.SetFrom[d.ID] = "--" + d.Flag
			}
		}
	}
	given := map[string]int64{} // --image-size, --weights-size
	for name, v := range sf.sizes {
		if *v == "" {
			continue
		}
		b, err := fit.ParseSize(*v)
		if err != nil {
			return gs, fmt.Errorf("--%s: %w", sizeFlag(cat, name), err)
		}
		given[name] = b
	}
	gs.Notes = append(gs.Notes, sf.cacheDiskNotes(e)...)
	// The image: the longest pull of the pod's containers (each is pulled
	// inside the podVM, one after another, each under its own
	// CreateContainer). A second container of the same image pulls
	// nothing more: image-rs in the podVM's CDH finds the image by its
	// config digest and only makes a bundle (image-rs/src/image.rs,
	// pull_image, guest-components dcd55ea1).
	var images []podImage
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(g.Spec.InitContainers), g.Spec.Containers...) {
		if seen[c.Image] {
			continue
		}
		seen[c.Image] = true
		im, note := sf.imageOf(c.Image, given, g.Annotations)
		images = append(images, im)
		gs.Notes = append(gs.Notes, note)
	}
	chosen, err := sf.modelImages(&in, images)
	if err != nil {
		return gs, err
	}
	switch {
	case chosen >= 0:
		gs.Sizes["image"] = images[chosen].from
	case len(images) > 0:
		gs.Sizes["image"] = SizeFrom{From: "unknown"}
	}
	// Weights: every GPU pod of a Serve LLM cluster downloads the model,
	// from Cloud Storage when every model is mirrored there.
	var weights int64
	weightsKnown := true
	var weightsFrom []string
	if podGPUs(g) > 0 {
		gcs, local := len(w.Models) > 0, len(w.Models) > 0
		for _, m := range w.Models {
			gcs = gcs && strings.HasPrefix(m, "gs://")
			local = local && strings.HasPrefix(m, "/")
		}
		if gcs {
			in.Routes["weights"] = startup.RouteGCS
		}
		if local {
			// Read where they lie: nothing is downloaded, and the
			// engine loads them from the disk that holds them.
			in.Routes["weights"] = startup.RouteLocal
			in.PhaseSizes["weights"] = 0
			in.OffNAT["weights"] = true
		}
		for _, m := range w.Models {
			if strings.HasPrefix(m, "/") {
				note := fmt.Sprintf("model %s: a local path, read where it lies (a model image beside the serving container, docs/cache.md \"Weights\"): nothing downloaded", m)
				if mi, ok := modelImageOf(images); ok {
					weights += mi.bytes
					weightsFrom = append(weightsFrom, mi.ref)
					if _, ok := given["weights"]; ok {
						note += "; its weights in model image " + mi.ref + " (their size: --weights-size)"
					} else {
						note += fmt.Sprintf("; %.1f GB of weights in model image %s (the cache layout's label)", float64(mi.bytes)/1e9, mi.ref)
					}
					if mi.route == startup.RouteStore {
						in.Routes["engine"] = startup.RouteCache
						note += ", read by the engine from the cache disk at the cache-disk rate (--cache-read-rate)"
					}
				} else {
					weightsKnown = false
					if _, ok := given["weights"]; !ok {
						note += "; give its size with --weights-size (or --cache with the layout holding its model image)"
					}
				}
				gs.Notes = append(gs.Notes, note)
				continue
			}
			if strings.HasPrefix(m, "gs://") {
				in.OffNAT["weights"] = true
				note := fmt.Sprintf("model %s: from Cloud Storage through Private Google Access, not Cloud NAT, at the gcs rate (--gcs-rate)", m)
				if _, ok := given["weights"]; !ok {
					note += "; give its size with --weights-size"
				}
				gs.Notes = append(gs.Notes, note)
				weightsKnown = false
				continue
			}
			mod, err := fit.LookupModel(m)
			if err != nil {
				gs.Notes = append(gs.Notes, fmt.Sprintf("model %s is not in plan serve's catalogue: give --weights-size", m))
				weightsKnown = false
				continue
			}
			b := mod.CheckpointBytes()
			weights += b
			weightsFrom = append(weightsFrom, m)
			gs.Notes = append(gs.Notes, fmt.Sprintf("model %s: %.1f GB of weights (plan serve's catalogue)", m, float64(b)/1e9))
		}
	}
	if weightsKnown {
		in.Sizes["weights"] = weights
		if weights > 0 {
			gs.Sizes["weights"] = SizeFrom{From: "plan serve's catalogue", Source: "plan serve's catalogue: " + strings.Join(weightsFrom, ", ")}
		}
	} else {
		gs.Sizes["weights"] = SizeFrom{From: "unknown"}
	}
	if b, ok := given["weights"]; ok {
		in.Sizes["weights"] = b
		gs.Sizes["weights"] = SizeFrom{From: "flag --" + sizeFlag(cat, "weights")}
	}
	// What the manifest sets: annotations on the pod (kata) or the
	// object (KubeRay), environment variables on the containers.
	for _, d := range cat.Deadlines {
		v, from, err := manifestSetting(d, w, g)
		if err != nil {
			return gs, err
		}
		if from != "" {
			in.Settings[d.ID], in.SetFrom[d.ID] = v, from
		}
	}
	st, err := cat.Model(in)
	if err != nil {
		return gs, err
	}
	for i, c := range st.Checks {
		if !c.Met && !c.Unknown {
			st.Checks[i].Fix = fixOf(c)
		}
	}
	gs.Start = st
	if sf.cache != nil {
		if gs.Cache, err = sf.cacheStart(in, images, st); err != nil {
			return gs, err
		}
	}
	return gs, nil
}

// imageOf is how a pod's image is pulled, and the note that says so:
// from the cache disk when --cache holds it, else from its registry; its
// size --image-size, else the layout's, else the catalogue's.
func (sf *startupFlags) imageOf(ref string, given map[string]int64, podAnnotations map[string]string) (podImage, string) {
	im := podImage{ref: ref}
	var how string
	if sf.cache != nil {
		match, ci, same := sf.cache.lookup(ref)
		if match == inCache {
			if why := mirrorNamed(podAnnotations, ci); why != "" {
				match = ""
				how = "in the cache (" + ci.Ref + "), but " + why + ": image-rs pulls it from its registry through Cloud NAT; give the pod the annotation gcp-t4 cache initdata -annotation prints"
			}
		}
		switch match {
		case "":
		case inCache:
			im.route = startup.RouteCache
			im.bytes, im.known = ci.Bytes, ci.Bytes > 0
			im.modelBytes = ci.ModelBytes
			how = fmt.Sprintf("in the cache (%s): read from the cache disk, not through Cloud NAT", ci.Ref)
			switch {
			case ci.Stored:
				// image-rs finds it by config digest and mounts its layers
				// in place (image-rs/src/image.rs:391-401 at dcd55ea1):
				// nothing is read or unpacked at the pull.
				im.route, im.bytes, im.known, im.pulled = startup.RouteStore, 0, true, ci.Bytes
				how = fmt.Sprintf("in the cache's pre-unpacked store (%s): the pull is a manifest fetch and an overlay mount of the layers on the cache disk, nothing unpacked; the layers are read from the disk as the container uses them", ci.Ref)
			case sf.cache.StoreMiss != "":
				how += ", and unpacked in the podVM: the pre-unpacked store is not used (" + sf.cache.StoreMiss + ")"
			default:
				how += ", and unpacked in the podVM: the pre-unpacked store does not hold it (an image whose config is not linux is left out)"
			}
		case byTag:
			how = "referenced by tag: a cached image is matched by digest only (image-rs checks a manifest only when it pulls by digest), so it falls back to its registry through Cloud NAT; pin it by digest in the manifest (IMAGE@sha256:DIGEST)"
			if len(same) > 0 {
				var refs []string
				for _, c := range same {
					refs = append(refs, c.Ref)
				}
				how += "; the cache holds " + strings.Join(refs, ", ") + " (its digest, if that is the image meant)"
			} else {
				how += " and build it into the cache (gcp-t4 cache build)"
			}
		default:
			how = "not in the cache: it falls back to its registry through Cloud NAT (image-rs tries the podVM's mirror, then the image's own registry); add it with gcp-t4 cache build"
		}
	}
	if im.route == startup.RouteStore {
		im.from = SizeFrom{From: "the cache's pre-unpacked store", Source: sf.cache.Dir + ": " + imagestore.StoreDir}
		return im, fmt.Sprintf("image %s: nothing to pull, %s", ref, how)
	}
	if b, ok := given["image"]; ok {
		im.bytes, im.known = b, true
		im.from = SizeFrom{From: "flag --" + sizeFlag(sf.cat, "image")}
		note := fmt.Sprintf("image %s: %.1f GB (--image-size)", ref, float64(b)/1e9)
		if how != "" {
			note += ", " + how
		}
		return im, note
	}
	if im.known {
		im.from = SizeFrom{From: "the cache layout", Source: sf.cache.Dir + ": the image's manifest"}
		return im, fmt.Sprintf("image %s: %.1f GB (the cache layout's manifest), %s", ref, float64(im.bytes)/1e9, how)
	}
	cat := sf.cat
	if ci, ok := cat.LookupImage(ref); ok {
		im.bytes, im.known = int64(ci.MB*1e6), true
		im.from = SizeFrom{From: "the start-up catalogue", Kind: ci.Kind, Source: refOf(cat, ci.Source)}
		note := fmt.Sprintf("image %s: %.1f GB (%s, %s)", ref, ci.MB/1e3, ci.Kind, refOf(cat, ci.Source))
		if how != "" {
			note += ", " + how
		}
		return im, note
	}
	note := fmt.Sprintf("image %s is not in the start-up catalogue: give --image-size", ref)
	if how != "" {
		note += "; " + how
	}
	return im, note
}

// modelImages sets the image phase's inputs: the longest of the pod's
// pulls, each at its route's rates, and every byte pulled from a registry
// as the bytes through Cloud NAT. It returns the longest pull's index. An
// image of unknown size leaves the phase unknown (its note names
// --image-size), and the index -1.
func (sf *startupFlags) modelImages(in *startup.Inputs, images []podImage) (int, error) {
	p, ok := sf.cat.Phase("image")
	if !ok {
		return -1, fmt.Errorf("startup catalogue: no image phase")
	}
	var longest float64
	var nat int64
	chosen := -1
	for i, im := range images {
		if !im.known {
			return -1, nil
		}
		ids, err := p.Rates(im.route)
		if err != nil {
			return -1, err
		}
		rate, _, err := startup.Slowest(ids, in.Rates)
		if err != nil {
			return -1, fmt.Errorf("phase image: %w", err)
		}
		if t := float64(im.bytes) / rate; chosen < 0 || t > longest {
			longest, chosen = t, i
		}
		if im.route == "" {
			nat += im.bytes
		}
	}
	if chosen < 0 {
		return -1, nil
	}
	in.Sizes["image"] = images[chosen].bytes
	if r := images[chosen].route; r != "" {
		in.Routes["image"] = r
	}
	in.NATBytes["image"] = nat
	return chosen, nil
}

// cacheStart is the start with the cache against the goal, and the same
// start with every image from its registry.
func (sf *startupFlags) cacheStart(in startup.Inputs, images []podImage, with startup.Start) (*CacheStart, error) {
	cs := &CacheStart{Layout: sf.cache.Dir, Total: with.Total, Goal: startup.Duration{Duration: *sf.cacheGoal}}
	without := in.Clone()
	delete(without.Routes, "image")
	delete(without.Sizes, "image")
	delete(without.NATBytes, "image")
	// Without the cache the weights of a model image are on the podVM's
	// own disk, pulled with the image.
	if without.Routes["engine"] == startup.RouteCache {
		delete(without.Routes, "engine")
	}
	registry := make([]podImage, len(images))
	for i, im := range images {
		switch im.route {
		case startup.RouteCache, startup.RouteStore:
			cs.Cached = append(cs.Cached, im.ref)
		default:
			cs.FromRegistry = append(cs.FromRegistry, im.ref)
		}
		if im.route == startup.RouteStore {
			// Its registry's bytes: the layout's, else the catalogue's.
			im.bytes, im.known = im.pulled, im.pulled > 0
			if ci, ok := sf.cat.LookupImage(im.ref); !im.known && ok {
				im.bytes, im.known = int64(ci.MB*1e6), true
			}
		}
		im.route = ""
		registry[i] = im
	}
	if _, err := sf.modelImages(&without, registry); err != nil {
		return nil, err
	}
	st, err := sf.cat.Model(without)
	if err != nil {
		return nil, err
	}
	cs.WithoutCache = st.Total
	cs.Met = cs.Total.Duration <= cs.Goal.Duration
	if cs.Met {
		return cs, nil
	}
	cs.Over = startup.Duration{Duration: cs.Total.Duration - cs.Goal.Duration}
	// The gap's causes: the longest phases, until they make it up.
	phases := slices.Clone(with.Phases)
	slices.SortStableFunc(phases, func(a, b startup.PhaseTime) int { return cmp.Compare(b.Took.Duration, a.Took.Duration) })
	var sum time.Duration
	for _, p := range phases {
		if sum >= cs.Over.Duration || p.Took.Duration == 0 {
			break
		}
		cs.Causes = append(cs.Causes, p.ID)
		sum += p.Took.Duration
	}
	return cs, nil
}

// cacheDiskNotes say where --cache and the group's podVM disagree: a
// cache modelled for a podVM that gets no cache disk, a cache disk not
// modelled, or a disk of another type than the cache-disk rate's.
func (sf *startupFlags) cacheDiskNotes(e Entry) []string {
	var disk *computepb.AttachedDisk
	for _, d := range e.Insert.GetInstanceResource().GetDisks() {
		if d.GetDeviceName() == gcpt4.CacheDeviceName {
			disk = d
		}
	}
	switch {
	case sf.cache != nil && disk == nil:
		return []string{fmt.Sprintf("--cache: this podVM gets no cache disk (profile %s; GCP_CACHE_IMAGE, or the profile's cacheImage:, names none): modelled as if it had one made from %s", e.Profile, sf.cache.Dir)}
	case sf.cache == nil && disk != nil:
		return []string{fmt.Sprintf("this podVM gets a cache disk (image %s): give --cache DIR, the layout the image was built from, to model its pulls from the disk", path.Base(disk.GetInitializeParams().GetSourceImage()))}
	case disk != nil:
		if t := path.Base(disk.GetInitializeParams().GetDiskType()); t != "pd-balanced" {
			return []string{fmt.Sprintf("the cache disk is %s; the cache-disk rate is pd-balanced's: give --cache-read-rate for %s", t, t)}
		}
	}
	return nil
}

// manifestSetting is a deadline's value as the manifest sets it, if it does.
func manifestSetting(d startup.Deadline, w Workload, g Group) (time.Duration, string, error) {
	if d.Annotation != "" {
		for _, ann := range []map[string]string{g.Annotations, w.Annotations} {
			if v, ok := ann[d.Annotation]; ok {
				t, err := parseSetting(v, d.Seconds)
				if err != nil {
					return 0, "", fmt.Errorf("%s %s: annotation %s: %w", w.Kind, w.Name, d.Annotation, err)
				}
				return t, "annotation " + d.Annotation, nil
			}
		}
	}
	if d.Env != "" {
		for _, c := range g.Spec.Containers {
			if v, ok := envValue(c, d.Env); ok {
				t, err := parseSetting(v, d.Seconds)
				if err != nil {
					return 0, "", fmt.Errorf("%s %s: container %s: env %s: %w", w.Kind, w.Name, c.Name, d.Env, err)
				}
				return t, "env " + d.Env, nil
			}
		}
	}
	return 0, "", nil
}

func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

// parseSetting reads whole seconds, or (unless seconds only) a Go duration.
func parseSetting(v string, secondsOnly bool) (time.Duration, error) {
	if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	if secondsOnly {
		return 0, fmt.Errorf("%q: write whole seconds (e.g. \"1200\"), as its owner reads it", v)
	}
	t, err := time.ParseDuration(v)
	if err != nil || t <= 0 {
		return 0, fmt.Errorf("%q: write a duration (e.g. \"60m\") or whole seconds", v)
	}
	return t, nil
}

func podGPUs(g Group) int64 {
	var n int64
	for _, c := range g.Spec.Containers {
		q := c.Resources.Limits[GPUResource]
		n += q.Value()
	}
	return n
}

func refOf(cat *startup.Catalog, ids string) string {
	var refs []string
	for _, id := range strings.Split(ids, ",") {
		if s, ok := cat.Source(strings.TrimSpace(id)); ok {
			refs = append(refs, s.Ref())
		}
	}
	return strings.Join(refs, "; ")
}

func rateFlag(cat *startup.Catalog, id string) string {
	for _, r := range cat.Rates {
		if r.ID == id {
			return r.Flag
		}
	}
	return id
}

func sizeFlag(cat *startup.Catalog, name string) string {
	for _, p := range cat.Phases {
		if p.Size == name && p.Fixed == nil {
			return p.Flag
		}
	}
	return name
}

// fixOf says what to do about a deadline not met.
func fixOf(c startup.Check) string {
	need := c.Need.Duration
	if c.Factor > 1 {
		need = time.Duration(float64(need) / c.Factor)
	}
	need = need.Round(time.Minute) + time.Minute
	var b strings.Builder
	fmt.Fprintf(&b, "raise %s %s to at least %s: %s", c.Owner, c.Setting, need, c.How)
	if c.Annotation != "" && c.SetBy != startup.SetByWorkload {
		fmt.Fprintf(&b, " (one pod: annotation %s)", c.Annotation)
	}
	b.WriteString("; or shorten the phases it bounds")
	return b.String()
}
