// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"slices"
	"strings"
	"testing"
)

// Every row of the GPU catalogue is whole and consistent with the price
// table, so that adding a family is adding data the rest reads.
func TestGPUCatalogueRows(t *testing.T) {
	prices, err := LoadPrices()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range gpuFamilies {
		if f.Name == "" || f.Accelerator == "" || f.Description == "" || f.MemoryGB <= 0 {
			t.Errorf("%+v: name, accelerator, description and memory are required", f)
		}
		for _, k := range []string{f.Name, f.Accelerator} {
			if seen[k] {
				t.Errorf("%s appears twice", k)
			}
			seen[k] = true
		}
		if f.QuotaMetric == "" || f.PreemptibleQuotaMetric != "PREEMPTIBLE_"+f.QuotaMetric {
			t.Errorf("%s: quota metrics %q / %q", f.Name, f.QuotaMetric, f.PreemptibleQuotaMetric)
		}
		if (f.AttachSeries == "") != (len(f.AttachLimits) == 0) {
			t.Errorf("%s: an attach series needs its limits and the limits a series", f.Name)
		}
		if f.AttachSeries == "" && len(f.Bundled) == 0 {
			t.Errorf("%s: neither attached nor bundled", f.Name)
		}
		if f.AttachSeries != "" {
			if _, ok := series[f.AttachSeries]; !ok {
				t.Errorf("%s: attach series %s is not in the series table", f.Name, f.AttachSeries)
			}
			if _, ok := prices.Accelerators[f.Accelerator]; !ok {
				t.Errorf("%s: prices.json has no price for the attached %s", f.Name, f.Accelerator)
			}
		}
		for i, l := range f.AttachLimits {
			if i > 0 && (l.Count <= f.AttachLimits[i-1].Count || l.MaxVCPUs < f.AttachLimits[i-1].MaxVCPUs) {
				t.Errorf("%s: attach limits are not ascending at %d", f.Name, l.Count)
			}
		}
		for _, b := range f.Bundled {
			s, ok := LookupShape(b.MachineType)
			if !ok || s.BundledAccelerator != f.Accelerator || int64(s.BundledCount) != int64(b.GPUs) || b.GPUs <= 0 || b.VCPUs <= 0 || b.MemoryMiB <= 0 {
				t.Errorf("%s: %s resolves to %+v", f.Name, b.MachineType, s)
			}
			if _, known := series[FamilyOf(b.MachineType)]; !known {
				t.Errorf("%s: the series of %s is not in the series table", f.Name, b.MachineType)
			}
			p, ok := prices.MachineTypes[b.MachineType]
			if !ok || !p.IncludesGPU {
				t.Errorf("%s: prices.json has no GPU-inclusive price for %s", f.Name, b.MachineType)
			}
			if sold, _ := SoldModels(b.MachineType); !slices.Equal(sold, b.SoldAs) && len(b.SoldAs) > 0 {
				t.Errorf("%s: SoldModels = %v, row says %v", b.MachineType, sold, b.SoldAs)
			}
		}
		if s := f.Serving; s != nil {
			if s.CUDAMemoryGiB <= 0 || s.CUDAMemoryGiB >= float64(f.MemoryGB) || s.Capability < 30 || len(s.DTypes) == 0 || s.Source == "" ||
				s.SustainedBandwidthGBps <= 0 || s.SustainedBandwidthGBps > s.PeakBandwidthGBps || s.SustainedFP16TFLOPS <= 0 || s.SustainedFP16TFLOPS > s.PeakFP16TFLOPS {
				t.Errorf("%s: serving figures %+v", f.Name, s)
			}
			// vLLM computes in bfloat16 from compute capability 8.0.
			if slices.Contains(s.DTypes, "bfloat16") != (s.Capability >= 80) {
				t.Errorf("%s: bfloat16 listed %v at compute capability %d", f.Name, s.DTypes, s.Capability)
			}
		}
	}
	if !DefaultFamily().Automatic || DefaultFamily().Accelerator != "nvidia-tesla-t4" {
		t.Errorf("the default family is %s", DefaultFamily().Accelerator)
	}
}

