package startup

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Inputs are a start's figures: the catalogue's, with the user's overrides
// applied by the caller.
type Inputs struct {
	// Sizes in bytes, by the names phases use ("image", "weights"); 0
	// when there is nothing to move, absent when the size is unknown.
	Sizes map[string]int64
	// Rates in 10^6 bytes a second after efficiency, by rate id.
	Rates map[string]float64
	// Fixed parts of phases, by phase id.
	Fixed map[string]time.Duration
	// Settings: the value in effect for each deadline, by deadline id
	// (before its Factor).
	Settings map[string]time.Duration
	// SetFrom says where each setting came from ("kata default", "gcp-t4
	// install", "annotation", "--flag").
	SetFrom map[string]string
	// OffNAT names sizes that do not go through Cloud NAT this time (a
	// model mirrored in Cloud Storage, read through Private Google Access).
	OffNAT map[string]bool
	// Routes: the route (Phase.Routes) a phase's bytes take this time, by
	// phase id; none: the phase's own rates. A route's bytes do not go
	// through Cloud NAT.
	Routes map[string]string
	// NATBytes: what a phase moves through Cloud NAT, by phase id, where
	// that is not its own bytes (a phase modelling the longest of several
	// pulls, some from the cache disk and some from their registries).
	NATBytes map[string]int64
	// PhaseSizes: a phase's size where it is not its size's (Sizes): the
	// weights read where they lie (RouteLocal) are not downloaded, though
	// the engine still loads all of them. By phase id.
	PhaseSizes map[string]int64
	// Kind is the workload's kind: deadlines that do not apply to it
	// (Deadline.Kinds) are not checked. "": every deadline.
	Kind string
}

// Clone is a copy of in whose maps can be changed on their own.
func (in Inputs) Clone() Inputs {
	return Inputs{Sizes: maps.Clone(in.Sizes), Rates: maps.Clone(in.Rates), Fixed: maps.Clone(in.Fixed),
		Settings: maps.Clone(in.Settings), SetFrom: maps.Clone(in.SetFrom), OffNAT: maps.Clone(in.OffNAT),
		Routes: maps.Clone(in.Routes), NATBytes: maps.Clone(in.NATBytes), PhaseSizes: maps.Clone(in.PhaseSizes), Kind: in.Kind}
}

// Defaults are the catalogue's own figures and each deadline's value once
// gcp-t4 install has run (its install value, else the owner's default).
func (c *Catalog) Defaults() Inputs {
	in := Inputs{Sizes: map[string]int64{}, Rates: map[string]float64{}, Fixed: map[string]time.Duration{},
		Settings: map[string]time.Duration{}, SetFrom: map[string]string{}, OffNAT: map[string]bool{},
		Routes: map[string]string{}, NATBytes: map[string]int64{}, PhaseSizes: map[string]int64{}}
	for _, r := range c.Rates {
		in.Rates[r.ID] = r.Effective()
	}
	for _, p := range c.Phases {
		if p.Fixed != nil {
			in.Fixed[p.ID] = p.Fixed.Duration
		}
	}
	for _, d := range c.Deadlines {
		in.Settings[d.ID], in.SetFrom[d.ID] = d.Default.Duration, d.Owner+" default"
		if d.Install != nil {
			in.Settings[d.ID], in.SetFrom[d.ID] = d.Install.Duration, "gcp-t4 install"
		}
	}
	return in
}

// PhaseTime is one phase of a modelled start. Its Rate is the rates it
// moved at this time: its route's, where it took one.
type PhaseTime struct {
	Phase
	Took  Duration `json:"took"`
	Bytes int64    `json:"bytes,omitempty"`
	// Route is the route its bytes took (Phase.Routes), if any; Pace the
	// rate that set its pace.
	Route string `json:"route,omitempty"`
	Pace  string `json:"pace,omitempty"`
	// NATBytes is what it moved through Cloud NAT.
	NATBytes int64 `json:"natBytes,omitempty"`
	// Figure says what it was computed from, in words.
	Figure string `json:"figure"`
	// Unknown: its size is unknown, so Took counts nothing of it.
	Unknown bool `json:"unknown,omitempty"`
}

// Check is one deadline against the phases it bounds.
type Check struct {
	Deadline
	// Need is the time of the phases it bounds; Have the deadline in effect
	// (0: none).
	Need Duration `json:"need"`
	Have Duration `json:"have"`
	// From says where Have came from.
	From string `json:"setFrom"`
	Met  bool   `json:"met"`
	// Unknown: a phase it bounds has an unknown size, so Need is a floor
	// and Met is false: whether it is met is not known.
	Unknown bool `json:"unknown,omitempty"`
	// Fix is what to do about it when not met, in words; the caller
	// writes it (it knows the flags and the manifest).
	Fix string `json:"fix,omitempty"`
}

