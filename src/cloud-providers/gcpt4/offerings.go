// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
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

// autoProfileName is the profile name of a shape synthesized by fit (one that
// no catalog profile has); the podVM's caa-profile label carries it.
const autoProfileName = "auto"

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

// shapeWords is the shape in words: "custom-8-40960 + 1×nvidia-tesla-t4".
func (c Candidate) shapeWords() string { return describeProfile(c.Profile) }

func describeProfile(p Profile) string {
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

// firstChoice is the shape a create tries first.
func (s *Selection) firstChoice() Candidate { return s.Candidates[0] }

// Models are the provisioning models the chosen shape is tried with.
func (s *Selection) Models() []string { return s.firstChoice().Models }

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

// attempts are what a create tries, in order: for each of the chosen shape's
// models, the cheapest shapes under that model that are interchangeable
// with the choice (same GPUs, models, confidential type and image), at
// most maxShapesPerModel.
func (s *Selection) attempts() []Step {
	chosen := s.firstChoice()
	var steps []Step
	for _, m := range chosen.Models {
		var same []Candidate
		for _, c := range s.Candidates {
			if interchangeable(chosen, c) {
				same = append(same, c)
			}
		}
		rankCandidates(same, m)
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
	for _, st := range s.attempts() {
		price, known := st.Candidate.Price(st.Model)
		p := st.Candidate.Profile
		for _, z := range zones {
			out = append(out, Offering{Profile: p.Name, MachineType: p.MachineType, Accelerator: p.gpuModel, GPUs: p.gpus,
				ProvisioningModel: st.Model, Zone: z, PricePerHour: price, Priced: known})
		}
	}
	return out
}

// rankCandidates orders by price under model ("" for each candidate's
// first model), priced first; ties and unpriced shapes by fewer GPUs,
// vCPUs, then memory, then name.
func rankCandidates(cs []Candidate, model string) {
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

// selectShape decides a pod's shape in one pass: the admin's allow-lists and
// caps (allow.go: GCP_INSTANCE_TYPES, GCP_MAX_*_PER_POD; the image was
// admitted before, by admitImage, for either mode); a
// named profile or machine type if the pod names one; else
// every catalog profile that fits plus every N1 predefined and custom
// shape with 1, 2 or 4 T4s within GCE's per-count ceilings (for a GPU
// pod), or every predefined E2 and N1 type (for a CPU-only pod), ranked by
// price. A pod gets no GPU it does not declare unless the admin listed
// the shape by name, and no pod gets an explicit profile (such as h100-cc)
// unless it names it.
func (c *Config) selectShape(catalog *Catalog, spec provider.InstanceTypeSpec) (*Selection, error) {
	r := Request{InstanceType: spec.InstanceType, GPUs: spec.GPUs, VCPUs: spec.VCPUs, MemoryMiB: spec.Memory}
	named := r.InstanceType != ""
	if named {
		if err := c.nameAllowed(catalog, r.InstanceType); err != nil {
			return nil, err
		}
	}
	lim := c.podCaps(catalog)
	if err := lim.checkRequest(r, named); err != nil {
		return nil, err
	}
	prices := catalog.prices
	sel := &Selection{Request: r}
	if named {
		p, err := catalog.named(r)
		if err != nil {
			return nil, err
		}
		if err := c.checkDeclaredGPUs(p, r); err != nil {
			return nil, err
		}
		if err := lim.checkShape(p); err != nil {
			return nil, err
		}
		cand, err := c.candidate(prices, p, spec.Image)
		if err != nil {
			return nil, err
		}
		sel.Named, sel.Candidates = true, []Candidate{cand}
		return sel, nil
	}
	var refused, disallowed, capped, notListed []string
	seen := map[string]bool{}
	add := func(p Profile) {
		key := fmt.Sprintf("%s/%s/%d", p.MachineType, p.gpuModel, p.gpus)
		if seen[key] {
			return
		}
		seen[key] = true
		if why := c.familyAllowed(p); why != "" {
			notListed = append(notListed, why)
			return
		}
		if why := c.fitAllowed(p); why != "" {
			disallowed = append(disallowed, why)
			return
		}
		if err := lim.checkShape(p); err != nil {
			capped = append(capped, err.Error())
			return
		}
		cand, err := c.candidate(prices, p, spec.Image)
		if err != nil {
			refused = append(refused, err.Error())
			return
		}
		sel.Candidates = append(sel.Candidates, cand)
	}
	for _, p := range catalog.profiles {
		if !p.Explicit && (p.gpus > 0) == (r.GPUs > 0) && p.gpus >= r.GPUs && p.VCPUs >= r.VCPUs && p.MemoryMiB >= r.MemoryMiB {
			add(p)
		}
	}
	for _, p := range synthesize(r) {
		add(p)
	}
	if len(sel.Candidates) == 0 {
		kind := "CPU-only"
		if r.GPUs > 0 {
			kind = "GPU"
		}
		msg := fmt.Sprintf("no %s shape fits %d GPU(s), %d vCPU(s) and %d MiB (pod annotations default_gpus/default_vcpus/default_memory)", kind, r.GPUs, r.VCPUs, r.MemoryMiB)
		if len(refused) > 0 {
			return nil, fmt.Errorf("%s: %s", msg, refused[0])
		}
		if len(disallowed) > 0 {
			return nil, fmt.Errorf("%s among the allowed shapes: %s; lower the pod's requests, or ask the admin to extend GCP_INSTANCE_TYPES (%q allows automatic shapes)", msg, disallowed[0], allowAuto)
		}
		if len(capped) > 0 {
			return nil, fmt.Errorf("%s within the per-pod limits: %s", msg, capped[0])
		}
		if r.GPUs > 0 {
			hint := ""
			if len(notListed) > 0 {
				hint = "; " + notListed[0]
			}
			return nil, fmt.Errorf("%s: %s; lower the pod's requests, or name a larger profile%s", msg, largestAttached(), hint)
		}
		return nil, fmt.Errorf("%s; lower the pod's requests or add a larger profile in GCP_PROFILES_FILE", msg)
	}
	rankCandidates(sel.Candidates, "")
	return sel, nil
}

// synthesize lists the built-in catalogue's shapes that hold r: for GPU
// pods, per GPU family (gpufamilies.go), every attachable count's N1
// predefined shapes and smallest N1 custom shape within the per-count
// ceilings, and every machine type bundling enough GPUs, each above the
// per-GPU floor; for CPU-only pods the predefined E2 and N1 types. Which
// families fit may choose is the admin's (fitAllowed).
func synthesize(r Request) []Profile {
	var out []Profile
	if r.GPUs == 0 {
		for _, s := range append(predefinedE2(), predefinedN1()...) {
			if s.vcpus >= r.VCPUs && s.memoryMiB >= r.MemoryMiB {
				out = append(out, autoProfile(s, "", 0))
			}
		}
		return out
	}
	holds := func(s machineShape, n int64) bool {
		return s.vcpus >= max(r.VCPUs, gpuFloorVCPUs*n) && s.memoryMiB >= max(r.MemoryMiB, gpuFloorMemoryMiB*n)
	}
	for i := range gpuFamilies {
		f := &gpuFamilies[i]
		for _, lim := range f.AttachLimits {
			n := int64(lim.Count)
			if n < r.GPUs {
				continue
			}
			for _, s := range seriesShapes(f.AttachSeries) {
				if holds(s, n) && s.vcpus <= lim.MaxVCPUs && s.memoryMiB <= lim.MaxMemoryMiB {
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
func seriesShapes(name string) []machineShape {
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
func autoProfile(s machineShape, accelerator string, count int32) Profile {
	p := Profile{Name: autoProfileName, MachineType: s.name, VCPUs: s.vcpus, MemoryMiB: s.memoryMiB}
	switch {
	case count > 0:
		p.Accelerator, p.AcceleratorCount = accelerator, count
		p.gpus, p.gpuModel = int64(count), accelerator
	case s.bundledCount > 0:
		p.gpus, p.gpuModel = int64(s.bundledCount), s.bundledAccelerator
	}
	return p
}

// largestAttached says, for a GPU request nothing holds, what the largest
// automatic attached shape is.
func largestAttached() string {
	f := defaultFamily()
	if f.AttachSeries == "" {
		return "no automatic shape holds it"
	}
	lim := f.maxAttach()
	return fmt.Sprintf("one %s VM takes at most %d %s (%d vCPUs, %d GB)", strings.ToUpper(f.AttachSeries), lim.Count, f.Accelerator, lim.MaxVCPUs, lim.MaxMemoryMiB/1024)
}

// named resolves an explicit instance type: a profile name, or a machine
// type, to which the requested T4s are attached.
func (c *Catalog) named(r Request) (Profile, error) {
	p, ok := c.Lookup(r.InstanceType)
	if !ok {
		p = Profile{Name: "custom", MachineType: r.InstanceType}
		if r.GPUs > 0 {
			// A type of no attaching series gets the default GPU, which
			// normalize then refuses with the series it needs.
			f, attaches := attachedFamilyFor(r.InstanceType)
			if !attaches {
				f = defaultFamily()
			}
			if s, known := lookupShape(r.InstanceType); known && s.bundledAccelerator == "" {
				count, fits := f.nextCount(r.GPUs)
				if !fits {
					return Profile{}, fmt.Errorf("machine_type annotation %q with %d GPUs: GCE attaches at most %d %s to one VM", r.InstanceType, r.GPUs, f.maxAttach().Count, f.Accelerator)
				}
				p.Accelerator, p.AcceleratorCount = f.Accelerator, count
			}
		}
		if err := p.normalize("machine_type annotation"); err != nil {
			return Profile{}, err
		}
	}
	if p.gpus < r.GPUs {
		return Profile{}, fmt.Errorf("instance type %q has %d GPU(s) but the pod requests %d; name a larger profile or drop the machine_type annotation", r.InstanceType, p.gpus, r.GPUs)
	}
	return p, nil
}

// candidate prices a profile under the models it would be created with,
// or says why the configuration cannot create it.
func (c *Config) candidate(prices *PriceTable, p Profile, podImage string) (Candidate, error) {
	if err := checkDiskType(fmt.Sprintf("profile %s", p.Name), p.MachineType, c.diskType(p)); err != nil {
		return Candidate{}, err
	}
	if _, err := c.imageFor(p, podImage); err != nil {
		return Candidate{}, err
	}
	models, err := c.modelsFor(p)
	if err != nil {
		return Candidate{}, err
	}
	cand := Candidate{Profile: p, Models: models, Prices: map[string]HourlyPrice{}}
	for _, m := range models {
		cand.Prices[m] = prices.Hourly(p.MachineType, p.Accelerator, int64(p.AcceleratorCount), m)
	}
	return cand, nil
}

// modelsFor are the provisioning models a profile is tried with, in
// order: its own or the provider's, then standard after Spot with
// GCP_SPOT_FALLBACK, each only if GCE sells the machine type so.
func (c *Config) modelsFor(p Profile) ([]string, error) {
	first := c.provisioningModel(p)
	sold, note := soldModels(p.MachineType)
	if !slices.Contains(sold, first) {
		return nil, fmt.Errorf("profile %s: provisioning model %s: %s; set provisioningModel: %s in the profile (or GCP_PROVISIONING_MODEL=%s)", p.Name, first, note, sold[0], sold[0])
	}
	models := []string{first}
	if first == setting.ProvisioningSpot && c.SpotFallback && slices.Contains(sold, setting.ProvisioningStandard) {
		models = append(models, setting.ProvisioningStandard)
	}
	return models, nil
}

// checkCatalog refuses, at start-up, profiles this configuration cannot
// create whatever the pod: a provisioning model GCE does not sell for the
// machine type (GCP_PROVISIONING_MODEL=STANDARD with an a3-highgpu-1g
// profile that names no model). Disk types and images are checked when a
// pod selects a profile, so an unused profile does not stop the adaptor.
func (c *Config) checkCatalog(catalog *Catalog) error {
	for i, p := range catalog.profiles {
		if _, err := c.modelsFor(p); err != nil {
			return fmt.Errorf("profiles[%d]: %w", i, err)
		}
		if p.CacheImage != "" {
			if _, err := c.parseImageFor(fmt.Sprintf("profiles[%d].cacheImage (profile %s)", i, p.Name), p.CacheImage); err != nil {
				return err
			}
		}
		// Named by the profile's name: i counts the built-in profiles too.
		if err := checkCacheVerity(fmt.Sprintf("profile %s's cacheImage", p.Name), p.CacheImage,
			fmt.Sprintf("profile %s's cacheVerity", p.Name), p.CacheVerity); err != nil {
			return err
		}
	}
	return nil
}

// diskType is the profile's boot disk type, else GCP_DISK_TYPE.
func (c *Config) diskType(p Profile) string {
	if p.DiskType != "" {
		return p.DiskType
	}
	return c.DiskType
}

// imageFor is the podVM image of a profile: the pod's image annotation,
// the profile's own, GCP_PROFILE_IMAGES, else PODVM_IMAGE_NAME, which a
// confidential profile may not use: it is the T4 image.
func (c *Config) imageFor(p Profile, podImage string) (string, error) {
	switch {
	case podImage != "":
		return podImage, nil
	case p.Image != "":
		return p.Image, nil
	case c.ProfileImages[p.Name] != "":
		return c.ProfileImages[p.Name], nil
	case p.ConfidentialType != "":
		// PODVM_IMAGE_NAME is the T4 podVM image, never a confidential one.
		return "", fmt.Errorf("profile %s (%s Confidential VM) needs an image with guest OS features %s; set GCP_PROFILE_IMAGES=%s=IMAGE, or image: in the profile",
			p.Name, p.ConfidentialType, strings.Join(c.guestOSFeatures(p), ", "), p.Name)
	}
	return c.ImageName, nil
}

// guestOSFeatures are the image features GCE requires for a profile's VM:
// UEFI_COMPATIBLE for every Confidential VM, TDX_CAPABLE / SEV_CAPABLE /
// SEV_SNP_CAPABLE for its technology
// (confidential-computing/confidential-vm/docs/create-custom-confidential-vm-images),
// GVNIC when its NIC is gVNIC (compute/docs/networking/using-gvnic).
func (c *Config) guestOSFeatures(p Profile) []string {
	var fs []string
	switch p.ConfidentialType {
	case "TDX":
		fs = append(fs, "UEFI_COMPATIBLE", "TDX_CAPABLE")
	case "SEV":
		fs = append(fs, "UEFI_COMPATIBLE", "SEV_CAPABLE")
	case "SEV_SNP":
		fs = append(fs, "UEFI_COMPATIBLE", "SEV_SNP_CAPABLE")
	}
	if c.nicType(p) == setting.NICTypeGVNIC {
		fs = append(fs, "GVNIC")
	}
	return fs
}

// Requirements are what GCE demands of a profile beyond its shape, as a
// platform engineer must prepare them (image features, disk interface,
// NIC, provisioning), in words for `gcp-t4 plan`.
func (c *Config) Requirements(p Profile) []string {
	var out []string
	if fs := c.guestOSFeatures(p); len(fs) > 0 {
		img, err := c.imageFor(p, "")
		if err != nil {
			img = "none configured: set GCP_PROFILE_IMAGES=" + p.Name + "=IMAGE"
		}
		line := fmt.Sprintf("image with guest OS features %s (image: %s)", strings.Join(fs, ", "), img)
		if p.ConfidentialType != "" {
			line += fmt.Sprintf("; the T4 podVM image is not a %s image", p.ConfidentialType)
		}
		out = append(out, line)
	}
	if needsNVMe(p.MachineType, p.ConfidentialType != "") {
		out = append(out, "boot disk on the NVMe interface (SCSI is refused for this VM)")
	}
	if needsGVNIC(p.MachineType) {
		out = append(out, "gVNIC network interface ("+strings.ToUpper(familyOf(p.MachineType))+" networks only through gVNIC)")
	}
	if _, note := soldModels(p.MachineType); note != "" {
		out = append(out, note)
	}
	if p.MinCPUPlatform != "" {
		out = append(out, "minimum CPU platform "+p.MinCPUPlatform)
	}
	return out
}

// offering is one thing GCE can be out of: a shape (machine type and
// attached accelerators) under a provisioning model in a zone. Spot and
// standard capacity run out independently, and so do one and four T4s.
type offering struct {
	model, machineType, accelerator string
	count                           int64
	zone                            string
}

// offeringCache remembers offerings that just stocked out, so that the
// pods after the first spend no API call on them until the entry expires.
// Stockouts last minutes to hours; a short TTL re-probes soon enough.
type offeringCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	expires map[offering]time.Time
}

func newOfferingCache(ttl time.Duration, now func() time.Time) *offeringCache {
	return &offeringCache{ttl: ttl, now: now, expires: map[offering]time.Time{}}
}

// markUnavailable records a stockout; a repeat extends the entry.
func (c *offeringCache) markUnavailable(o offering) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expires[o] = c.now().Add(c.ttl)
}

// unavailableUntil reports whether o is still marked, and until when.
func (c *offeringCache) unavailableUntil(o offering) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.expires[o]
	if !ok {
		return time.Time{}, false
	}
	if !c.now().Before(until) {
		delete(c.expires, o)
		return time.Time{}, false
	}
	return until, true
}
