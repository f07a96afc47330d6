// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"slices"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// The GPU catalogue: one row per GPU family Compute Engine sells, with
// everything the provider and its tools need to know about it. Selection,
// the profile checks, the zone and quota checks and `gcp-t4 plan serve`
// read these rows; none of them names a GPU. Adding a family is adding a
// row here, its prices in prices.json and its tests.
//
// Shapes and limits: compute/docs/gpus (the GPU models, which machine
// series each attaches to, the per-count N1 limits) and
// compute/docs/accelerator-optimized-machines (A3 and G2 machine types,
// each with a fixed GPU count, vCPUs and memory). Quota metrics:
// compute/resource-usage#gpu_quota (NVIDIA_<MODEL>_GPUS per region,
// PREEMPTIBLE_NVIDIA_<MODEL>_GPUS for Spot).

// AttachLimit is, for one count of a GPU attached to a machine series, the
// largest VM GCE accepts.
type AttachLimit struct {
	Count        int32
	MaxVCPUs     int64
	MaxMemoryMiB int64
}

// BundledShape is a machine type that comes with its GPUs: the VM cannot
// carry guestAccelerators, and the type's price includes the GPUs.
type BundledShape struct {
	MachineType string
	GPUs        int32
	VCPUs       int64
	MemoryMiB   int64
	// SoldAs lists the provisioning models GCE sells the type under when
	// that is not every model; SoldNote says so in words.
	SoldAs   []string
	SoldNote string
}

// GPUServing is what `gcp-t4 plan serve` sizes a model with. Peak figures
// are the data sheet's; Sustained ones are what the calculation assumes a
// serving engine reaches, until measured on the GPU.
type GPUServing struct {
	// CUDAMemoryGiB is the total CUDA reports (torch.cuda.mem_get_info),
	// less than the data sheet's (ECC and the driver's reservation).
	CUDAMemoryGiB float64
	// Capability is the CUDA compute capability times ten (7.5 -> 75).
	Capability int
	// DTypes are the floating-point types the GPU computes in, as vLLM's
	// --dtype names them.
	DTypes []string
	// PeakBandwidthGBps and SustainedBandwidthGBps are memory bandwidth.
	PeakBandwidthGBps, SustainedBandwidthGBps float64
	// PeakFP16TFLOPS and SustainedFP16TFLOPS are dense fp16 tensor-core rates.
	PeakFP16TFLOPS, SustainedFP16TFLOPS float64
	// Source cites the figures.
	Source string
}

// GPUFamily is one row of the GPU catalogue.
type GPUFamily struct {
	// Name is the short name tools take (--gpu t4).
	Name string
	// Accelerator is GCE's accelerator type name.
	Accelerator string
	// Description is GCE's description of the accelerator type.
	Description string
	// MemoryGB is the data sheet's GPU memory.
	MemoryGB int
	// AttachSeries is the machine series the GPU attaches to, with the
	// counts GCE accepts and the largest VM per count, smallest count
	// first; empty for a GPU that only comes bundled.
	AttachSeries string
	AttachLimits []AttachLimit
	// Bundled are the machine types that come with this GPU.
	Bundled []BundledShape
	// Automatic families are chosen by fit for any GPU pod the admin's
	// limits allow; the others only when the admin lists the accelerator
	// in GCP_INSTANCE_TYPES, or when a pod names a profile or machine type
	// that has them.
	Automatic bool
	// QuotaMetric and PreemptibleQuotaMetric are the regional quotas a
	// podVM's GPUs count against (standard, Spot).
	QuotaMetric, PreemptibleQuotaMetric string
	// Serving is nil for a GPU plan serve does not size for.
	Serving *GPUServing
}