// Start is a modelled start of one pod.
type Start struct {
	Phases []PhaseTime `json:"phases"`
	Total  Duration    `json:"total"`
	Checks []Check     `json:"deadlines"`
	// NATBytes moves through Cloud NAT on every start of the pod.
	NATBytes int64 `json:"natBytes"`
}

// Model runs the phases in order (a pod's start is sequential) and checks
// every deadline against the phases it covers.
func (c *Catalog) Model(in Inputs) (Start, error) {
	var s Start
	took := map[string]time.Duration{}
	unknown := map[string]bool{}
	for _, p := range c.Phases {
		d, pt, err := phaseTime(p, in)
		if err != nil {
			return Start{}, err
		}
		if n, ok := in.NATBytes[p.ID]; ok && p.NAT {
			pt.NATBytes = n
		} else if p.NAT && !in.OffNAT[p.Size] && pt.Route == "" {
			pt.NATBytes = pt.Bytes
		}
		s.NATBytes += pt.NATBytes
		took[p.ID], unknown[p.ID] = d, pt.Unknown
		s.Total.Duration += d
		s.Phases = append(s.Phases, pt)
	}
	ids := make([]string, len(c.Phases))
	for i, p := range c.Phases {
		ids[i] = p.ID
	}
	for _, d := range c.Deadlines {
		if !d.Applies(in.Kind) {
			continue
		}
		from, to := slices.Index(ids, d.From), slices.Index(ids, d.To)
		var need time.Duration
		var unsure bool
		for _, id := range ids[from : to+1] {
			need += took[id]
			unsure = unsure || unknown[id]
		}
		have, ok := in.Settings[d.ID]
		if !ok {
			have = d.Default.Duration
		}
		have = d.Scale(have)
		// 0: the owner sets no deadline (KubeRay without the annotation).
		met := have == 0 || need <= have
		// A floor over the deadline is not met; under it, not known.
		s.Checks = append(s.Checks, Check{Deadline: d, Need: Duration{need}, Have: Duration{have}, From: in.SetFrom[d.ID],
			Met: met && (!unsure || have == 0), Unknown: unsure && met && have != 0})
	}
	return s, nil
}

// phaseTime is one phase's time: its fixed part plus its bytes at the
// slowest of its rates. A phase that moves bytes has nothing to do when
// there are none (no model: no download and no engine load).
func phaseTime(p Phase, in Inputs) (time.Duration, PhaseTime, error) {
	pt := PhaseTime{Phase: p}
	var took time.Duration
	var parts []string
	if p.Size != "" {
		size, ok := in.Sizes[p.Size]
		if ps, set := in.PhaseSizes[p.ID]; set {
			size, ok = ps, true
		}
		if !ok {
			// Counted as nothing, and said so: the caller's notes name the
			// flag that gives it.
			pt.Figure = "unknown " + p.Size + " size: not counted"
			pt.Unknown = true
			return 0, pt, nil
		}
		if size == 0 {
			// A route may move nothing: an image the cache disk holds
			// unpacked is mounted in place (RouteStore), weights on a disk
			// are read where they are (RouteLocal).
			pt.Route = in.Routes[p.ID]
			pt.Figure = "none (no " + p.Size + ")"
			if pt.Route != "" {
				pt.Figure = "nothing moved (via " + pt.Route + ")"
			}
			return 0, pt, nil
		}
		route := in.Routes[p.ID]
		ids, err := p.Rates(route)
		if err != nil {
			return 0, pt, err
		}
		// Several rates: the stages overlap (a layer unpacks while the
		// next downloads), so the slowest sets the pace.
		rate, pace, err := Slowest(ids, in.Rates)
		if err != nil {
			return 0, pt, fmt.Errorf("phase %s: %w", p.ID, err)
		}
		took = time.Duration(float64(size) / (rate * 1e6) * float64(time.Second)).Round(time.Second)
		pt.Bytes, pt.Rate, pt.Route, pt.Pace = size, ids, route, pace
		fig := fmt.Sprintf("%.1f GB at %.3g MB/s", float64(size)/1e9, rate)
		if strings.Contains(ids, ",") {
			fig += " (" + pace + ")"
		}
		if route != "" {
			fig += " via " + route
		}
		parts = append(parts, fig)
	}
	if p.Fixed != nil {
		f, ok := in.Fixed[p.ID]
		if !ok {
			f = p.Fixed.Duration
		}
		took += f
		parts = append([]string{f.String()}, parts...)
	}
	pt.Took = Duration{took}
	pt.Figure = strings.Join(parts, " + ")
	return took, pt, nil
}
