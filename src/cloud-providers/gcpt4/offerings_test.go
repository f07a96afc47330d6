// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"math"
	"strings"
	"testing"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// allowH100 raises the per-pod vCPU and memory limits to a3-highgpu-1g's
// (26 vCPUs, 234 GiB), as an admin who offers h100-cc must: the limits
// derived from the T4 profiles (t4-4: 16 vCPUs) bind named shapes too.
func allowH100(c *Config) {
	c.MaxVCPUsPerPod, c.MaxMemoryPerPod = 26, 239616
}

func selectFor(t *testing.T, cfg Config, cat *catalog.Catalog, spec provider.InstanceTypeSpec) *catalog.Selection {
	t.Helper()
	sel, err := cfg.selectShape(cat, spec)
	if err != nil {
		t.Fatalf("selectShape(%+v): %v", spec, err)
	}
	return sel
}

// Each selection case: the request, the shape chosen and its price under
// the model, and the next-cheapest alternative. Prices are the embedded
// table's (us-central1), so a changed table changes these on purpose.
func TestSelectCheapestShape(t *testing.T) {
	cat := mustCatalog(t, "", "")
	cases := []struct {
		name    string
		model   string
		spec    provider.InstanceTypeSpec
		profile string
		shape   string
		price   float64
		alt     string
	}{
		// The case: 1 GPU and 40 GiB used to get t4-4 ($2.16/h).
		{"1 GPU, 40 GiB", setting.ProvisioningStandard, provider.InstanceTypeSpec{GPUs: 1, Memory: 40 * 1024}, catalog.AutoProfileName, "custom-8-40960 + 1×nvidia-tesla-t4", 0.7932, "n1-highmem-8 + 1×nvidia-tesla-t4"},
		{"1 GPU, 40 GiB, Spot", setting.ProvisioningSpot, provider.InstanceTypeSpec{GPUs: 1, Memory: 40 * 1024}, catalog.AutoProfileName, "custom-8-40960 + 1×nvidia-tesla-t4", 0.2663, "n1-highmem-8 + 1×nvidia-tesla-t4"},
		// Small requests keep the per-GPU floor: the t4-N shapes.
		{"1 GPU, small", setting.ProvisioningStandard, provider.InstanceTypeSpec{GPUs: 1, VCPUs: 2, Memory: 8192}, "t4-1", "n1-standard-4 + 1×nvidia-tesla-t4", 0.54, "custom-4-15360 + 1×nvidia-tesla-t4"},
		{"2 GPUs", setting.ProvisioningStandard, provider.InstanceTypeSpec{GPUs: 2}, "t4-2", "n1-standard-8 + 2×nvidia-tesla-t4", 1.08, "custom-8-30720 + 2×nvidia-tesla-t4"},
		{"3 GPUs round up to 4", setting.ProvisioningStandard, provider.InstanceTypeSpec{GPUs: 3}, "t4-4", "n1-standard-16 + 4×nvidia-tesla-t4", 2.16, "custom-16-61440 + 4×nvidia-tesla-t4"},
		{"1 GPU, 6 vCPU: custom beats n1-standard-8", setting.ProvisioningStandard, provider.InstanceTypeSpec{GPUs: 1, VCPUs: 6}, catalog.AutoProfileName, "custom-6-15360 + 1×nvidia-tesla-t4", 0.6157, "n1-standard-8 + 1×nvidia-tesla-t4"},
		// Over 48 vCPUs one or two T4s cannot hold it: four can.
		{"1 GPU, 60 vCPU needs 4 T4s", setting.ProvisioningStandard, provider.InstanceTypeSpec{GPUs: 1, VCPUs: 60}, catalog.AutoProfileName, "custom-60-61440 + 4×nvidia-tesla-t4", 3.6572, "n1-standard-64 + 4×nvidia-tesla-t4"},
		// CPU-only pods of any size.
		{"CPU-only 8 vCPU / 32 GiB", setting.ProvisioningStandard, provider.InstanceTypeSpec{VCPUs: 8, Memory: 32 * 1024}, catalog.AutoProfileName, "e2-standard-8", 0.2680, "e2-highmem-8"},
		{"CPU-only 8 vCPU / 32 GiB, Spot", setting.ProvisioningSpot, provider.InstanceTypeSpec{VCPUs: 8, Memory: 32 * 1024}, catalog.AutoProfileName, "e2-standard-8", 0.1608, "n1-highmem-8"},
		{"CPU-only 64 vCPU / 390 GiB", setting.ProvisioningStandard, provider.InstanceTypeSpec{VCPUs: 64, Memory: 400000}, catalog.AutoProfileName, "n1-highmem-64", 3.7857, "n1-highmem-96"},
		{"CPU-only nothing requested", setting.ProvisioningStandard, provider.InstanceTypeSpec{}, "cpu-2", "e2-medium", 0.0335, "n1-standard-1"},
		// Spot prices rank differently: N1 is cheaper than E2 on Spot.
		{"CPU-only 4 vCPU, Spot", setting.ProvisioningSpot, provider.InstanceTypeSpec{VCPUs: 4, Memory: 8192}, "cpu-4", "n1-standard-4", 0.0670, "e2-standard-4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.ProvisioningModel = tc.model
			// Fit's whole range, as an admin who raised the per-pod
			// limits gets it (the defaults stop at t4-4's size).
			cfg.MaxVCPUsPerPod, cfg.MaxMemoryPerPod = 96, 1<<20
			sel := selectFor(t, cfg, cat, tc.spec)
			ch := sel.FirstChoice()
			price, known := ch.Price(tc.model)
			if ch.Profile.Name != tc.profile || ch.ShapeWords() != tc.shape || !known || math.Abs(price-tc.price) > 0.00005 {
				t.Errorf("chosen %s %s $%.4f (known %v), want %s %s $%.4f", ch.Profile.Name, ch.ShapeWords(), price, known, tc.profile, tc.shape, tc.price)
			}
			alt, ok := sel.Alternative()
			if !ok || alt.ShapeWords() != tc.alt {
				t.Errorf("alternative %s, want %s", alt.ShapeWords(), tc.alt)
			}
			if ap, _ := alt.Price(tc.model); ap < price {
				t.Errorf("the alternative (%.4f) is cheaper than the choice (%.4f)", ap, price)
			}
			// Every candidate holds the request, within GCE's rules.
			for _, c := range sel.Candidates {
				p := c.Profile
				if p.GPUs() < tc.spec.GPUs || p.VCPUs < tc.spec.VCPUs || p.MemoryMiB < tc.spec.Memory || (p.GPUs() > 0) != (tc.spec.GPUs > 0) {
					t.Errorf("candidate %s does not hold %+v", c.ShapeWords(), tc.spec)
				}
				if f, ok := catalog.FamilyByAccelerator(p.Accelerator); ok {
					if err := catalog.CheckAttachedShape("candidate", p.MachineType, f, p.AcceleratorCount, catalog.Shape{VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB}); err != nil {
						t.Errorf("candidate %s: %v", c.ShapeWords(), err)
					}
				}
				if s, _ := catalog.LookupShape(p.MachineType); s.Custom {
					if err := catalog.CustomN1Error(s.VCPUs, s.MemoryMiB); err != nil {
						t.Errorf("candidate %s: %v", c.ShapeWords(), err)
					}
				}
			}
		})
	}
}