// gpuFamilies is the catalogue, in the order ties are broken.
var gpuFamilies = []GPUFamily{
	{
		Name: "t4", Accelerator: "nvidia-tesla-t4", Description: "NVIDIA T4", MemoryGB: 16,
		// compute/docs/gpus, "NVIDIA T4": 1, 2 or 4 GPUs on N1; 1 and 2 GPUs
		// up to 48 vCPUs and 312 GB, 4 GPUs up to 96 vCPUs and 624 GB.
		AttachSeries: "n1",
		AttachLimits: []AttachLimit{
			{Count: 1, MaxVCPUs: 48, MaxMemoryMiB: 312 * 1024},
			{Count: 2, MaxVCPUs: 48, MaxMemoryMiB: 312 * 1024},
			{Count: 4, MaxVCPUs: 96, MaxMemoryMiB: 624 * 1024},
		},
		Automatic:   true,
		QuotaMetric: "NVIDIA_T4_GPUS", PreemptibleQuotaMetric: "PREEMPTIBLE_NVIDIA_T4_GPUS",
		// A T4 has 16 GiB of GDDR6; with ECC on, as on Compute Engine,
		// PyTorch reports about 14.75 GiB total (nvidia-smi: 15360 MiB,
		// less the driver's reservation). The sustained figures assume 75 %
		// of peak bandwidth (what streaming kernels reach on GDDR6) and
		// 25 TFLOPS (a 70 W T4 clocks down under sustained tensor-core
		// load), until test/device/gpu-check.sh measures them.
		Serving: &GPUServing{
			CUDAMemoryGiB: 14.75, Capability: 75, DTypes: []string{"float16", "float32"},
			PeakBandwidthGBps: 320, SustainedBandwidthGBps: 240, PeakFP16TFLOPS: 65, SustainedFP16TFLOPS: 25,
			Source: "NVIDIA T4 Tensor Core GPU data sheet (320 GB/s, 65 TFLOPS mixed precision, compute capability 7.5)",
		},
	},
	{
		Name: "l4", Accelerator: "nvidia-l4", Description: "NVIDIA L4", MemoryGB: 24,
		// compute/docs/accelerator-optimized-machines#g2-vms: G2 standard
		// types with 1, 2, 4 or 8 L4s, 4 GB of memory per vCPU.
		Bundled: []BundledShape{
			{MachineType: "g2-standard-4", GPUs: 1, VCPUs: 4, MemoryMiB: 16 * 1024},
			{MachineType: "g2-standard-8", GPUs: 1, VCPUs: 8, MemoryMiB: 32 * 1024},
			{MachineType: "g2-standard-12", GPUs: 1, VCPUs: 12, MemoryMiB: 48 * 1024},
			{MachineType: "g2-standard-16", GPUs: 1, VCPUs: 16, MemoryMiB: 64 * 1024},
			{MachineType: "g2-standard-24", GPUs: 2, VCPUs: 24, MemoryMiB: 96 * 1024},
			{MachineType: "g2-standard-32", GPUs: 1, VCPUs: 32, MemoryMiB: 128 * 1024},
			{MachineType: "g2-standard-48", GPUs: 4, VCPUs: 48, MemoryMiB: 192 * 1024},
			{MachineType: "g2-standard-96", GPUs: 8, VCPUs: 96, MemoryMiB: 384 * 1024},
		},
		QuotaMetric: "NVIDIA_L4_GPUS", PreemptibleQuotaMetric: "PREEMPTIBLE_NVIDIA_L4_GPUS",
		// 24 GB of GDDR6; nvidia-smi reports 23034 MiB with ECC on, and
		// the 22.0 GiB CUDA total assumes the driver's reservation seen on
		// the T4 (--gpu-memory takes a measured figure). Sustained figures
		// as the T4's: 75 % of peak bandwidth, and the T4's measured share
		// of its peak tensor rate (25 of 65) for a GPU of the same 72 W
		// class, until measured.
		Serving: &GPUServing{
			CUDAMemoryGiB: 22.0, Capability: 89, DTypes: []string{"bfloat16", "float16", "float32"},
			PeakBandwidthGBps: 300, SustainedBandwidthGBps: 225, PeakFP16TFLOPS: 121, SustainedFP16TFLOPS: 46,
			Source: "NVIDIA L4 Tensor Core GPU data sheet (24 GB GDDR6, 300 GB/s, 242 TFLOPS FP16/BF16 with sparsity, so 121 dense); compute capability 8.9 (NVIDIA's CUDA GPUs list)",
		},
	},
	{
		Name: "h100", Accelerator: "nvidia-h100-80gb", Description: "NVIDIA H100 80GB", MemoryGB: 80,
		// compute/docs/accelerator-optimized-machines#a3-high-vms: A3 High
		// with fewer than 8 GPUs is sold only as Spot, Flex-start or from a
		// reservation; of those, the provider creates Spot.
		Bundled: []BundledShape{
			{MachineType: "a3-highgpu-1g", GPUs: 1, VCPUs: 26, MemoryMiB: 234 * 1024,
				SoldAs:   []string{setting.ProvisioningSpot},
				SoldNote: "a3-highgpu-1g is sold only as Spot, Flex-start or from a reservation (no on-demand STANDARD); gcp-t4 creates it as SPOT"},
		},
		QuotaMetric: "NVIDIA_H100_GPUS", PreemptibleQuotaMetric: "PREEMPTIBLE_NVIDIA_H100_GPUS",
	},
}

