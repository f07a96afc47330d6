// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"fmt"
	"sort"
	"strings"
)

// Request is what a pod asks for, in the units the adaptor passes.
type Request struct {
	InstanceType string
	GPUs         int64
	VCPUs        int64
	MemoryMiB    int64
}

// A GPU podVM chosen by fit gets at least this much per attached GPU: the
// shape of the t4-N profiles, four vCPUs and 15 GiB per T4, so that the
// driver, the guest's image pulls and a data loader have room. A pod that
// asks for more gets more; one that names a profile or machine type gets
// exactly that.
const (
	gpuFloorVCPUs     = 4
	gpuFloorMemoryMiB = 15 * 1024
)

// AutoProfileName is the profile name of a shape synthesized by fit (one that
// no catalog profile has); the podVM's caa-profile label carries it.
const AutoProfileName = "auto"

// maxShapesPerModel bounds how many shapes a create tries under one
// provisioning model, each in every zone. One: a T4 stockout is the GPU's
// (GCE's stockout names the attachment, nvidia-tesla-t4:N), which every N1
// host shape in the zone shares, so a second shape would double the calls
// of a stockout walk for little chance; the zones and models are the
// fallbacks, and `gcp-t4 plan` shows the next-cheapest shape.
const maxShapesPerModel = 1

// Candidate is a shape that holds the request, with its price under each
// provisioning model it may be created with.
type Candidate struct {
	Profile Profile
	// Models are the provisioning models in the order a create tries them.
	Models []string
	// Prices are keyed by provisioning model.
	Prices map[string]HourlyPrice
}

// Price is the candidate's price under a model, and whether it is known.
func (c Candidate) Price(model string) (float64, bool) {
	p, ok := c.Prices[model]
	return p.Total, ok && p.Known
}

// ShapeWords is the shape in words: "custom-8-40960 + 1×nvidia-tesla-t4".
func (c Candidate) ShapeWords() string { return Describe(c.Profile) }

// Describe is a profile's shape in words, its GPUs resolved.
func Describe(p Profile) string {
	s := p.MachineType
	if p.gpus > 0 {
		s += fmt.Sprintf(" + %d×%s", p.gpus, p.gpuModel)
	}
	return s
}

// Selection is a request's one-pass answer: every shape that holds it,
// cheapest first under the first provisioning model. Candidates[0] is the
// choice; a create walks Steps over the zones.
type Selection struct {
	Request Request
	// Named is set when the pod named a profile or machine type, which
	// then is the only candidate.
	Named      bool
	Candidates []Candidate
}

// FirstChoice is the shape a create tries first.
func (s *Selection) FirstChoice() Candidate { return s.Candidates[0] }

// Models are the provisioning models the chosen shape is tried with.
func (s *Selection) Models() []string { return s.FirstChoice().Models }

// Alternative is the next-cheapest candidate, if any.
func (s *Selection) Alternative() (Candidate, bool) {
	if len(s.Candidates) < 2 {
		return Candidate{}, false
	}
	return s.Candidates[1], true
}

// Step is one (shape, model) a create tries in every zone.
type Step struct {
	Candidate Candidate
	Model     string
}

// Attempts are what a create tries, in order: for each of the chosen shape's
// models, the cheapest shapes under that model that are interchangeable
// with the choice (same GPUs, models, confidential type and image), at
// most maxShapesPerModel.
func (s *Selection) Attempts() []Step {
	chosen := s.FirstChoice()
	var steps []Step
	for _, m := range chosen.Models {
		var same []Candidate
		for _, c := range s.Candidates {
			if interchangeable(chosen, c) {
				same = append(same, c)
			}
		}
		Rank(same, m)
		for i, c := range same {
			if i == maxShapesPerModel {
				break
			}
			steps = append(steps, Step{Candidate: c, Model: m})
		}
	}
	return steps
}

func interchangeable(a, b Candidate) bool {
	pa, pb := a.Profile, b.Profile
	return pa.gpus == pb.gpus && pa.gpuModel == pb.gpuModel && pa.ConfidentialType == pb.ConfidentialType &&
		pa.Image == pb.Image && strings.Join(a.Models, ",") == strings.Join(b.Models, ",")
}

// Offering is one thing a create can try: a shape under a provisioning
// model in a zone, at a price. Karpenter's word; GCE stocks out per
// offering.
type Offering struct {
	Profile           string  `json:"profile"`
	MachineType       string  `json:"machineType"`
	Accelerator       string  `json:"accelerator,omitempty"`
	GPUs              int64   `json:"gpus"`
	ProvisioningModel string  `json:"provisioningModel"`
	Zone              string  `json:"zone"`
	PricePerHour      float64 `json:"pricePerHour"`
	Priced            bool    `json:"priced"`
}

// Offerings lists the steps over the zones, in the order a create walks
// them (before GCE's zonesAvailable hints reorder the zones).
func (s *Selection) Offerings(zones []string) []Offering {
	var out []Offering
	for _, st := range s.Attempts() {
		price, known := st.Candidate.Price(st.Model)
		p := st.Candidate.Profile
		for _, z := range zones {
			out = append(out, Offering{Profile: p.Name, MachineType: p.MachineType, Accelerator: p.gpuModel, GPUs: p.gpus,
				ProvisioningModel: st.Model, Zone: z, PricePerHour: price, Priced: known})
		}
	}
	return out
}

