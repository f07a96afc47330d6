// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// The emulator's accelerators: one row per GPU family, with what GCE
// documents about it and where the default world offers it. The
// catalogue, the insert validation, the machine types of each zone and
// the regional quotas read these rows; none of them names a GPU. Adding a
// family is adding a row here and its case in accels_test.go.
//
// This table is the emulator's own reading of GCE's documentation and is
// deliberately not derived from the provider's catalogue
// (gcpt4/catalog/gpufamilies.go): the provider is tested against it, so an error
// in the provider's rows must not be copied into the emulator.
//
// Sources:
//   - Per-count limits of GPUs attached to N1: https://cloud.google.com/compute/docs/gpus,
//     "N1 general-purpose machine series" (the NVIDIA T4, V100, P100 and P4
//     tables: GPU count, available vCPUs, available memory). Every limit
//     there is "1 to N vCPUs, 1 to M GB", M being 6.5 GB per vCPU of N,
//     except the P100's 4-GPU limit in us-east1-c, europe-west1-b and
//     europe-west1-d (64 vCPUs, 208 GB instead of 96 and 624).
//   - Bundled machine types: https://cloud.google.com/compute/docs/accelerator-optimized-machines
//     (#a3-high-vms, #g2-vms).
//   - Zones: https://cloud.google.com/compute/docs/gpus/gpu-regions-zones;
//     the default world has four regions, so each row lists the documented
//     zones among those.
//   - Quota metrics: https://cloud.google.com/compute/resource-usage#gpu_quota.

// Accelerator names the default world's rows and fixed rules refer to.
const (
	accelT4   = "nvidia-tesla-t4"
	accelV100 = "nvidia-tesla-v100"
	accelP100 = "nvidia-tesla-p100"
	accelP4   = "nvidia-tesla-p4"
	accelH100 = "nvidia-h100-80gb"
	accelL4   = "nvidia-l4"
)

// accelSpec is one accelerator family: one row of the table.
type accelSpec struct {
	name        string
	description string
	maxCards    int32
	// quotaMetric and preemptibleMetric name the regional quotas a GPU
	// consumes; quota and preemptibleQuota are their limits in each
	// region of the default world.
	quotaMetric, preemptibleMetric string
	quota, preemptibleQuota        float64
	// zones are the default world's zones that offer the accelerator.
	zones []string
	// attach lists, smallest count first, the counts that attach to N1
	// and the largest VM each allows; nil for a family sold only bundled.
	attach []attachLimit
	// bundled are the machine types that come with this accelerator.
	bundled []bundledType
}

// attachLimit is the largest N1 VM GCE accepts with gpus attached GPUs.
type attachLimit struct {
	gpus        int32
	maxCPUs     int32
	maxMemoryGB int32
	// zones, when set, are the only zones the limit holds in; there it
	// replaces the limit for the same count without zones.
	zones []string
}

// bundledType is an accelerator-optimized machine type and its GPUs.
type bundledType struct {
	name           string
	cpus, memoryMB int32
	gpus           int32
}