// GPUUse is a GPU family a configuration may create podVMs with, and how:
// what ConfigVerifier and `gcp-t4 preflight` check zones and quota for.
type GPUUse struct {
	Family GPUFamily
	// Automatic is set when fit may choose the family for any GPU pod: a
	// configured zone without it, or too little quota, fails the checks.
	// Otherwise only pods naming a shape that has it get it: such a zone is
	// reported, not fatal (the adaptor must not refuse T4 pods because an
	// explicit H100 profile exists).
	Automatic bool
	// MaxGPUs is the most GPUs one podVM of the family takes.
	MaxGPUs int64
	// Via names what brings the family in: profiles, GCP_INSTANCE_TYPES.
	Via []string
}

// GPUFamilies is the GPU catalogue, in its order.
func GPUFamilies() []GPUFamily { return slices.Clone(gpuFamilies) }

// LookupGPUFamily finds a catalogue row by short name (t4) or GCE
// accelerator type (nvidia-tesla-t4).
func LookupGPUFamily(name string) (GPUFamily, bool) {
	for _, f := range gpuFamilies {
		if f.Name == name || f.Accelerator == name {
			return f, true
		}
	}
	return GPUFamily{}, false
}

// ShapeOf is a machine type's vCPUs and memory as the provider knows them
// (predefined N1/E2, N1 custom, and the GPU catalogue's bundled types).
func ShapeOf(machineType string) (vcpus, memoryMiB int64, ok bool) {
	s, ok := LookupShape(machineType)
	return s.VCPUs, s.MemoryMiB, ok
}

// machineSeries is one row of the machine series the provider knows: the
// rules GCE applies to a VM of the series whatever its GPUs.
type machineSeries struct {
	// diskTypes are the boot disk types the series takes; nil when the
	// provider does not know (the API decides). Hyperdisk does not attach
	// to N1 or E2 (compute/docs/disks/hyperdisks, "Machine series
	// support"); C3 and A3 take Balanced/SSD Persistent Disk and Hyperdisk
	// but not pd-standard (compute/docs/general-purpose-machines#c3_disks,
	// compute/docs/accelerator-optimized-machines#a3-disks).
	diskTypes []string
	// nvmeOnly series attach disks only through NVMe
	// (compute/docs/disks/about-persistent-disks#disk-interface).
	nvmeOnly bool
	// gvnicOnly series network only through gVNIC
	// (compute/docs/networking/using-gvnic).
	gvnicOnly bool
	// cpuPlatforms are the minCpuPlatform values GCE accepts
	// (compute/docs/instances/specify-min-cpu-platform#availablezones);
	// nil for a series that takes none (E2, shared-core).
	cpuPlatforms []string
	// attachedGPU is the accelerator a machine type of the series gets
	// when it is named with a GPU count and no accelerator (a machine_type
	// annotation, a listed N1 type): stated here, never read from the
	// catalogue's order, and required of every series a family attaches
	// to, so a second family attaching to N1 cannot change what an N1
	// type gets (TestSeriesStateTheirAttachedGPU).
	attachedGPU string
}

// defaultSeries is the series the provider is built around: its stated
// GPU (attachedGPU) is the one messages name as the example, and its
// largest attached shape is what a GPU request nothing holds is compared
// with.
const defaultSeries = "n1"

var (
	diskTypesWithoutHyperdisk = []string{"pd-standard", "pd-balanced", "pd-ssd", "pd-extreme"}
	diskTypesWithoutStandard  = []string{"pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-balanced", "hyperdisk-extreme", "hyperdisk-throughput", "hyperdisk-ml"}
)

// series is the machine series table.
var series = map[string]machineSeries{
	"n1": {diskTypes: diskTypesWithoutHyperdisk, cpuPlatforms: []string{"Intel Skylake", "Intel Broadwell", "Intel Haswell", "Intel Ivy Bridge", "Intel Sandy Bridge"},
		attachedGPU: "nvidia-tesla-t4"},
	"e2":  {diskTypes: diskTypesWithoutHyperdisk},
	"f1":  {diskTypes: diskTypesWithoutHyperdisk},
	"g1":  {diskTypes: diskTypesWithoutHyperdisk},
	"n2d": {diskTypes: diskTypesWithoutHyperdisk, cpuPlatforms: []string{"AMD Milan", "AMD Rome"}},
	"c3":  {diskTypes: diskTypesWithoutStandard, nvmeOnly: true, gvnicOnly: true, cpuPlatforms: []string{"Intel Sapphire Rapids"}},
	"a3":  {diskTypes: diskTypesWithoutStandard, nvmeOnly: true, gvnicOnly: true, cpuPlatforms: []string{"Intel Sapphire Rapids"}},
	"g2":  {cpuPlatforms: []string{"Intel Cascade Lake"}},
}
