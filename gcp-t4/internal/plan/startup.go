package plan

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/fit"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// startupFlags are plan's overrides of the start-up catalogue, one flag
// per row that names one: phase times, sizes, rates, and the deadlines a
// cluster (not the manifest) sets. Their names come from the catalogue.
type startupFlags struct {
	cat      *startup.Catalog
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

// noteSet records which flags were given, after parsing.
func (sf *startupFlags) noteSet(fs *flag.FlagSet) {
	sf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { sf.set[f.Name] = true })
}

// GroupStart is a group's modelled start.
type GroupStart struct {
	Workload string        `json:"workload"`
	Group    string        `json:"group"`
	Replicas int64         `json:"replicas"`
	Start    startup.Start `json:"start"`
	Notes    []string      `json:"notes,omitempty"`
}

// startOf models one group's start from the catalogue, the manifest and
// the flags.
func (sf *startupFlags) startOf(w Workload, g Group) (GroupStart, error) {
	cat := sf.cat
	in := cat.Defaults()
	gs := GroupStart{Workload: w.Kind + "/" + w.Name, Group: g.Name, Replicas: g.Replicas}
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
	// The image: the largest of the pod's containers (each is pulled
	// inside the podVM, one after another). A second container of the same
	// image pulls nothing more: image-rs in the podVM's CDH finds the image
	// by its config digest and only makes a bundle (image-rs/src/image.rs,
	// pull_image, guest-components dcd55ea1).
	var imageBytes int64
	known := true
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(g.Spec.InitContainers), g.Spec.Containers...) {
		if seen[c.Image] {
			continue
		}
		seen[c.Image] = true
		im, ok := cat.LookupImage(c.Image)
		if !ok {
			gs.Notes = append(gs.Notes, fmt.Sprintf("image %s is not in the start-up catalogue: give --image-size", c.Image))
			known = false
			continue
		}
		if b := int64(im.MB * 1e6); b > imageBytes {
			imageBytes = b
		}
		gs.Notes = append(gs.Notes, fmt.Sprintf("image %s: %.1f GB (%s, %s)", c.Image, im.MB/1e3, im.Kind, refOf(cat, im.Source)))
	}
	if known {
		in.Sizes["image"] = imageBytes
	}
	// Weights: every GPU pod of a Serve LLM cluster downloads the model.
	var weights int64
	weightsKnown := true
	if podGPUs(g) > 0 {
		for _, m := range w.Models {
			if strings.HasPrefix(m, "gs://") {
				in.OffNAT["weights"] = true
				gs.Notes = append(gs.Notes, fmt.Sprintf("model %s: from Cloud Storage (Private Google Access, not Cloud NAT); give --weights-size", m))
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
			gs.Notes = append(gs.Notes, fmt.Sprintf("model %s: %.1f GB of weights (plan serve's catalogue)", m, float64(b)/1e9))
		}
	}
	if weightsKnown {
		in.Sizes["weights"] = weights
	}
	for name, v := range sf.sizes {
		if *v == "" {
			continue
		}
		b, err := fit.ParseSize(*v)
		if err != nil {
			return gs, fmt.Errorf("--%s: %w", sizeFlag(cat, name), err)
		}
		in.Sizes[name] = b
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
	gs.Start = st
	return gs, nil
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

// renderStarts prints each group's start, its deadlines, and the bytes
// through Cloud NAT. It reports whether every deadline is met.
func renderStarts(w io.Writer, starts []GroupStart, cat *startup.Catalog) (bool, error) {
	ok := true
	var nat int64
	var misses []string
	for _, gs := range starts {
		fmt.Fprintf(w, "\nstart-up: %s %s (each pod's podVM starts on its own: the slowest sets the workload's time)\n", gs.Workload, gs.Group)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PHASE\tTIME\tFIGURE\tSOURCE")
		for _, p := range gs.Start.Phases {
			src := p.Kind + " (--" + p.Flag + "): " + refOf(cat, p.Source)
			for _, id := range strings.Split(p.Rate, ",") {
				for _, r := range cat.Rates {
					if r.ID == strings.TrimSpace(id) {
						src += "; " + r.ID + " rate " + r.Kind + " (--" + r.Flag + ")"
					}
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.ID, p.Took, p.Figure, src)
		}
		fmt.Fprintf(tw, "  total\t%s\t\t\n", gs.Start.Total)
		if err := tw.Flush(); err != nil {
			return false, err
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  DEADLINE\tBOUNDS\tNEEDS\tHAS (SET BY)\tVERDICT")
		for _, c := range gs.Start.Checks {
			name := c.Owner + " " + c.Setting
			if c.Factor > 1 {
				name += fmt.Sprintf(" x%g", c.Factor)
			}
			bounds := c.Deadline.From
			if c.Deadline.To != c.Deadline.From {
				bounds += ".." + c.Deadline.To
			}
			have := c.Have.String()
			if c.Have.Duration == 0 {
				have = "none"
			}
			verdict := "met"
			if !c.Met {
				kind := "fatal"
				if c.Retried {
					kind = "retried"
				}
				verdict = "NOT MET (" + kind + "): " + fixOf(c)
				ok = false
				misses = append(misses, fmt.Sprintf("  %s %s: %s", c.Owner, c.Setting, c.OnExpiry))
			}
			fmt.Fprintf(tw, "  %s\t%s (%s)\t%s\t%s (%s)\t%s\n", name, bounds, c.Call, c.Need, have, c.From, verdict)
		}
		if err := tw.Flush(); err != nil {
			return false, err
		}
		if len(misses) > 0 {
			fmt.Fprintln(w, "  when a deadline fires:")
			for _, m := range misses {
				fmt.Fprintln(w, m)
			}
			misses = nil
		}
		fmt.Fprintf(w, "  through Cloud NAT: %.1f GB per start of each pod (x%d)\n", float64(gs.Start.NATBytes)/1e9, gs.Replicas)
		for _, n := range gs.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		nat += gs.Start.NATBytes * gs.Replicas
	}
	if len(starts) > 0 {
		fmt.Fprintf(w, "\nthrough Cloud NAT in all: %.1f GB each time every pod starts (again after each preemption or host maintenance: a new podVM pulls and downloads again)\n", float64(nat)/1e9)
	}
	return ok, nil
}
