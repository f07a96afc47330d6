// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"slices"
)

// GPUUse is a GPU family a configuration may create podVMs with, and how:
// what ConfigVerifier and `gcp-t4 preflight` check zones and quota for.
type GPUUse struct {
	Family GPUFamily
	// Automatic is set when fit may choose the family for any GPU pod: a
	// configured zone without it, or too little quota, fails the checks.
	// Otherwise only pods naming a shape that has it get it: such a zone is
	// reported, not fatal (the adaptor must not refuse T4 pods because an
	// explicit H100 profile exists).
	Automatic bool
	// MaxGPUs is the most GPUs one podVM of the family takes.
	MaxGPUs int64
	// Via names what brings the family in: profiles, GCP_INSTANCE_TYPES.
	Via []string
}

// GPUUses lists, in catalogue order, the GPU families this configuration
// may create: those of its profiles (attached or bundled) a pod may get
// and that have an image,
// the automatic families fit synthesizes shapes of, and the families and
// GPU machine types GCP_INSTANCE_TYPES lists. A family it cannot create
// is absent.
func (c *Config) GPUUses(catalog *Catalog) []GPUUse {
	uses := map[string]*GPUUse{}
	note := func(acc string, automatic bool, gpus int64, via string) {
		f, ok := familyByAccelerator(acc)
		if !ok || gpus <= 0 {
			return
		}
		u := uses[acc]
		if u == nil {
			u = &GPUUse{Family: *f}
			uses[acc] = u
		}
		u.Automatic = u.Automatic || automatic
		u.MaxGPUs = max(u.MaxGPUs, gpus)
		if !slices.Contains(u.Via, via) {
			u.Via = append(u.Via, via)
		}
	}
	lim := c.podCaps(catalog)
	for _, p := range catalog.profiles {
		// A profile without a usable image (h100-cc until one is
		// configured) creates nothing, so its GPU needs no zone or quota.
		if _, err := c.imageFor(p, ""); p.gpuModel == "" || err != nil {
			continue
		}
		switch {
		case !p.Explicit && c.fitAllowed(p) == "":
			note(p.gpuModel, true, p.gpus, "profile "+p.Name)
		case c.nameAllowed(catalog, p.Name) == nil:
			note(p.gpuModel, false, p.gpus, "profile "+p.Name)
		}
	}
	auto := len(c.InstanceTypes) == 0 || slices.Contains(c.InstanceTypes, allowAuto)
	for _, f := range gpuFamilies {
		listed := slices.Contains(c.InstanceTypes, f.Accelerator)
		if (!f.Automatic || !auto) && !listed {
			continue
		}
		// The largest podVM fit may make of it, within the per-pod GPU limit.
		most := int64(0)
		for _, l := range f.AttachLimits {
			most = max(most, int64(l.Count))
		}
		for _, b := range f.Bundled {
			most = max(most, int64(b.GPUs))
		}
		via := "automatic shapes"
		if listed {
			via = "GCP_INSTANCE_TYPES " + f.Accelerator
		}
		note(f.Accelerator, true, min(most, lim.gpus), via)
	}
	for _, name := range c.InstanceTypes {
		if s, ok := bundledShape(name); ok {
			note(s.bundledAccelerator, false, int64(s.bundledCount), "GCP_INSTANCE_TYPES "+name)
		}
	}
	var out []GPUUse
	for _, f := range gpuFamilies {
		if u, ok := uses[f.Accelerator]; ok {
			out = append(out, *u)
		}
	}
	return out
}

// GPUFamilies is the GPU catalogue, in its order.
func GPUFamilies() []GPUFamily { return slices.Clone(gpuFamilies) }

// LookupGPUFamily finds a catalogue row by short name (t4) or GCE
// accelerator type (nvidia-tesla-t4).
func LookupGPUFamily(name string) (GPUFamily, bool) {
	for _, f := range gpuFamilies {
		if f.Name == name || f.Accelerator == name {
			return f, true
		}
	}
	return GPUFamily{}, false
}

// ShapeOf is a machine type's vCPUs and memory as the provider knows them
// (predefined N1/E2, N1 custom, and the GPU catalogue's bundled types).
func ShapeOf(machineType string) (vcpus, memoryMiB int64, ok bool) {
	s, ok := lookupShape(machineType)
	return s.vcpus, s.memoryMiB, ok
}
