// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

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
func (c *Config) selectShape(cat *catalog.Catalog, spec provider.InstanceTypeSpec) (*catalog.Selection, error) {
	r := catalog.Request{InstanceType: spec.InstanceType, GPUs: spec.GPUs, VCPUs: spec.VCPUs, MemoryMiB: spec.Memory}
	named := r.InstanceType != ""
	if named {
		if err := c.nameAllowed(cat, r.InstanceType); err != nil {
			return nil, err
		}
	}
	lim := c.podCaps(cat)
	if err := lim.checkRequest(r, named); err != nil {
		return nil, err
	}
	prices := cat.Prices()
	sel := &catalog.Selection{Request: r}
	if named {
		p, err := cat.Named(r)
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
		sel.Named, sel.Candidates = true, []catalog.Candidate{cand}
		return sel, nil
	}
	// Every shape that holds the pod is put to the same filters, in this
	// order; the first that refuses it says why, and each filter keeps its
	// refusals for the error a pod gets when no shape passes them all. A
	// shape that passes is priced under the models it may be created with.
	notListed := filter{refuse: c.familyAllowed}
	disallowed := filter{refuse: c.fitAllowed}
	capped := filter{refuse: func(p catalog.Profile) string { return errText(lim.checkShape(p)) }}
	filters := []*filter{&notListed, &disallowed, &capped}
	var refused []string
	seen := map[string]bool{}
	add := func(p catalog.Profile) {
		key := fmt.Sprintf("%s/%s/%d", p.MachineType, p.GPUModel(), p.GPUs())
		if seen[key] {
			return
		}
		seen[key] = true
		for _, f := range filters {
			if why := f.refuse(p); why != "" {
				f.refusals = append(f.refusals, why)
				return
			}
		}
		cand, err := c.candidate(prices, p, spec.Image)
		if err != nil {
			refused = append(refused, err.Error())
			return
		}
		sel.Candidates = append(sel.Candidates, cand)
	}
	for _, p := range cat.Profiles() {
		if !p.Explicit && (p.GPUs() > 0) == (r.GPUs > 0) && p.GPUs() >= r.GPUs && p.VCPUs >= r.VCPUs && p.MemoryMiB >= r.MemoryMiB {
			add(p)
		}
	}
	for _, p := range catalog.Synthesize(r) {
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
		if len(disallowed.refusals) > 0 {
			return nil, fmt.Errorf("%s among the allowed shapes: %s; lower the pod's requests, or ask the admin to extend GCP_INSTANCE_TYPES (%q allows automatic shapes)", msg, disallowed.refusals[0], allowAuto)
		}
		if len(capped.refusals) > 0 {
			return nil, fmt.Errorf("%s within the per-pod limits: %s", msg, capped.refusals[0])
		}
		if r.GPUs > 0 {
			hint := ""
			if len(notListed.refusals) > 0 {
				hint = "; " + notListed.refusals[0]
			}
			return nil, fmt.Errorf("%s: %s; lower the pod's requests, or name a larger profile%s", msg, catalog.LargestAttached(), hint)
		}
		return nil, fmt.Errorf("%s; lower the pod's requests or add a larger profile in GCP_PROFILES_FILE", msg)
	}
	catalog.Rank(sel.Candidates, "")
	return sel, nil
}

// filter is one question every shape a pod could get is put to: refuse
// says why the configuration does not let the pod have it, or "".
type filter struct {
	refuse   func(catalog.Profile) string
	refusals []string
}

// errText is err's message, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// candidate prices a profile under the models it would be created with,
// or says why the configuration cannot create it.
func (c *Config) candidate(prices *catalog.PriceTable, p catalog.Profile, podImage string) (catalog.Candidate, error) {
	if err := catalog.CheckDiskType(fmt.Sprintf("profile %s", p.Name), p.MachineType, c.diskType(p)); err != nil {
		return catalog.Candidate{}, err
	}
	if _, err := c.imageFor(p, podImage); err != nil {
		return catalog.Candidate{}, err
	}
	models, err := c.modelsFor(p)
	if err != nil {
		return catalog.Candidate{}, err
	}
	cand := catalog.Candidate{Profile: p, Models: models, Prices: map[string]catalog.HourlyPrice{}}
	for _, m := range models {
		cand.Prices[m] = prices.Hourly(p.MachineType, p.Accelerator, int64(p.AcceleratorCount), m)
	}
	return cand, nil
}

// modelsFor are the provisioning models a profile is tried with, in
// order: its own or the provider's, then standard after Spot with
// GCP_SPOT_FALLBACK, each only if GCE sells the machine type so.
func (c *Config) modelsFor(p catalog.Profile) ([]string, error) {
	first := c.provisioningModel(p)
	sold, note := catalog.SoldModels(p.MachineType)
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
func (c *Config) checkCatalog(cat *catalog.Catalog) error {
	for i, p := range cat.Profiles() {
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
func (c *Config) diskType(p catalog.Profile) string {
	if p.DiskType != "" {
		return p.DiskType
	}
	return c.DiskType
}

// imageFor is the podVM image of a profile: the pod's image annotation,
// the profile's own, GCP_PROFILE_IMAGES, else PODVM_IMAGE_NAME, which a
// confidential profile may not use: it is the T4 image.
func (c *Config) imageFor(p catalog.Profile, podImage string) (string, error) {
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
func (c *Config) guestOSFeatures(p catalog.Profile) []string {
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
func (c *Config) Requirements(p catalog.Profile) []string {
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
	if catalog.NeedsNVMe(p.MachineType, p.ConfidentialType != "") {
		out = append(out, "boot disk on the NVMe interface (SCSI is refused for this VM)")
	}
	if catalog.NeedsGVNIC(p.MachineType) {
		out = append(out, "gVNIC network interface ("+strings.ToUpper(catalog.FamilyOf(p.MachineType))+" networks only through gVNIC)")
	}
	if _, note := catalog.SoldModels(p.MachineType); note != "" {
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