// accelTable returns the rows, in the order zones list them. It builds
// them afresh for each world, so no world shares state with another.
func accelTable() []*accelSpec {
	return []*accelSpec{
		{
			name: accelT4, description: "NVIDIA T4", maxCards: 4,
			quotaMetric: "NVIDIA_T4_GPUS", preemptibleMetric: "PREEMPTIBLE_NVIDIA_T4_GPUS", quota: 8, preemptibleQuota: 8,
			zones: []string{"us-central1-a", "us-central1-b", "us-central1-f", "us-east1-c", "us-east1-d", "europe-west4-b", "europe-west4-c"},
			// compute/docs/gpus, "NVIDIA T4": 1 or 2 GPUs up to 48 vCPUs
			// and 312 GB, 4 GPUs up to 96 vCPUs and 624 GB.
			attach: []attachLimit{{gpus: 1, maxCPUs: 48, maxMemoryGB: 312}, {gpus: 2, maxCPUs: 48, maxMemoryGB: 312}, {gpus: 4, maxCPUs: 96, maxMemoryGB: 624}},
		},
		{
			name: accelV100, description: "NVIDIA V100", maxCards: 8,
			quotaMetric: "NVIDIA_V100_GPUS", preemptibleMetric: "PREEMPTIBLE_NVIDIA_V100_GPUS", quota: 8, preemptibleQuota: 8,
			zones: []string{"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-east1-c", "europe-west4-a", "europe-west4-b", "europe-west4-c"},
			// compute/docs/gpus, "NVIDIA V100": 12 vCPUs and 78 GB per GPU,
			// for 1, 2, 4 or 8 GPUs.
			attach: []attachLimit{{gpus: 1, maxCPUs: 12, maxMemoryGB: 78}, {gpus: 2, maxCPUs: 24, maxMemoryGB: 156}, {gpus: 4, maxCPUs: 48, maxMemoryGB: 312}, {gpus: 8, maxCPUs: 96, maxMemoryGB: 624}},
		},
		{
			name: accelP100, description: "NVIDIA P100", maxCards: 4,
			quotaMetric: "NVIDIA_P100_GPUS", preemptibleMetric: "PREEMPTIBLE_NVIDIA_P100_GPUS", quota: 4, preemptibleQuota: 4,
			zones: []string{"us-central1-c", "us-central1-f", "us-east1-b", "us-east1-c", "europe-west4-a"},
			// compute/docs/gpus, "NVIDIA P100": 1 GPU up to 16 vCPUs and
			// 104 GB, 2 GPUs 32 and 208, 4 GPUs 96 and 624 except in
			// us-east1-c (and europe-west1-b, -d), where 64 and 208.
			attach: []attachLimit{
				{gpus: 1, maxCPUs: 16, maxMemoryGB: 104}, {gpus: 2, maxCPUs: 32, maxMemoryGB: 208},
				{gpus: 4, maxCPUs: 96, maxMemoryGB: 624}, {gpus: 4, maxCPUs: 64, maxMemoryGB: 208, zones: []string{"us-east1-c"}},
			},
		},
		{
			name: accelP4, description: "NVIDIA P4", maxCards: 4,
			quotaMetric: "NVIDIA_P4_GPUS", preemptibleMetric: "PREEMPTIBLE_NVIDIA_P4_GPUS", quota: 4, preemptibleQuota: 4,
			zones: []string{"us-central1-a", "us-central1-c", "europe-west4-b", "europe-west4-c"},
			// compute/docs/gpus, "NVIDIA P4": 1 GPU up to 24 vCPUs and
			// 156 GB, 2 GPUs 48 and 312, 4 GPUs 96 and 624.
			attach: []attachLimit{{gpus: 1, maxCPUs: 24, maxMemoryGB: 156}, {gpus: 2, maxCPUs: 48, maxMemoryGB: 312}, {gpus: 4, maxCPUs: 96, maxMemoryGB: 624}},
		},
		{
			name: accelH100, description: "NVIDIA H100 80GB", maxCards: 8,
			quotaMetric: "NVIDIA_H100_GPUS", preemptibleMetric: "PREEMPTIBLE_NVIDIA_H100_GPUS", quota: 0, preemptibleQuota: 2,
			zones: []string{"us-central1-a", "us-east5-a", "europe-west4-c"},
			// compute/docs/accelerator-optimized-machines#a3-high-vms: the
			// world models only the 1-GPU A3 High type.
			bundled: []bundledType{{name: "a3-highgpu-1g", cpus: 26, memoryMB: 239616, gpus: 1}},
		},
		{
			name: accelL4, description: "NVIDIA L4", maxCards: 8,
			quotaMetric: "NVIDIA_L4_GPUS", preemptibleMetric: "PREEMPTIBLE_NVIDIA_L4_GPUS", quota: 4, preemptibleQuota: 4,
			zones: []string{"us-central1-a", "us-central1-b", "us-central1-c"},
			// G2: 1, 2, 4 or 8 L4s, 4 GB per vCPU (compute/docs/accelerator-optimized-machines#g2-vms).
			bundled: []bundledType{
				{name: "g2-standard-4", cpus: 4, memoryMB: 4 * 4096, gpus: 1},
				{name: "g2-standard-8", cpus: 8, memoryMB: 8 * 4096, gpus: 1},
				{name: "g2-standard-12", cpus: 12, memoryMB: 12 * 4096, gpus: 1},
				{name: "g2-standard-16", cpus: 16, memoryMB: 16 * 4096, gpus: 1},
				{name: "g2-standard-24", cpus: 24, memoryMB: 24 * 4096, gpus: 2},
				{name: "g2-standard-32", cpus: 32, memoryMB: 32 * 4096, gpus: 1},
				{name: "g2-standard-48", cpus: 48, memoryMB: 48 * 4096, gpus: 4},
				{name: "g2-standard-96", cpus: 96, memoryMB: 96 * 4096, gpus: 8},
			},
		},
	}
}

// counts are the GPU counts that attach, smallest first; nil for a
// bundled-only family.
func (a *accelSpec) counts() []int32 {
	var out []int32
	for _, l := range a.attach {
		if !slices.Contains(out, l.gpus) {
			out = append(out, l.gpus)
		}
	}
	return out
}

// limit is the largest VM gpus GPUs attach to in zone: the row's limit for
// that zone if it has one, else its limit for every zone.
func (a *accelSpec) limit(gpus int32, zone string) (attachLimit, bool) {
	var found attachLimit
	ok := false
	for _, l := range a.attach {
		if l.gpus != gpus {
			continue
		}
		if len(l.zones) == 0 && !ok {
			found, ok = l, true
		}
		if slices.Contains(l.zones, zone) {
			return l, true
		}
	}
	return found, ok
}

// InstanceGPUs is how many GPUs an instance has, as gpu-init in its guest
// would count them: the accelerators attached to it, else those its
// machine type comes with (A2, A3, G2), from the rows above. It reads
// nothing of a Server, so a boot console (SetBootConsole) may call it
// while the Server's lock is held.
func InstanceGPUs(inst *computepb.Instance) int32 {
	var n int32
	for _, a := range inst.GetGuestAccelerators() {
		n += a.GetAcceleratorCount()
	}
	if n > 0 {
		return n
	}
	mt := inst.GetMachineType()
	mt = mt[strings.LastIndex(mt, "/")+1:]
	for _, a := range accelTable() {
		for _, b := range a.bundled {
			if b.name == mt {
				return b.gpus
			}
		}
	}
	return 0
}
