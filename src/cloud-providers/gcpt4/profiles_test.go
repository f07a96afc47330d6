package gcpt4

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustCatalog(t *testing.T, file, inline string) *Catalog {
	t.Helper()
	c, err := NewCatalog(file, inline)
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	return c
}

func TestSelectProfile(t *testing.T) {
	c := mustCatalog(t, "", "")
	cases := []struct {
		name     string
		req      Request
		want     string
		wantType string
		wantGPUs int64
	}{
		{"one T4", Request{GPUs: 1}, "t4-1", "n1-standard-4", 1},
		{"one T4 fits memory", Request{GPUs: 1, VCPUs: 4, MemoryMiB: 15000}, "t4-1", "n1-standard-4", 1},
		{"one T4, more CPU than t4-1 has", Request{GPUs: 1, VCPUs: 6}, "t4-2", "n1-standard-8", 2},
		{"two T4s", Request{GPUs: 2}, "t4-2", "n1-standard-8", 2},
		{"three T4s round up to four", Request{GPUs: 3}, "t4-4", "n1-standard-16", 4},
		{"no GPU, small", Request{VCPUs: 1, MemoryMiB: 2048}, "cpu-2", "e2-medium", 0},
		{"no GPU, needs 4 vCPUs", Request{VCPUs: 4, MemoryMiB: 8192}, "cpu-4", "n1-standard-4", 0},
		{"no request at all", Request{}, "cpu-2", "e2-medium", 0},
		{"named profile", Request{InstanceType: "t4-2", GPUs: 1}, "t4-2", "n1-standard-8", 2},
		{"named N1 type gets the T4s", Request{InstanceType: "n1-highmem-8", GPUs: 1}, "custom", "n1-highmem-8", 1},
		{"named N1 type with 3 GPUs gets 4", Request{InstanceType: "n1-standard-16", GPUs: 3}, "custom", "n1-standard-16", 4},
		{"explicit confidential profile", Request{InstanceType: "h100-cc", GPUs: 1}, "h100-cc", "a3-highgpu-1g", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := c.Select(tc.req)
			if err != nil {
				t.Fatalf("Select(%+v): %v", tc.req, err)
			}
			if p.Name != tc.want || p.MachineType != tc.wantType || p.GPUs() != tc.wantGPUs {
				t.Fatalf("Select(%+v) = %s/%s/%d GPUs, want %s/%s/%d", tc.req, p.Name, p.MachineType, p.GPUs(), tc.want, tc.wantType, tc.wantGPUs)
			}
		})
	}
}

func TestSelectNeverPicksH100ByFit(t *testing.T) {
	c := mustCatalog(t, "", "")
	// 20 vCPUs with 1 GPU fits no T4 profile; h100-cc would fit but is
	// explicit only, so this must be an error, not a $11/h VM.
	_, err := c.Select(Request{GPUs: 1, VCPUs: 20})
	if err == nil || !strings.Contains(err.Error(), "no GPU profile fits") || !strings.Contains(err.Error(), "GCP_PROFILES_FILE") {
		t.Fatalf("want a no-fit error naming the fix, got %v", err)
	}
}

func TestSelectRejectsWhatGCERejects(t *testing.T) {
	c := mustCatalog(t, "", "")
	cases := []struct {
		req  Request
		want string
	}{
		{Request{InstanceType: "e2-standard-4", GPUs: 1}, "attaches only to N1"},
		{Request{InstanceType: "n1-standard-96", GPUs: 1}, "over GCE's limit for 1×nvidia-tesla-t4"},
		{Request{InstanceType: "n1-standard-4", GPUs: 5}, "at most 4"},
		{Request{InstanceType: "cpu-4", GPUs: 1}, "has 0 GPU(s) but the pod requests 1"},
		{Request{InstanceType: "g1-small", GPUs: 1}, "shared-core"},
	}
	for _, tc := range cases {
		_, err := c.Select(tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Select(%+v) error = %v, want it to contain %q", tc.req, err, tc.want)
		}
	}
}

func TestUserProfiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "profiles.yaml")
	doc := `profiles:
  - name: t4-1-highmem
    machineType: n1-highmem-8
    accelerator: nvidia-tesla-t4
    acceleratorCount: 1
  - name: t4-1
    machineType: n1-standard-8
    accelerator: nvidia-tesla-t4
`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	inline := `{"profiles": [{"name": "l4-1", "machineType": "g2-standard-4", "explicit": true}]}`
	c := mustCatalog(t, file, inline)
	p, err := c.Select(Request{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The user's t4-1 replaced the built-in one.
	if p.Name != "t4-1" || p.MachineType != "n1-standard-8" || p.MemoryMiB != 30720 {
		t.Fatalf("got %+v, want the user's t4-1 on n1-standard-8 (30720 MiB)", p)
	}
	p, err = c.Select(Request{GPUs: 1, MemoryMiB: 40000})
	if err != nil || p.Name != "t4-1-highmem" || p.MemoryMiB != 8*6656 {
		t.Fatalf("got %+v, %v; want t4-1-highmem", p, err)
	}
	l4, ok := c.Lookup("l4-1")
	if !ok || l4.GPUs() != 1 || l4.GPUModel() != "nvidia-l4" {
		t.Fatalf("l4-1 = %+v, want 1 bundled nvidia-l4", l4)
	}
}

func TestBadProfilesNameTheField(t *testing.T) {
	cases := []struct {
		doc  string
		want string
	}{
		{`profiles: [{name: bad, machineType: n1-standard-4, accelerator: nvidia-tesla-t4, acceleratorCount: 3}]`, "acceleratorCount: GCE attaches 1, 2 or 4 nvidia-tesla-t4 to one VM, got 3; use 4"},
		{`profiles: [{name: bad, machineType: n1-standard-64, accelerator: nvidia-tesla-t4, acceleratorCount: 2}]`, "machineType: n1-standard-64 has 64 vCPUs"},
		{`profiles: [{name: bad, machineType: e2-standard-4, accelerator: nvidia-tesla-t4}]`, "attaches only to N1"},
		{`profiles: [{name: bad, machineType: n1-standard-4, accelerator: nvidia-tesla-t4, confidentialType: TDX}]`, "N1 machine types (and so the T4) have no Confidential VM support"},
		{`profiles: [{name: bad, machineType: n2d-standard-4, confidentialType: TDX}]`, "TDX does not run on n2d-standard-4"},
		{`profiles: [{name: bad, machineType: a3-highgpu-1g, accelerator: nvidia-h100-80gb}]`, "comes with 1×nvidia-h100-80gb"},
		{`profiles: [{name: bad, machineType: m3-ultramem-32}]`, "set vcpus and memoryMiB"},
		{`profiles: [{name: Bad, machineType: n1-standard-4}]`, "profiles[6].name"},
		{`profiles: [{name: bad, machineTyp: n1-standard-4}]`, "field machineTyp not found"},
		{`profiles: [{name: bad, machineType: n1-standard-4, provisioningModel: CHEAP}]`, "provisioningModel"},
	}
	for _, tc := range cases {
		_, err := NewCatalog("", tc.doc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profiles %s: error = %v, want it to contain %q", tc.doc, err, tc.want)
		}
	}
}

func TestLookupShape(t *testing.T) {
	cases := map[string][2]int64{
		"n1-standard-4":  {4, 15360},
		"n1-highmem-8":   {8, 53248},
		"n1-highcpu-16":  {16, 14745},
		"custom-6-23040": {6, 23040},
		"a3-highgpu-1g":  {26, 239616},
	}
	for mt, want := range cases {
		s, ok := lookupShape(mt)
		if !ok || s.vcpus != want[0] || s.memoryMiB != want[1] {
			t.Errorf("lookupShape(%s) = %+v, %v; want %v", mt, s, ok, want)
		}
	}
	for _, mt := range []string{"n1-standard-3", "n1-highmem-1", "n1-weird-4", "custom-x-1"} {
		if _, ok := lookupShape(mt); ok {
			t.Errorf("lookupShape(%s) succeeded, want unknown", mt)
		}
	}
}
