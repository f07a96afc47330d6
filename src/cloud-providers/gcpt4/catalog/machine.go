// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// Shape is what GCE would report for a machine type. An attached
// GPU is not part of any machine type, so the shape of an N1+T4 podVM is
// synthesized from these tables and the GPU catalogue (gpufamilies.go)
// rather than looked up per create.
type Shape struct {
	Name      string
	Family    string
	VCPUs     int64
	MemoryMiB int64
	// BundledAccelerator is set for types whose GPU comes with the machine
	// (A3, G2); such types must not carry guestAccelerators.
	BundledAccelerator string
	BundledCount       int32
	// SoldAs and SoldNote restrict the provisioning models (BundledShape).
	SoldAs     []string
	SoldNote   string
	SharedCore bool
	// custom marks N1 custom types (custom-<vCPUs>-<MiB>).
	Custom bool
}

// n1MiBPerVCPU is memory per vCPU in each N1 family, as GCE defines them
// (3.75, 6.5 and 0.9 GB per vCPU; compute/docs/general-purpose-machines#n1_machine_types).
var n1MiBPerVCPU = map[string]float64{"standard": 3840, "highmem": 6656, "highcpu": 921.6}

// n1Sizes are the vCPU counts GCE offers in the predefined N1 families
// (n1-standard-1 exists, n1-highmem-1 and n1-highcpu-1 do not).
var n1Sizes = []int64{1, 2, 4, 8, 16, 32, 64, 96}

// e2Sizes and e2MiBPerVCPU are the predefined E2 types (4, 8 and 1 GB per
// vCPU; compute/docs/general-purpose-machines#e2_machine_types).
var (
	e2Sizes      = map[string][]int64{"standard": {2, 4, 8, 16, 32}, "highmem": {2, 4, 8, 16}, "highcpu": {2, 4, 8, 16, 32}}
	e2MiBPerVCPU = map[string]int64{"standard": 4096, "highmem": 8192, "highcpu": 1024}
)

// fixedShapes are the other types the built-in profiles use or that users
// commonly name; other types need vcpus and memoryMiB in their profile.
var fixedShapes = map[string]Shape{
	"e2-micro":       {Family: "e2", VCPUs: 2, MemoryMiB: 1024, SharedCore: true},
	"e2-small":       {Family: "e2", VCPUs: 2, MemoryMiB: 2048, SharedCore: true},
	"e2-medium":      {Family: "e2", VCPUs: 2, MemoryMiB: 4096, SharedCore: true},
	"f1-micro":       {Family: "f1", VCPUs: 1, MemoryMiB: 614, SharedCore: true},
	"g1-small":       {Family: "g1", VCPUs: 1, MemoryMiB: 1740, SharedCore: true},
	"c3-standard-4":  {Family: "c3", VCPUs: 4, MemoryMiB: 16384},
	"n2d-standard-4": {Family: "n2d", VCPUs: 4, MemoryMiB: 16384},
}

// isN1 reports whether machineType is an N1 type: predefined n1-* (not
// the shared-core f1/g1) or an N1 custom type.
func isN1(machineType string) bool {
	return strings.HasPrefix(machineType, "n1-") || strings.HasPrefix(machineType, "custom-")
}

// FamilyOf is the machine series of a type name ("n1" for N1 custom).
func FamilyOf(machineType string) string {
	if strings.HasPrefix(machineType, "custom-") {
		return "n1"
	}
	fam, _, _ := strings.Cut(machineType, "-")
	return fam
}

