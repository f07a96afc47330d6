// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// refuses asserts that planning spec (PlanInsert: the image allow-list,
// then the selection CreateInstance runs) refuses it with an error naming
// every want.
func refuses(t *testing.T, cfg Config, spec provider.InstanceTypeSpec, want ...string) {
	t.Helper()
	ip, err := cfg.PlanInsert(mustCatalog(t, "", ""), spec, "pod", sandbox, "")
	if err == nil {
		t.Fatalf("%+v: chose %s, want a refusal naming %v", spec, catalog.Describe(ip.Profile), want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%+v: error %q lacks %q", spec, err, w)
		}
	}
}

// The boot image is the admin's: a pod's image annotation may name only
// the configured images, in any of the forms GCE takes, unless
// GCP_ALLOWED_IMAGES adds more.
func TestImageAnnotationAllowList(t *testing.T) {
	cfg := validConfig()
	cfg.ProfileImages = map[string]string{"h100-cc": "projects/img-proj/global/images/podvm-tdx"}
	evil := provider.InstanceTypeSpec{GPUs: 1, Image: "projects/attacker-proj/global/images/evil"}
	refuses(t, cfg, evil, annotImage, "GCP_ALLOWED_IMAGES", "projects/attacker-proj/global/images/evil")
	// The configured image, in its other forms, is fine.
	for _, img := range []string{"podvm-t4", "global/images/podvm-t4", "projects/demo-project/global/images/podvm-t4",
		"https://www.googleapis.com/compute/v1/projects/demo-project/global/images/podvm-t4", "projects/img-proj/global/images/podvm-tdx"} {
		if _, err := cfg.PlanInsert(mustCatalog(t, "", ""), provider.InstanceTypeSpec{GPUs: 1, Image: img}, "pod", sandbox, ""); err != nil {
			t.Errorf("image %s: %v", img, err)
		}
	}
	// A bare name is the provider's project's: evil there is not
	// attacker-proj's evil, and neither is allowed.
	refuses(t, cfg, provider.InstanceTypeSpec{Image: "evil"}, "GCP_ALLOWED_IMAGES")
	cfg.AllowedImages = commaList{"projects/attacker-proj/global/images/evil"}
	if _, err := cfg.PlanInsert(mustCatalog(t, "", ""), evil, "pod", sandbox, ""); err != nil {
		t.Errorf("allowed by GCP_ALLOWED_IMAGES: %v", err)
	}
	cfg.AllowedImages = commaList{"not/an/image"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "GCP_ALLOWED_IMAGES") {
		t.Errorf("bad GCP_ALLOWED_IMAGES: %v", err)
	}
}