// Rank orders by price under model ("" for each candidate's
// first model), priced first; ties and unpriced shapes by fewer GPUs,
// vCPUs, then memory, then name.
func Rank(cs []Candidate, model string) {
	price := func(c Candidate) (float64, bool) {
		if model == "" {
			return c.Price(c.Models[0])
		}
		return c.Price(model)
	}
	sort.SliceStable(cs, func(i, j int) bool {
		pi, ki := price(cs[i])
		pj, kj := price(cs[j])
		if ki != kj {
			return ki
		}
		if ki && pi != pj {
			return pi < pj
		}
		a, b := cs[i].Profile, cs[j].Profile
		if a.gpus != b.gpus {
			return a.gpus < b.gpus
		}
		if a.VCPUs != b.VCPUs {
			return a.VCPUs < b.VCPUs
		}
		if a.MemoryMiB != b.MemoryMiB {
			return a.MemoryMiB < b.MemoryMiB
		}
		return a.MachineType < b.MachineType
	})
}

// Synthesize lists the built-in catalogue's shapes that hold r: for GPU
// pods, per GPU family (gpufamilies.go), every attachable count's N1
// predefined shapes and smallest N1 custom shape within the per-count
// ceilings, and every machine type bundling enough GPUs, each above the
// per-GPU floor; for CPU-only pods the predefined E2 and N1 types. Which
// families fit may choose is the admin's (the provider's allow-lists).
func Synthesize(r Request) []Profile {
	var out []Profile
	if r.GPUs == 0 {
		for _, s := range append(predefinedE2(), predefinedN1()...) {
			if s.VCPUs >= r.VCPUs && s.MemoryMiB >= r.MemoryMiB {
				out = append(out, autoProfile(s, "", 0))
			}
		}
		return out
	}
	holds := func(s Shape, n int64) bool {
		return s.VCPUs >= max(r.VCPUs, gpuFloorVCPUs*n) && s.MemoryMiB >= max(r.MemoryMiB, gpuFloorMemoryMiB*n)
	}
	for i := range gpuFamilies {
		f := &gpuFamilies[i]
		for _, lim := range f.AttachLimits {
			n := int64(lim.Count)
			if n < r.GPUs {
				continue
			}
			for _, s := range seriesShapes(f.AttachSeries) {
				if holds(s, n) && s.VCPUs <= lim.MaxVCPUs && s.MemoryMiB <= lim.MaxMemoryMiB {
					out = append(out, autoProfile(s, f.Accelerator, lim.Count))
				}
			}
			if f.AttachSeries == "n1" {
				if s, ok := smallestCustomN1(max(r.VCPUs, gpuFloorVCPUs*n), max(r.MemoryMiB, gpuFloorMemoryMiB*n), lim.MaxVCPUs, lim.MaxMemoryMiB); ok {
					out = append(out, autoProfile(s, f.Accelerator, lim.Count))
				}
			}
		}
		for _, b := range f.Bundled {
			if s := b.shape(f); int64(b.GPUs) >= r.GPUs && holds(s, int64(b.GPUs)) {
				out = append(out, autoProfile(s, "", 0))
			}
		}
	}
	return out
}

// seriesShapes are the predefined shapes of a machine series the provider
// synthesizes from.
func seriesShapes(name string) []Shape {
	switch name {
	case "n1":
		return predefinedN1()
	case "e2":
		return predefinedE2()
	}
	return nil
}

// autoProfile is a synthesized shape with count attached accelerators, or
// with the GPUs its machine type bundles.
func autoProfile(s Shape, accelerator string, count int32) Profile {
	p := Profile{Name: AutoProfileName, MachineType: s.Name, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB}
	switch {
	case count > 0:
		p.Accelerator, p.AcceleratorCount = accelerator, count
		p.setGPUs(int64(count), accelerator)
	case s.BundledCount > 0:
		p.setGPUs(int64(s.BundledCount), s.BundledAccelerator)
	}
	return p
}

// LargestAttached says, for a GPU request nothing holds, what the largest
// automatic attached shape is.
func LargestAttached() string {
	f := DefaultFamily()
	if f.AttachSeries == "" {
		return "no automatic shape holds it"
	}
	lim := f.MaxAttach()
	return fmt.Sprintf("one %s VM takes at most %d %s (%d vCPUs, %d GB)", strings.ToUpper(f.AttachSeries), lim.Count, f.Accelerator, lim.MaxVCPUs, lim.MaxMemoryMiB/1024)
}

// Named resolves an explicit instance type: a profile name, or a machine
// type, to which the requested T4s are attached.
func (c *Catalog) Named(r Request) (Profile, error) {
	p, ok := c.Lookup(r.InstanceType)
	if !ok {
		p = Profile{Name: "custom", MachineType: r.InstanceType}
		if r.GPUs > 0 {
			// A type of no attaching series gets the default GPU, which
			// normalize then refuses with the series it needs.
			f, attaches := AttachedFamilyFor(r.InstanceType)
			if !attaches {
				f = DefaultFamily()
			}
			if s, known := LookupShape(r.InstanceType); known && s.BundledAccelerator == "" {
				count, fits := f.NextCount(r.GPUs)
				if !fits {
					return Profile{}, fmt.Errorf("machine_type annotation %q with %d GPUs: GCE attaches at most %d %s to one VM", r.InstanceType, r.GPUs, f.MaxAttach().Count, f.Accelerator)
				}
				p.Accelerator, p.AcceleratorCount = f.Accelerator, count
			}
		}
		if err := p.Normalize("machine_type annotation"); err != nil {
			return Profile{}, err
		}
	}
	if p.gpus < r.GPUs {
		return Profile{}, fmt.Errorf("instance type %q has %d GPU(s) but the pod requests %d; name a larger profile or drop the machine_type annotation", r.InstanceType, p.gpus, r.GPUs)
	}
	return p, nil
}
