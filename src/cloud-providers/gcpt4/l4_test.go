// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// The L4 on G2 is rows of the GPU catalogue and prices: fit offers it
// when the admin lists it and it is the cheapest shape that holds the
// request, and never otherwise; a pod may name it by profile or machine
// type within the allow-list.
func TestL4IsChosenWhenAllowedAndCheapest(t *testing.T) {
	cat, err := catalog.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	bigCaps := func(c *Config) { c.MaxGPUsPerPod, c.MaxVCPUsPerPod, c.MaxMemoryPerPod = 8, 96, 400*1024 }

	// Unlisted, the L4 is never chosen: a 1-GPU pod gets its T4.
	cfg := validConfig()
	sel := selectFor(t, cfg, cat, provider.InstanceTypeSpec{GPUs: 1})
	for _, c := range sel.Candidates {
		if c.Profile.GPUModel() == "nvidia-l4" {
			t.Fatalf("an unlisted L4 is a candidate: %s", c.ShapeWords())
		}
	}
	// Eight GPUs: no T4 shape holds them, the L4's g2-standard-96 does,
	// and the refusal says how the admin allows it.
	bigCaps(&cfg)
	_, err = cfg.selectShape(cat, provider.InstanceTypeSpec{GPUs: 8})
	if err == nil || !strings.Contains(err.Error(), "g2-standard-96 + 8×nvidia-l4 holds it") || !strings.Contains(err.Error(), "add nvidia-l4 to GCP_INSTANCE_TYPES") {
		t.Fatalf("8 GPUs without the L4 listed: %v", err)
	}
	// Listed beside auto: the T4 stays the choice where it is cheaper
	// (about $0.55/h, against g2-standard-4's $0.71/h) ...
	cfg.InstanceTypes = commaList{allowAuto, "nvidia-l4"}
	sel = selectFor(t, cfg, cat, provider.InstanceTypeSpec{GPUs: 1})
	if got := sel.FirstChoice(); got.Profile.GPUModel() != "nvidia-tesla-t4" {
		t.Fatalf("1 GPU with the L4 listed: chose %s", got.ShapeWords())
	}
	l4 := false
	for _, c := range sel.Candidates {
		l4 = l4 || c.Profile.GPUModel() == "nvidia-l4"
	}
	if !l4 {
		t.Fatal("the listed L4 is not among the candidates")
	}
	// ... and the L4 where it is the cheapest that holds the request.
	sel = selectFor(t, cfg, cat, provider.InstanceTypeSpec{GPUs: 8})
	if got := sel.FirstChoice().ShapeWords(); got != "g2-standard-96 + 8×nvidia-l4" {
		t.Fatalf("8 GPUs: chose %s", got)
	}
	if p, _ := sel.FirstChoice().Price(setting.ProvisioningStandard); p < 8 || p > 8.01 {
		t.Errorf("g2-standard-96 priced %.4f, want prices.json's 8.0033", p)
	}
	if sel.FirstChoice().Profile.Accelerator != "" {
		t.Error("a bundled L4 must not be sent as guestAccelerators")
	}
	// Listed alone: the cheapest L4 shape at the per-GPU floor (4 vCPUs,
	// 15 GiB) for one GPU, g2-standard-24 for two.
	cfg.InstanceTypes = commaList{"nvidia-l4"}
	for gpus, want := range map[int64]string{1: "g2-standard-4 + 1×nvidia-l4", 2: "g2-standard-24 + 2×nvidia-l4", 3: "g2-standard-48 + 4×nvidia-l4"} {
		sel = selectFor(t, cfg, cat, provider.InstanceTypeSpec{GPUs: gpus})
		if got := sel.FirstChoice().ShapeWords(); got != want {
			t.Errorf("%d GPUs, L4 only: chose %s, want %s", gpus, got, want)
		}
	}
	// Named, by machine type and by a profile of the admin's.
	cat, err = catalog.New("", `{"profiles": [{"name": "l4-2", "machineType": "g2-standard-24"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg = validConfig()
	bigCaps(&cfg)
	cfg.InstanceTypes = commaList{"l4-2", "g2-standard-8"}
	for name, want := range map[string]string{"l4-2": "g2-standard-24 + 2×nvidia-l4", "g2-standard-8": "g2-standard-8 + 1×nvidia-l4"} {
		sel = selectFor(t, cfg, cat, provider.InstanceTypeSpec{InstanceType: name, GPUs: 1})
		if got := sel.FirstChoice().ShapeWords(); got != want {
			t.Errorf("named %s: %s, want %s", name, got, want)
		}
	}
	if _, err := cfg.selectShape(cat, provider.InstanceTypeSpec{InstanceType: "g2-standard-96", GPUs: 8}); err == nil || !strings.Contains(err.Error(), "not in GCP_INSTANCE_TYPES") {
		t.Errorf("an unlisted g2-standard-96 by name: %v", err)
	}
}