// LookupShape returns the shape of a known machine type.
func LookupShape(machineType string) (Shape, bool) {
	if s, ok := fixedShapes[machineType]; ok {
		s.Name = machineType
		return s, true
	}
	if s, ok := LookupBundled(machineType); ok {
		return s, true
	}
	family, size, ok := strings.Cut(machineType[strings.Index(machineType, "-")+1:], "-")
	n, err := strconv.ParseInt(size, 10, 64)
	switch {
	case !ok || err != nil:
	case strings.HasPrefix(machineType, "n1-"):
		if perCPU, known := n1MiBPerVCPU[family]; known && validN1Size(family, n) {
			// GCE reports n1-highcpu memory rounded to whole MiB.
			return Shape{Name: machineType, Family: "n1", VCPUs: n, MemoryMiB: int64(math.Round(float64(n) * perCPU))}, true
		}
	case strings.HasPrefix(machineType, "e2-"):
		if perCPU, known := e2MiBPerVCPU[family]; known && containsInt(e2Sizes[family], n) {
			return Shape{Name: machineType, Family: "e2", VCPUs: n, MemoryMiB: n * perCPU}, true
		}
	}
	// N1 custom types are custom-<vCPUs>-<MiB>.
	if rest, ok := strings.CutPrefix(machineType, "custom-"); ok {
		cpu, mem, ok := strings.Cut(rest, "-")
		n, err1 := strconv.ParseInt(cpu, 10, 64)
		m, err2 := strconv.ParseInt(mem, 10, 64)
		if ok && err1 == nil && err2 == nil && n > 0 && m > 0 {
			return Shape{Name: machineType, Family: "n1", VCPUs: n, MemoryMiB: m, Custom: true}, true
		}
	}
	return Shape{}, false
}

func validN1Size(family string, n int64) bool {
	if family != "standard" && n == 1 {
		return false
	}
	return containsInt(n1Sizes, n)
}

func containsInt(list []int64, n int64) bool {
	for _, v := range list {
		if v == n {
			return true
		}
	}
	return false
}

// N1 custom machine type limits: 1 or an even number of vCPUs up to 96,
// 0.9 to 6.5 GB per vCPU (922 to 6656 MiB), a multiple of 256 MiB
// (compute/docs/general-purpose-machines#custom_machine_types; the same
// numbers as Google's sample GoogleCloudPlatform/golang-samples
// compute/custom-machine-types, cpuSeriesN1Limit). Extended memory is not
// synthesized.
const (
	n1CustomMaxVCPUs     = 96
	n1CustomMinMiBPerCPU = 922
	n1CustomMaxMiBPerCPU = 6656
	customMemoryStepMiB  = 256
)

// CustomN1Error says why GCE would refuse custom-<vcpus>-<mib>, or nil.
func CustomN1Error(vcpus, mib int64) error {
	switch {
	case vcpus < 1 || vcpus > n1CustomMaxVCPUs || (vcpus > 1 && vcpus%2 != 0):
		return fmt.Errorf("an N1 custom type has 1 or an even number of vCPUs up to %d, not %d", n1CustomMaxVCPUs, vcpus)
	case mib%customMemoryStepMiB != 0:
		return fmt.Errorf("N1 custom memory is a multiple of %d MiB, not %d", customMemoryStepMiB, mib)
	case mib < vcpus*n1CustomMinMiBPerCPU || mib > vcpus*n1CustomMaxMiBPerCPU:
		return fmt.Errorf("N1 custom memory is %d to %d MiB per vCPU; %d MiB for %d vCPUs is outside", n1CustomMinMiBPerCPU, n1CustomMaxMiBPerCPU, mib, vcpus)
	}
	return nil
}

// smallestCustomN1 is the smallest valid N1 custom shape holding vcpus and
// mib, or false when none does within maxVCPUs and maxMiB.
func smallestCustomN1(vcpus, mib, maxVCPUs, maxMiB int64) (Shape, bool) {
	v := max(vcpus, 1)
	// Memory decides the vCPUs when it exceeds 6.5 GB per vCPU.
	v = max(v, (mib+n1CustomMaxMiBPerCPU-1)/n1CustomMaxMiBPerCPU)
	if v > 1 && v%2 != 0 {
		v++
	}
	m := max(mib, v*n1CustomMinMiBPerCPU)
	m = (m + customMemoryStepMiB - 1) / customMemoryStepMiB * customMemoryStepMiB
	if v > maxVCPUs || m > maxMiB || CustomN1Error(v, m) != nil {
		return Shape{}, false
	}
	name := fmt.Sprintf("custom-%d-%d", v, m)
	return Shape{Name: name, Family: "n1", VCPUs: v, MemoryMiB: m, Custom: true}, true
}