// Named profiles and machine types win over price, explicit profiles are
// never picked by fit, and what GCE would reject is refused.
func TestSelectNamedAndRefusals(t *testing.T) {
	cat := mustCatalog(t, "", "")
	cfg := validConfig()
	cfg.ProfileImages = map[string]string{"h100-cc": "podvm-tdx"}
	// The admin lists the machine types pods may name (an empty list
	// allows only the profiles and their machine types).
	cfg.InstanceTypes = commaList{"t4-2", "n1-highmem-8", "n1-standard-16", "custom-6-23040", "e2-standard-16", "h100-cc",
		"e2-standard-4", "n1-standard-96", "n1-standard-4", "cpu-4", "g1-small", "custom-5-8192"}
	fit := validConfig()
	fit.MaxGPUsPerPod, fit.MaxVCPUsPerPod, fit.MaxMemoryPerPod = 8, 1000, 1<<21
	for _, tc := range []struct {
		spec  provider.InstanceTypeSpec
		name  string
		shape string
	}{
		{provider.InstanceTypeSpec{InstanceType: "t4-2", GPUs: 1}, "t4-2", "n1-standard-8 + 2×nvidia-tesla-t4"},
		{provider.InstanceTypeSpec{InstanceType: "n1-highmem-8", GPUs: 1}, "custom", "n1-highmem-8 + 1×nvidia-tesla-t4"},
		{provider.InstanceTypeSpec{InstanceType: "n1-standard-16", GPUs: 3}, "custom", "n1-standard-16 + 4×nvidia-tesla-t4"},
		{provider.InstanceTypeSpec{InstanceType: "custom-6-23040", GPUs: 1}, "custom", "custom-6-23040 + 1×nvidia-tesla-t4"},
		{provider.InstanceTypeSpec{InstanceType: "e2-standard-16"}, "custom", "e2-standard-16"},
		{provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1}, "h100-cc", "a3-highgpu-1g + 1×nvidia-h100-80gb"},
	} {
		sel := selectFor(t, cfg, cat, tc.spec)
		if !sel.Named || len(sel.Candidates) != 1 || sel.FirstChoice().Profile.Name != tc.name || sel.FirstChoice().ShapeWords() != tc.shape {
			t.Errorf("%+v: %s %s (named %v, %d candidates), want %s %s", tc.spec, sel.FirstChoice().Profile.Name, sel.FirstChoice().ShapeWords(), sel.Named, len(sel.Candidates), tc.name, tc.shape)
		}
	}
	// The bundled H100 is never chosen by fit, even when the T4s cannot
	// hold the request: that is an error, not an $11/h VM.
	for _, tc := range []struct {
		spec provider.InstanceTypeSpec
		want string
	}{
		{provider.InstanceTypeSpec{GPUs: 1, VCPUs: 100}, "no GPU shape fits"},
		{provider.InstanceTypeSpec{GPUs: 5}, "at most 4 nvidia-tesla-t4"},
		{provider.InstanceTypeSpec{VCPUs: 200}, "no CPU-only shape fits"},
		{provider.InstanceTypeSpec{InstanceType: "e2-standard-4", GPUs: 1}, "attaches only to N1"},
		{provider.InstanceTypeSpec{InstanceType: "n1-standard-96", GPUs: 1}, "over GCE's limit for 1×nvidia-tesla-t4"},
		{provider.InstanceTypeSpec{InstanceType: "n1-standard-4", GPUs: 5}, "at most 4"},
		{provider.InstanceTypeSpec{InstanceType: "cpu-4", GPUs: 1}, "has 0 GPU(s) but the pod requests 1"},
		{provider.InstanceTypeSpec{InstanceType: "g1-small", GPUs: 1}, "shared-core"},
		{provider.InstanceTypeSpec{InstanceType: "custom-5-8192", GPUs: 1}, "even number of vCPUs"},
	} {
		c := cfg
		if tc.spec.InstanceType == "" {
			c = fit
		}
		if _, err := c.selectShape(cat, tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
	cfg.InstanceTypes = commaList{"t4-1"}
	if _, err := cfg.selectShape(cat, provider.InstanceTypeSpec{InstanceType: "t4-4"}); err == nil || !strings.Contains(err.Error(), "GCP_INSTANCE_TYPES") {
		t.Errorf("allow-list: %v", err)
	}
}

// A disk type the series does not take removes its shapes; with none left
// the error names GCP_DISK_TYPE.
func TestSelectHonoursDiskTypeSeries(t *testing.T) {
	cat := mustCatalog(t, "", "")
	cfg := validConfig()
	cfg.DiskType = "hyperdisk-balanced"
	_, err := cfg.selectShape(cat, provider.InstanceTypeSpec{GPUs: 1})
	if err == nil || !strings.Contains(err.Error(), "hyperdisk-balanced does not attach") || !strings.Contains(err.Error(), "GCP_DISK_TYPE") {
		t.Errorf("hyperdisk on N1: %v", err)
	}
	cfg.DiskType = "pd-standard"
	cfg.ProfileImages = map[string]string{"h100-cc": "podvm-tdx"}
	allowH100(&cfg)
	if _, err := cfg.selectShape(cat, provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1}); err == nil || !strings.Contains(err.Error(), "pd-standard does not attach to a3-highgpu-1g") {
		t.Errorf("pd-standard on A3: %v", err)
	}
	if sel := selectFor(t, cfg, cat, provider.InstanceTypeSpec{GPUs: 1}); sel.FirstChoice().Profile.Name != "t4-1" {
		t.Errorf("pd-standard on N1 is fine, got %s", sel.FirstChoice().ShapeWords())
	}
}