// The shapes: each was planned at $2.16-$7.36/h for a pod the
// admin never allowed it.
func TestShapeAllowListAndCaps(t *testing.T) {
	cfg := validConfig()
	small := provider.InstanceTypeSpec{VCPUs: 1, Memory: 128}
	// A CPU-only pod naming a GPU profile gets no GPU.
	refuses(t, cfg, provider.InstanceTypeSpec{InstanceType: "t4-4", VCPUs: 1, Memory: 128}, "the pod requests 0", "GCP_INSTANCE_TYPES")
	// Machine types no profile uses are not nameable by default.
	refuses(t, cfg, provider.InstanceTypeSpec{InstanceType: "n1-standard-96", GPUs: 4}, "GCP_INSTANCE_TYPES", "not a profile")
	refuses(t, cfg, provider.InstanceTypeSpec{InstanceType: "custom-96-638976", GPUs: 4}, "GCP_INSTANCE_TYPES")
	refuses(t, cfg, provider.InstanceTypeSpec{InstanceType: "a3-highgpu-1g", GPUs: 1}, "GCP_INSTANCE_TYPES")
	// Fit is capped at the largest profile's size unless the admin raises it.
	refuses(t, cfg, provider.InstanceTypeSpec{GPUs: 4, VCPUs: 96}, "GCP_MAX_VCPUS_PER_POD", "t4-4", "96 vCPU(s)")
	refuses(t, cfg, provider.InstanceTypeSpec{GPUs: 1, Memory: 200 * 1024}, "GCP_MAX_MEMORY_PER_POD")
	// A profile's machine type may be named (the Mistral example's
	// n1-standard-8 with one T4) and gets only the declared GPUs.
	sel := selectFor(t, cfg, mustCatalog(t, "", ""), provider.InstanceTypeSpec{InstanceType: "n1-standard-8", GPUs: 1})
	if got := sel.FirstChoice().ShapeWords(); got != "n1-standard-8 + 1×nvidia-tesla-t4" {
		t.Errorf("named n1-standard-8 with 1 GPU: %s", got)
	}
	// A CPU-only pod never gets a GPU by fit, whatever its size.
	if p := selectFor(t, cfg, mustCatalog(t, "", ""), small).FirstChoice().Profile; p.GPUs() != 0 {
		t.Errorf("CPU-only pod got %s", catalog.Describe(p))
	}

	// GCP_INSTANCE_TYPES=t4-1,t4-2 binds fit too: default_gpus: 4 does not
	// get t4-4.
	listed := validConfig()
	listed.InstanceTypes = commaList{"t4-1", "t4-2"}
	refuses(t, listed, provider.InstanceTypeSpec{GPUs: 4}, "GCP_MAX_GPUS_PER_POD", "4 GPU(s)", "(t4-2, from GCP_INSTANCE_TYPES)")
	listed.MaxGPUsPerPod = 4
	refuses(t, listed, provider.InstanceTypeSpec{GPUs: 4}, "GCP_INSTANCE_TYPES (t4-1,t4-2)")
	refuses(t, listed, provider.InstanceTypeSpec{InstanceType: "t4-4", GPUs: 4}, "GCP_INSTANCE_TYPES (t4-1,t4-2)")
	if got := selectFor(t, listed, mustCatalog(t, "", ""), provider.InstanceTypeSpec{GPUs: 2}).FirstChoice().Profile.Name; got != "t4-2" {
		t.Errorf("2 GPUs under t4-1,t4-2: %s", got)
	}
	// Listing a GPU shape by name is the admin allowing it to any pod
	// that names it, CPU-only included.
	listed.InstanceTypes = commaList{"t4-1", "cpu-2"}
	if got := selectFor(t, listed, mustCatalog(t, "", ""), provider.InstanceTypeSpec{InstanceType: "t4-1"}).FirstChoice().Profile.GPUs(); got != 1 {
		t.Errorf("listed t4-1 named by a CPU-only pod: %d GPUs", got)
	}
	// ... but fit still gives a CPU-only pod a CPU-only shape.
	if got := selectFor(t, listed, mustCatalog(t, "", ""), small).FirstChoice().Profile.Name; got != "cpu-2" {
		t.Errorf("CPU-only pod under t4-1,cpu-2: %s", got)
	}
	// "auto" lets fit choose automatic shapes under a list, within the
	// caps (unset, t4-1's 15 GiB).
	listed.InstanceTypes = commaList{"t4-1", allowAuto}
	refuses(t, listed, provider.InstanceTypeSpec{GPUs: 1, Memory: 40 * 1024}, "GCP_MAX_MEMORY_PER_POD", "(t4-1, from GCP_INSTANCE_TYPES)")
	listed.MaxVCPUsPerPod, listed.MaxMemoryPerPod = 16, 60*1024
	if got := selectFor(t, listed, mustCatalog(t, "", ""), provider.InstanceTypeSpec{GPUs: 1, Memory: 40 * 1024}).FirstChoice().Profile.Name; got != catalog.AutoProfileName {
		t.Errorf("auto listed: %s", got)
	}

	// An explicit cap binds named profiles too.
	capped := validConfig()
	capped.MaxGPUsPerPod = 2
	refuses(t, capped, provider.InstanceTypeSpec{InstanceType: "t4-4", GPUs: 4}, "GCP_MAX_GPUS_PER_POD", "at most 2")
	refuses(t, capped, provider.InstanceTypeSpec{GPUs: 3}, "GCP_MAX_GPUS_PER_POD")
	capped.MaxGPUsPerPod = -1
	if err := capped.Validate(); err == nil || !strings.Contains(err.Error(), "GCP_MAX_GPUS_PER_POD") {
		t.Errorf("negative cap: %v", err)
	}
}
