// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"slices"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

func TestGPUUses(t *testing.T) {
	use := func(uses []catalog.GPUUse, acc string) (catalog.GPUUse, bool) {
		for _, u := range uses {
			if u.Family.Accelerator == acc {
				return u, true
			}
		}
		return catalog.GPUUse{}, false
	}
	cat, err := catalog.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	// Defaults: the T4 automatically (t4-4 is the largest podVM); h100-cc
	// has no image, so it creates nothing and needs no zone or quota.
	cfg := validConfig()
	uses := cfg.GPUUses(cat)
	if len(uses) != 1 || uses[0].Family.Accelerator != "nvidia-tesla-t4" || !uses[0].Automatic || uses[0].MaxGPUs != 4 {
		t.Fatalf("default uses = %+v", uses)
	}
	// With an image, h100-cc is a GPU pods may name: checked, not automatic.
	cfg.ProfileImages = map[string]string{"h100-cc": "podvm-tdx"}
	u, ok := use(cfg.GPUUses(cat), "nvidia-h100-80gb")
	if !ok || u.Automatic || u.MaxGPUs != 1 || !slices.Equal(u.Via, []string{"profile h100-cc"}) {
		t.Fatalf("h100 use = %+v, %v", u, ok)
	}
	// Listing a bundled machine type makes its GPU nameable.
	cfg = validConfig()
	cfg.InstanceTypes = commaList{"t4-1", "g2-standard-8"}
	u, ok = use(cfg.GPUUses(cat), "nvidia-l4")
	if !ok || u.Automatic || u.MaxGPUs != 1 {
		t.Fatalf("listed g2-standard-8: %+v, %v", u, ok)
	}
	if _, found := use(cfg.GPUUses(cat), "nvidia-tesla-t4"); !found {
		t.Fatal("listed t4-1: no T4 use")
	}
	// Listing the accelerator lets fit choose it.
	cfg.InstanceTypes = commaList{"auto", "nvidia-l4"}
	cfg.MaxGPUsPerPod = 8
	u, ok = use(cfg.GPUUses(cat), "nvidia-l4")
	if !ok || !u.Automatic || !strings.Contains(strings.Join(u.Via, ","), "GCP_INSTANCE_TYPES nvidia-l4") {
		t.Fatalf("listed nvidia-l4: %+v, %v", u, ok)
	}
}
