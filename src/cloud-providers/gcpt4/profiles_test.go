// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"os"
	"path/filepath"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

func mustCatalog(t *testing.T, file, inline string) *catalog.Catalog {
	t.Helper()
	c, err := catalog.New(file, inline)
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	return c
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
	// The user's t4-1 replaced the built-in one.
	p, ok := c.Lookup("t4-1")
	if !ok || p.MachineType != "n1-standard-8" || p.MemoryMiB != 30720 || p.GPUs() != 1 {
		t.Fatalf("got %+v, want the user's t4-1 on n1-standard-8 (30720 MiB)", p)
	}
	cfg := validConfig()
	sel, err := cfg.selectShape(c, provider.InstanceTypeSpec{InstanceType: "t4-1", GPUs: 1})
	if err != nil || sel.FirstChoice().Profile.MachineType != "n1-standard-8" {
		t.Fatalf("named t4-1: %v, %v", sel, err)
	}
	// By fit the user's profile competes on price: it carries its name
	// when it is the shape chosen.
	sel, err = cfg.selectShape(c, provider.InstanceTypeSpec{GPUs: 1, Memory: 40000, VCPUs: 8})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cand := range sel.Candidates {
		found = found || cand.Profile.Name == "t4-1-highmem"
	}
	if !found {
		t.Fatalf("t4-1-highmem (n1-highmem-8) holds 1 GPU, 8 vCPU, 40000 MiB but is no candidate: %v", sel.Candidates)
	}
	l4, ok := c.Lookup("l4-1")
	if !ok || l4.GPUs() != 1 || l4.GPUModel() != "nvidia-l4" {
		t.Fatalf("l4-1 = %+v, want 1 bundled nvidia-l4", l4)
	}
}
