package fit

import (
	"fmt"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"

	"github.com/caa-gcp-t4/gcp-t4/internal/prices"
)

// podVMMachineType is the example's machine type for one single-T4 podVM
// (install/examples/mistral-tp2: the t4-1 profile's n1-standard-4 is short
// of memory for Ray and vLLM).
const podVMMachineType = "n1-standard-8"

// multiGPUProfile is the provider's built-in profile with n GPUs of the
// accelerator in one VM (t4-2, t4-4), read from the provider's catalogue
// rather than copied here.
func multiGPUProfile(accelerator string, n int) (catalog.Profile, bool) {
	cat, err := catalog.New("", "")
	if err != nil {
		return catalog.Profile{}, false
	}
	for _, p := range cat.Profiles() {
		if p.GPUModel() == accelerator && p.GPUs() == int64(n) && !p.Explicit && p.Accelerator != "" {
			return p, true
		}
	}
	return catalog.Profile{}, false
}

// Layout is one way to place a tensor-parallel group on podVMs, with its
// estimates at the same engine settings.
type Layout struct {
	Name string
	Path Path
	// VMs podVMs of MachineType with GPUsPerVM T4s each; Profile names the
	// provider profile when there is one.
	VMs, GPUsPerVM       int
	MachineType, Profile string
	// Hourly is the on-demand price of all the podVMs (the provider's
	// price table); PriceKnown is false when a part has no price.
	Hourly     float64
	PriceKnown bool
	PriceAsOf  string
	// QuotaGPUs and QuotaN1VCPUs are what the layout takes from the
	// project's NVIDIA_T4_GPUS / GPUS_ALL_REGIONS and N1 CPU quotas.
	QuotaGPUs, QuotaN1VCPUs int
	// Result is the full calculation on this path.
	Result Result
	// Pipeline is the same podVMs with pipeline parallelism instead
	// (one stage per podVM); only on the VPC path, where vLLM's advice to
	// put pipeline parallelism between nodes applies. Nil without the
	// model's shape.
	Pipeline *Pipeline
	// Needs is what must hold for the layout to work.
	Needs []string
}

// Layouts compares the two-podVM layout (one T4 per podVM, over the VPC)
// and the one-podVM layout (all T4s in one VM) for cfg's tensor-parallel
// size; nil when no multi-T4 profile has that many GPUs or the GPU is not
// a T4.
func Layouts(cfg Config) ([]Layout, error) {
	// The two-podVM example is the T4's: GPUs attached one per N1 VM.
	if cfg.GPU.Accelerator != "nvidia-tesla-t4" {
		return nil, nil
	}
	prof, ok := multiGPUProfile(cfg.GPU.Accelerator, cfg.TP)
	if !ok {
		return nil, nil
	}
	splitVCPUs, _, _ := catalog.ShapeOf(podVMMachineType)
	tab, err := prices.Load()
	if err != nil {
		return nil, fmt.Errorf("reading the price table: %w", err)
	}
	split := Layout{
		Name: fmt.Sprintf("%d podVMs", cfg.TP), Path: PathVPC, VMs: cfg.TP, GPUsPerVM: 1, MachineType: podVMMachineType,
		QuotaGPUs: cfg.TP, QuotaN1VCPUs: cfg.TP * int(splitVCPUs),
		Needs: []string{
			"a VPC MTU of at least 1500: the pod's VXLAN tunnel carries 1450-byte packets plus 50 bytes (the NCCL check's large-message step proves it)",
			"udp:4789 (VXLAN) and tcp:15150 between worker nodes and podVMs, both directions (gcp-t4 preflight)",
			"single-T4 VMs only: fits a quota or zone that cannot give one VM several T4s",
			"each podVM pulls the image and downloads the model itself",
		},
	}
	one := Layout{
		Name: "1 podVM", Path: PathHost, VMs: 1, GPUsPerVM: cfg.TP, MachineType: prof.MachineType, Profile: prof.Name,
		QuotaGPUs: cfg.TP, QuotaN1VCPUs: int(prof.VCPUs),
		Needs: []string{
			fmt.Sprintf("a zone with %d T4s free for one VM (%s: %s + %d x T4; GCE attaches 1, 2 or 4 T4s to an N1 VM)", cfg.TP, prof.Name, prof.MachineType, cfg.TP),
			"the pod asks for nvidia.com/gpu: " + fmt.Sprint(cfg.TP) + "; gpu-init writes a CDI entry for every GPU and CAA asks for nvidia.com/gpu=all, so the container sees all of them",
			"NCCL connects the GPUs inside the VM: P2P over PCIe when CUDA reports peer access, otherwise SHM through host memory (GCE passes the GPUs through; a T4 has no NVLink); with NCCL_DEBUG=INFO the log says which: via P2P/... or via SHM/...",
			"/dev/shm large enough for NCCL's SHM buffers and Ray's object store (kata mounts it with no size: half the podVM's RAM)",
		},
	}
	out := []Layout{split, one}
	for i := range out {
		l := &out[i]
		c := cfg
		c.Decode.Path = l.Path
		if l.Path == PathHost {
			// A measured figure belongs to the path it was measured on:
			// the NCCL check's pods are the two-podVM layout.
			c.Decode.NCCLLatency, c.Decode.BusBandwidth = 0, 0
		}
		if l.Result, err = Compute(c); err != nil {
			return nil, err
		}
		if l.Path == PathVPC {
			if l.Pipeline, err = ComputePipeline(c); err != nil {
				return nil, err
			}
		}
		e := tab.Hourly(l.MachineType, cfg.GPU.Accelerator, int64(l.GPUsPerVM), false)
		l.Hourly, l.PriceKnown, l.PriceAsOf = float64(l.VMs)*e.Total, e.Known, e.AsOf
	}
	return out, nil
}
