package gcpt4

import (
	"fmt"
	"strconv"
	"strings"
)

// AcceleratorT4 is GCE's accelerator type name for the NVIDIA T4.
const AcceleratorT4 = "nvidia-tesla-t4"

// machineShape is what GCE would report for a machine type. The T4 is not
// part of any N1 machine type, so the shape of an N1+T4 podVM is synthesized
// from this table rather than looked up per create.
type machineShape struct {
	vcpus     int64
	memoryMiB int64
	// bundledAccelerator is set for types whose GPU comes with the machine
	// (A3, G2); such types must not carry guestAccelerators.
	bundledAccelerator string
	bundledCount       int32
	sharedCore         bool
}

// n1MiBPerVCPU is memory per vCPU in each N1 family, as GCE defines them.
var n1MiBPerVCPU = map[string]float64{"standard": 3840, "highmem": 6656, "highcpu": 921.6}

// n1Sizes are the vCPU counts GCE offers in the predefined N1 families.
var n1Sizes = []int64{1, 2, 4, 8, 16, 32, 64, 96}

// fixedShapes are the non-N1 types the built-in profiles use or that users
// commonly name; other types need vcpus and memoryMiB in their profile.
var fixedShapes = map[string]machineShape{
	"e2-medium":      {vcpus: 2, memoryMiB: 4096, sharedCore: true},
	"e2-standard-2":  {vcpus: 2, memoryMiB: 8192},
	"e2-standard-4":  {vcpus: 4, memoryMiB: 16384},
	"f1-micro":       {vcpus: 1, memoryMiB: 614, sharedCore: true},
	"g1-small":       {vcpus: 1, memoryMiB: 1740, sharedCore: true},
	"c3-standard-4":  {vcpus: 4, memoryMiB: 16384},
	"n2d-standard-4": {vcpus: 4, memoryMiB: 16384},
	"a3-highgpu-1g":  {vcpus: 26, memoryMiB: 239616, bundledAccelerator: "nvidia-h100-80gb", bundledCount: 1},
	"g2-standard-4":  {vcpus: 4, memoryMiB: 16384, bundledAccelerator: "nvidia-l4", bundledCount: 1},
	"g2-standard-8":  {vcpus: 8, memoryMiB: 32768, bundledAccelerator: "nvidia-l4", bundledCount: 1},
}

// isN1 reports whether machineType is an N1 type a T4 can attach to:
// predefined n1-* (not the shared-core f1/g1) or an N1 custom type.
func isN1(machineType string) bool {
	return strings.HasPrefix(machineType, "n1-") || strings.HasPrefix(machineType, "custom-")
}

// lookupShape returns the shape of a known machine type.
func lookupShape(machineType string) (machineShape, bool) {
	if s, ok := fixedShapes[machineType]; ok {
		return s, true
	}
	if family, size, ok := strings.Cut(strings.TrimPrefix(machineType, "n1-"), "-"); ok && strings.HasPrefix(machineType, "n1-") {
		perCPU, known := n1MiBPerVCPU[family]
		n, err := strconv.ParseInt(size, 10, 64)
		if !known || err != nil || !validN1Size(family, n) {
			return machineShape{}, false
		}
		return machineShape{vcpus: n, memoryMiB: int64(float64(n) * perCPU)}, true
	}
	// N1 custom types are custom-<vCPUs>-<MiB>.
	if rest, ok := strings.CutPrefix(machineType, "custom-"); ok {
		cpu, mem, ok := strings.Cut(rest, "-")
		n, err1 := strconv.ParseInt(cpu, 10, 64)
		m, err2 := strconv.ParseInt(mem, 10, 64)
		if ok && err1 == nil && err2 == nil && n > 0 && m > 0 {
			return machineShape{vcpus: n, memoryMiB: m}, true
		}
	}
	return machineShape{}, false
}

func validN1Size(family string, n int64) bool {
	if family != "standard" && n == 1 {
		return false
	}
	for _, s := range n1Sizes {
		if s == n {
			return true
		}
	}
	return false
}

// t4Limit is the largest N1 shape GCE accepts for a number of T4s.
type t4Limit struct {
	maxVCPUs     int64
	maxMemoryMiB int64
}

// t4Limits holds GCE's N1 ceilings per T4 count; 3 is absent because GCE
// only attaches 1, 2 or 4 T4s.
var t4Limits = map[int32]t4Limit{
	1: {maxVCPUs: 48, maxMemoryMiB: 312 * 1024},
	2: {maxVCPUs: 48, maxMemoryMiB: 312 * 1024},
	4: {maxVCPUs: 96, maxMemoryMiB: 624 * 1024},
}

// validT4Count returns the smallest count GCE accepts that holds n GPUs.
func nextT4Count(n int64) (int32, bool) {
	for _, c := range []int32{1, 2, 4} {
		if int64(c) >= n {
			return c, true
		}
	}
	return 0, false
}

// checkT4Shape rejects what GCE would reject for T4s on a machine type, with
// a message naming field and fix. field is the config path of the profile.
func checkT4Shape(field, machineType string, count int32, shape machineShape) error {
	if !isN1(machineType) {
		return fmt.Errorf("%s.machineType: %s attaches only to N1 machine types (n1-standard-*, n1-highmem-*, n1-highcpu-* or N1 custom-*), got %q; pick an N1 type such as n1-standard-4", field, AcceleratorT4, machineType)
	}
	lim, ok := t4Limits[count]
	if !ok {
		want, fits := nextT4Count(int64(count))
		if !fits {
			return fmt.Errorf("%s.acceleratorCount: GCE attaches 1, 2 or 4 %s to one VM, got %d; split the workload over several pods", field, AcceleratorT4, count)
		}
		return fmt.Errorf("%s.acceleratorCount: GCE attaches 1, 2 or 4 %s to one VM, got %d; use %d", field, AcceleratorT4, count, want)
	}
	if shape.vcpus > lim.maxVCPUs || shape.memoryMiB > lim.maxMemoryMiB {
		return fmt.Errorf("%s.machineType: %s has %d vCPUs and %d MiB, over GCE's limit for %d×%s (%d vCPUs, %d MiB); use a smaller N1 type or more GPUs",
			field, machineType, shape.vcpus, shape.memoryMiB, count, AcceleratorT4, lim.maxVCPUs, lim.maxMemoryMiB)
	}
	return nil
}