// predefinedN1 lists every predefined N1 shape.
func predefinedN1() []Shape {
	var out []Shape
	for _, fam := range []string{"standard", "highmem", "highcpu"} {
		for _, n := range n1Sizes {
			if s, ok := LookupShape(fmt.Sprintf("n1-%s-%d", fam, n)); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// predefinedE2 lists the predefined E2 shapes from e2-medium up. The
// smaller shared-core types (e2-micro, e2-small: 1 and 2 GiB) are left
// out: the podVM's agent and image pulls need more than they hold.
func predefinedE2() []Shape {
	out := []Shape{}
	if s, ok := LookupShape("e2-medium"); ok {
		out = append(out, s)
	}
	for _, fam := range []string{"standard", "highmem", "highcpu"} {
		for _, n := range e2Sizes[fam] {
			if s, ok := LookupShape(fmt.Sprintf("e2-%s-%d", fam, n)); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// LookupBundled is a machine type of the GPU catalogue that comes with its
// GPUs.
func LookupBundled(machineType string) (Shape, bool) {
	for i := range gpuFamilies {
		f := &gpuFamilies[i]
		for _, b := range f.Bundled {
			if b.MachineType == machineType {
				return b.shape(f), true
			}
		}
	}
	return Shape{}, false
}

// shape is the machine shape of a bundled type of family f.
func (b BundledShape) shape(f *GPUFamily) Shape {
	return Shape{Name: b.MachineType, Family: FamilyOf(b.MachineType), VCPUs: b.VCPUs, MemoryMiB: b.MemoryMiB,
		BundledAccelerator: f.Accelerator, BundledCount: b.GPUs, SoldAs: b.SoldAs, SoldNote: b.SoldNote}
}

// FamilyByAccelerator is the catalogue's row for a GCE accelerator type.
func FamilyByAccelerator(accelerator string) (*GPUFamily, bool) {
	for i := range gpuFamilies {
		if gpuFamilies[i].Accelerator == accelerator {
			return &gpuFamilies[i], true
		}
	}
	return nil, false
}

// AttachedFamilyFor is the GPU a machine type of an attaching series gets
// when none is named: the one its series states (the T4 for N1).
func AttachedFamilyFor(machineType string) (*GPUFamily, bool) {
	acc := series[FamilyOf(machineType)].attachedGPU
	if acc == "" {
		return nil, false
	}
	return FamilyByAccelerator(acc)
}

// DefaultFamily is the GPU the provider is built around, defaultSeries's
// stated one, named in messages that need an example.
func DefaultFamily() *GPUFamily {
	f, _ := FamilyByAccelerator(series[defaultSeries].attachedGPU)
	return f
}

// attachLimit is the largest VM for count attached GPUs.
func (f *GPUFamily) attachLimit(count int32) (AttachLimit, bool) {
	for _, l := range f.AttachLimits {
		if l.Count == count {
			return l, true
		}
	}
	return AttachLimit{}, false
}

// NextCount returns the smallest attachable count that holds n GPUs.
func (f *GPUFamily) NextCount(n int64) (int32, bool) {
	for _, l := range f.AttachLimits {
		if int64(l.Count) >= n {
			return l.Count, true
		}
	}
	return 0, false
}

// MaxAttach is the largest attachable count and its limit.
func (f *GPUFamily) MaxAttach() AttachLimit {
	return f.AttachLimits[len(f.AttachLimits)-1]
}

// countsText is the attachable counts in words: "1, 2 or 4".
func (f *GPUFamily) countsText() string {
	var words []string
	for _, l := range f.AttachLimits {
		words = append(words, strconv.Itoa(int(l.Count)))
	}
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// bundledTypes lists the machine types that come with the family's GPUs.
func (f *GPUFamily) bundledTypes() []string {
	var out []string
	for _, b := range f.Bundled {
		out = append(out, b.MachineType)
	}
	return out
}

// CheckAttachedShape rejects what GCE would reject for count GPUs of
// family f attached to a machine type, with a message naming field and
// fix. field is the config path of the profile.
func CheckAttachedShape(field, machineType string, f *GPUFamily, count int32, shape Shape) error {
	if f.AttachSeries == "" {
		return fmt.Errorf("%s.accelerator: %s comes only with the machine types %s; set machineType to one of them and remove accelerator and acceleratorCount",
			field, f.Accelerator, strings.Join(f.bundledTypes(), ", "))
	}
	if FamilyOf(machineType) != f.AttachSeries || shape.SharedCore {
		return fmt.Errorf("%s.machineType: %s attaches only to %s machine types, got %q; use one such as %s-standard-4", field, f.Accelerator, strings.ToUpper(f.AttachSeries), machineType, f.AttachSeries)
	}
	lim, ok := f.attachLimit(count)
	if !ok {
		want, fits := f.NextCount(int64(count))
		if !fits {
			return fmt.Errorf("%s.acceleratorCount: GCE attaches %s %s to one VM, got %d; split the workload over several pods", field, f.countsText(), f.Accelerator, count)
		}
		return fmt.Errorf("%s.acceleratorCount: GCE attaches %s %s to one VM, got %d; use %d", field, f.countsText(), f.Accelerator, count, want)
	}
	if shape.VCPUs > lim.MaxVCPUs || shape.MemoryMiB > lim.MaxMemoryMiB {
		return fmt.Errorf("%s.machineType: %s has %d vCPUs and %d MiB, over GCE's limit for %d×%s (%d vCPUs, %d MiB); use a smaller %s type or more GPUs",
			field, machineType, shape.VCPUs, shape.MemoryMiB, count, f.Accelerator, lim.MaxVCPUs, lim.MaxMemoryMiB, strings.ToUpper(f.AttachSeries))
	}
	return nil
}

// diskTypesFor lists the boot disk types a machine series takes; nil when
// the provider does not know the series (the API decides).
func diskTypesFor(family string) []string {
	return series[family].diskTypes
}

// CheckDiskType refuses a boot disk type the machine series does not take.
func CheckDiskType(field, machineType, diskType string) error {
	allowed := diskTypesFor(FamilyOf(machineType))
	if allowed == nil || slices.Contains(allowed, diskType) {
		return nil
	}
	return fmt.Errorf("%s: disk type %s does not attach to %s (%s series takes %s); set another disk type (GCP_DISK_TYPE, or diskType: in the profile)",
		field, diskType, machineType, strings.ToUpper(FamilyOf(machineType)), strings.Join(allowed, ", "))
}

// NeedsNVMe reports a VM whose disks attach only through NVMe: the series'
// rule, and every Confidential VM whatever the series
// (confidential-computing/confidential-vm/docs/supported-configurations#limitations).
func NeedsNVMe(machineType string, confidential bool) bool {
	return confidential || series[FamilyOf(machineType)].nvmeOnly
}

// NeedsGVNIC reports a series that networks only through gVNIC.
func NeedsGVNIC(machineType string) bool {
	return series[FamilyOf(machineType)].gvnicOnly
}

// checkMinCPUPlatform refuses a platform the series does not offer.
func checkMinCPUPlatform(field, machineType, platform string) error {
	if platform == "" || platform == "Automatic" {
		return nil
	}
	allowed := series[FamilyOf(machineType)].cpuPlatforms
	ok := allowed != nil
	if ok && slices.Contains(allowed, platform) {
		return nil
	}
	if !ok {
		return fmt.Errorf("%s.minCpuPlatform: %s takes no minimum CPU platform; remove minCpuPlatform", field, machineType)
	}
	return fmt.Errorf("%s.minCpuPlatform: %q is not a platform of %s; use one of %s", field, platform, machineType, strings.Join(allowed, ", "))
}

// SoldModels are the provisioning models GCE sells a machine type under:
// every model, unless its catalogue row says otherwise (a3-highgpu-1g only
// as Spot, Flex-start or from a reservation; of those, the provider
// creates Spot).
func SoldModels(machineType string) (models []string, note string) {
	if s, ok := LookupBundled(machineType); ok && len(s.SoldAs) > 0 {
		return s.SoldAs, s.SoldNote
	}
	return []string{setting.ProvisioningStandard, setting.ProvisioningSpot}, ""
}