// h100-cc is sold only as Spot (a3-highgpu-1g), needs a TDX image of its
// own, NVMe and gVNIC; the T4 image is not taken for it.
func TestConfidentialProfileIsHonest(t *testing.T) {
	cat := mustCatalog(t, "", "")
	cfg := validConfig()
	allowH100(&cfg)
	_, err := cfg.selectShape(cat, provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1})
	if err == nil || !strings.Contains(err.Error(), "TDX_CAPABLE") || !strings.Contains(err.Error(), "(TDX Confidential VM) needs an image") || !strings.Contains(err.Error(), "GCP_PROFILE_IMAGES=h100-cc=") {
		t.Fatalf("h100-cc without an image: %v", err)
	}
	// A pod's image annotation is refused unless the admin allows the
	// image (allow_test.go); allowed, it serves the profile.
	cfg.AllowedImages = commaList{"projects/p/global/images/tdx"}
	if sel := selectFor(t, cfg, cat, provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1, Image: "projects/p/global/images/tdx"}); sel.FirstChoice().Profile.Name != "h100-cc" {
		t.Fatalf("image annotation: %v", sel.FirstChoice())
	}
	cfg.ProfileImages = map[string]string{"h100-cc": "podvm-tdx"}
	cfg.SpotFallback, cfg.ProvisioningModel = true, setting.ProvisioningSpot
	sel := selectFor(t, cfg, cat, provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1})
	// No standard fallback: GCE does not sell a3-highgpu-1g on demand.
	if strings.Join(sel.Models(), ",") != setting.ProvisioningSpot {
		t.Errorf("h100-cc models = %v, want SPOT only", sel.Models())
	}
	req := strings.Join(cfg.Requirements(sel.FirstChoice().Profile), "\n")
	for _, want := range []string{"TDX_CAPABLE", "UEFI_COMPATIBLE", "GVNIC", "image: podvm-tdx", "not a TDX image", "NVMe", "gVNIC network interface", "sold only as Spot, Flex-start or from a reservation", "Intel Sapphire Rapids"} {
		if !strings.Contains(req, want) {
			t.Errorf("requirements lack %q:\n%s", want, req)
		}
	}
	// A user profile on a3-highgpu-1g that inherits STANDARD is refused at
	// start-up, before any pod.
	cat2 := mustCatalog(t, "", `profiles: [{name: h100, machineType: a3-highgpu-1g, confidentialType: TDX, image: tdx, explicit: true}]`)
	std := validConfig()
	if err := std.checkCatalog(cat2); err == nil || !strings.Contains(err.Error(), "sold only as Spot") || !strings.Contains(err.Error(), "provisioningModel: SPOT") {
		t.Errorf("a3 profile under STANDARD: %v", err)
	}
	if err := std.checkCatalog(cat); err != nil {
		t.Errorf("built-ins under STANDARD: %v", err)
	}
}