// A GPU the catalogue has only bundled is refused as an attachment, with
// the machine types that bring it.
func TestBundledGPUIsNotAttached(t *testing.T) {
	p := Profile{Name: "l4-on-n1", MachineType: "n1-standard-8", Accelerator: "nvidia-l4"}
	err := p.Normalize("profiles[6]")
	if err == nil || !strings.Contains(err.Error(), "nvidia-l4 comes only with the machine types g2-standard-4") {
		t.Fatalf("l4 attached to n1: %v", err)
	}
}

// attachedGPUProblems says where a catalogue leaves the GPU of an
// attaching series to chance: a series a family attaches to that states
// no GPU (with two such families, which one an N1 type gets would be the
// catalogue's order), or states one that does not attach to it.
func attachedGPUProblems(families []GPUFamily, table map[string]machineSeries) []string {
	var out []string
	for _, f := range families {
		if f.AttachSeries == "" {
			continue
		}
		stated := table[f.AttachSeries].attachedGPU
		if stated == "" {
			out = append(out, f.AttachSeries+": "+f.Accelerator+" attaches to it, but the series states no attachedGPU")
			continue
		}
		ok := false
		for _, g := range families {
			ok = ok || (g.Accelerator == stated && g.AttachSeries == f.AttachSeries)
		}
		if !ok {
			out = append(out, f.AttachSeries+": its attachedGPU "+stated+" does not attach to it")
		}
	}
	if table[defaultSeries].attachedGPU == "" {
		out = append(out, defaultSeries+" (defaultSeries) states no attachedGPU")
	}
	return out
}

// The GPU an N1 type gets without one named is stated in the series
// table, never the first attaching row of the catalogue.
func TestSeriesStateTheirAttachedGPU(t *testing.T) {
	if p := attachedGPUProblems(gpuFamilies, series); len(p) != 0 {
		t.Errorf("the catalogue: %v", p)
	}
	// A V100 row that attaches to N1, first in the catalogue: an N1 type
	// still gets the stated T4.
	v100 := GPUFamily{Name: "v100", Accelerator: "nvidia-tesla-v100", Description: "NVIDIA V100", MemoryGB: 16, AttachSeries: "n1",
		AttachLimits: []AttachLimit{{Count: 1, MaxVCPUs: 12, MaxMemoryMiB: 78 * 1024}}}
	saved := gpuFamilies
	t.Cleanup(func() { gpuFamilies = saved })
	gpuFamilies = append([]GPUFamily{v100}, saved...)
	if p := attachedGPUProblems(gpuFamilies, series); len(p) != 0 {
		t.Errorf("with a V100 row: %v", p)
	}
	if f, ok := AttachedFamilyFor("n1-standard-8"); !ok || f.Accelerator != "nvidia-tesla-t4" {
		t.Errorf("n1-standard-8 with a V100 row first gets %v, want the stated nvidia-tesla-t4", f)
	}
	if f := DefaultFamily(); f == nil || f.Accelerator != "nvidia-tesla-t4" {
		t.Errorf("the default family with a V100 row first is %v, want nvidia-tesla-t4", f)
	}
	// The same catalogue with N1 stating nothing is refused.
	unstated := map[string]machineSeries{}
	for k, v := range series {
		unstated[k] = v
	}
	n1 := unstated["n1"]
	n1.attachedGPU = ""
	unstated["n1"] = n1
	p := attachedGPUProblems(gpuFamilies, unstated)
	if len(p) == 0 || !strings.Contains(strings.Join(p, "; "), "nvidia-tesla-v100 attaches to it, but the series states no attachedGPU") {
		t.Errorf("an N1 that states no GPU with two attaching families: %v, want it refused", p)
	}
}
