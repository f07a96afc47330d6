// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"slices"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// GPUUses lists, in catalogue order, the GPU families this configuration
// may create: those of its profiles (attached or bundled) a pod may get
// and that have an image,
// the automatic families fit synthesizes shapes of, and the families and
// GPU machine types GCP_INSTANCE_TYPES lists. A family it cannot create
// is absent.
func (c *Config) GPUUses(cat *catalog.Catalog) []catalog.GPUUse {
	uses := map[string]*catalog.GPUUse{}
	note := func(acc string, automatic bool, gpus int64, via string) {
		f, ok := catalog.FamilyByAccelerator(acc)
		if !ok || gpus <= 0 {
			return
		}
		u := uses[acc]
		if u == nil {
			u = &catalog.GPUUse{Family: *f}
			uses[acc] = u
		}
		u.Automatic = u.Automatic || automatic
		u.MaxGPUs = max(u.MaxGPUs, gpus)
		if !slices.Contains(u.Via, via) {
			u.Via = append(u.Via, via)
		}
	}
	lim := c.podCaps(cat)
	for _, p := range cat.Profiles() {
		// A profile without a usable image (h100-cc until one is
		// configured) creates nothing, so its GPU needs no zone or quota.
		if _, err := c.imageFor(p, ""); p.GPUModel() == "" || err != nil {
			continue
		}
		switch {
		case !p.Explicit && c.fitAllowed(p) == "":
			note(p.GPUModel(), true, p.GPUs(), "profile "+p.Name)
		case c.nameAllowed(cat, p.Name) == nil:
			note(p.GPUModel(), false, p.GPUs(), "profile "+p.Name)
		}
	}
	auto := len(c.InstanceTypes) == 0 || slices.Contains(c.InstanceTypes, allowAuto)
	for _, f := range catalog.GPUFamilies() {
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
		if s, ok := catalog.LookupBundled(name); ok {
			note(s.BundledAccelerator, false, int64(s.BundledCount), "GCP_INSTANCE_TYPES "+name)
		}
	}
	var out []catalog.GPUUse
	for _, f := range catalog.GPUFamilies() {
		if u, ok := uses[f.Accelerator]; ok {
			out = append(out, *u)
		}
	}
	return out
}