// The walk: the cheapest shape under each of its models, in every zone.
func TestStepsAndOfferings(t *testing.T) {
	cat := mustCatalog(t, "", "")
	cfg := validConfig()
	cfg.ProvisioningModel, cfg.SpotFallback = setting.ProvisioningSpot, true
	sel := selectFor(t, cfg, cat, provider.InstanceTypeSpec{GPUs: 1, Memory: 40 * 1024})
	var got []string
	for _, o := range sel.Offerings([]string{"us-central1-a", "us-central1-b"}) {
		got = append(got, o.ProvisioningModel+" "+o.MachineType+" "+o.Zone)
		if !o.Priced || o.GPUs != 1 {
			t.Errorf("offering %+v", o)
		}
	}
	want := []string{
		"SPOT custom-8-40960 us-central1-a", "SPOT custom-8-40960 us-central1-b",
		"STANDARD custom-8-40960 us-central1-a", "STANDARD custom-8-40960 us-central1-b",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("offerings:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A named shape is the only step per model.
	named := selectFor(t, cfg, cat, provider.InstanceTypeSpec{InstanceType: "t4-1", GPUs: 1})
	if n := len(named.Attempts()); n != 2 {
		t.Errorf("named t4-1 steps = %d, want 2 (SPOT, STANDARD)", n)
	}
}

// The offering cache tells shapes apart by accelerator count and model.
func TestOfferingCacheKey(t *testing.T) {
	now := time.Unix(0, 0)
	c := newOfferingCache(time.Minute, func() time.Time { return now })
	one := offering{model: setting.ProvisioningSpot, machineType: "n1-standard-16", accelerator: "nvidia-tesla-t4", count: 1, zone: "us-central1-a"}
	c.markUnavailable(one)
	four, std := one, one
	four.count = 4
	std.model = setting.ProvisioningStandard
	if _, ok := c.unavailableUntil(one); !ok {
		t.Error("the stocked-out offering is not marked")
	}
	if _, ok := c.unavailableUntil(four); ok {
		t.Error("4×T4 on the same machine type shares 1×T4's stockout mark")
	}
	if _, ok := c.unavailableUntil(std); ok {
		t.Error("standard shares Spot's stockout mark")
	}
	now = now.Add(time.Minute)
	if _, ok := c.unavailableUntil(one); ok {
		t.Error("the mark outlived its TTL")
	}
}
