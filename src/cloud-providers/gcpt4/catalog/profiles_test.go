// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"strings"
	"testing"
)

func TestBadProfilesNameTheField(t *testing.T) {
	cases := []struct {
		doc  string
		want string
	}{
		{`profiles: [{name: bad, machineType: n1-standard-4, accelerator: nvidia-tesla-t4, acceleratorCount: 3}]`, "acceleratorCount: GCE attaches 1, 2 or 4 nvidia-tesla-t4 to one VM, got 3; use 4"},
		{`profiles: [{name: bad, machineType: n1-standard-64, accelerator: nvidia-tesla-t4, acceleratorCount: 2}]`, "machineType: n1-standard-64 has 64 vCPUs"},
		{`profiles: [{name: bad, machineType: e2-standard-4, accelerator: nvidia-tesla-t4}]`, "attaches only to N1"},
		{`profiles: [{name: bad, machineType: n1-standard-4, accelerator: nvidia-tesla-t4, confidentialType: TDX}]`, "N1 (the T4's machine types) has no Confidential VM"},
		{`profiles: [{name: bad, machineType: n2d-standard-4, confidentialType: TDX}]`, "TDX does not run on n2d-standard-4"},
		{`profiles: [{name: bad, machineType: a3-highgpu-1g, accelerator: nvidia-h100-80gb}]`, "comes with 1×nvidia-h100-80gb"},
		{`profiles: [{name: bad, machineType: m3-ultramem-32}]`, "set vcpus and memoryMiB"},
		{`profiles: [{name: Bad, machineType: n1-standard-4}]`, "profiles[6].name"},
		{`profiles: [{name: bad, machineTyp: n1-standard-4}]`, "field machineTyp not found"},
		{`profiles: [{name: bad, machineType: n1-standard-4, provisioningModel: CHEAP}]`, "provisioningModel"},
		// GCE's own rules, each refused with the field and the fix.
		{`profiles: [{name: bad, machineType: custom-7-16384, accelerator: nvidia-tesla-t4}]`, "1 or an even number of vCPUs"},
		{`profiles: [{name: bad, machineType: custom-2-16384}]`, "922 to 6656 MiB per vCPU"},
		{`profiles: [{name: bad, machineType: custom-4-10000}]`, "multiple of 256"},
		{`profiles: [{name: bad, machineType: custom-52-65536, accelerator: nvidia-tesla-t4, acceleratorCount: 2}]`, "over GCE's limit for 2×nvidia-tesla-t4"},
		{`profiles: [{name: bad, machineType: n1-standard-4, minCpuPlatform: "Intel Sapphire Rapids"}]`, "not a platform of n1-standard-4"},
		{`profiles: [{name: bad, machineType: e2-standard-4, minCpuPlatform: "Intel Skylake"}]`, "takes no minimum CPU platform"},
		{`profiles: [{name: bad, machineType: n1-standard-4, diskType: hyperdisk-balanced}]`, "does not attach to n1-standard-4"},
		{`profiles: [{name: bad, machineType: a3-highgpu-1g, confidentialType: TDX, diskType: pd-standard}]`, "does not attach to a3-highgpu-1g"},
		{`profiles: [{name: bad, machineType: n1-standard-4, diskType: zones/us-central1-a/diskTypes/pd-ssd}]`, "not a URL"},
		{`profiles: [{name: bad, machineType: a3-highgpu-1g, confidentialType: TDX, provisioningModel: STANDARD}]`, "sold only as Spot, Flex-start or from a reservation"},
	}
	for _, tc := range cases {
		_, err := New("", tc.doc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profiles %s: error = %v, want it to contain %q", tc.doc, err, tc.want)
		}
	}
}

func TestLookupShape(t *testing.T) {
	cases := map[string][2]int64{
		"n1-standard-4":  {4, 15360},
		"n1-highmem-8":   {8, 53248},
		"n1-highcpu-16":  {16, 14746},
		"custom-6-23040": {6, 23040},
		"e2-standard-8":  {8, 32768},
		"e2-highcpu-4":   {4, 4096},
		"a3-highgpu-1g":  {26, 239616},
	}
	for mt, want := range cases {
		s, ok := LookupShape(mt)
		if !ok || s.VCPUs != want[0] || s.MemoryMiB != want[1] {
			t.Errorf("LookupShape(%s) = %+v, %v; want %v", mt, s, ok, want)
		}
	}
	for _, mt := range []string{"n1-standard-3", "n1-highmem-1", "n1-weird-4", "custom-x-1", "e2-highmem-32", "e2-standard-1"} {
		if _, ok := LookupShape(mt); ok {
			t.Errorf("LookupShape(%s) succeeded, want unknown", mt)
		}
	}
}

// A profile's GPU family is resolved with its GPUs, when the profile is
// read or synthesized, for attached and bundled GPUs alike; a CPU-only
// profile has none.
func TestProfileFamilyIsResolvedWithItsGPUs(t *testing.T) {
	c, err := New("", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"t4-1": "nvidia-tesla-t4", "t4-4": "nvidia-tesla-t4", "h100-cc": "nvidia-h100-80gb", "cpu-4": ""} {
		p, _ := c.Lookup(name)
		f, ok := p.Family()
		switch {
		case want == "" && ok:
			t.Errorf("%s: family %s, want none", name, f.Accelerator)
		case want != "" && (!ok || f.Accelerator != want):
			t.Errorf("%s: family %v, %v; want %s", name, f, ok, want)
		}
	}
	synthesized := Synthesize(Request{GPUs: 1})
	if len(synthesized) == 0 {
		t.Fatal("no shape synthesized for one GPU")
	}
	for _, p := range synthesized {
		if f, ok := p.Family(); !ok || f.Accelerator != p.GPUModel() {
			t.Errorf("%s: family %v, %v; want %s's", Describe(p), f, ok, p.GPUModel())
		}
	}
}
