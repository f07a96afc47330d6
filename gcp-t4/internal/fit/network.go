package fit

import (
	"fmt"
	"time"
)

// Path is how the ranks of a tensor-parallel group reach each other.
type Path string

const (
	// PathVPC: one T4 per podVM. Every collective crosses three hops
	// between neighbouring ranks: the podVM's VXLAN tunnel to its worker
	// node, the VPC between the two worker nodes, and the other node's
	// tunnel to its podVM (CAA's podnetwork tunneler), over NCCL's socket
	// transport.
	PathVPC Path = "vpc"
	// PathHost: all the GPUs in one podVM (a t4-2 VM: n1-standard-8 with
	// two T4s). NCCL connects them inside the VM with its P2P transport
	// over PCIe when CUDA reports peer access, and otherwise with its SHM
	// transport through host memory (NCCL's environment documentation,
	// NCCL_P2P_LEVEL and NCCL_SHM_DISABLE); no network at all.
	PathHost Path = "host"
)

// Assumed link figures, each replaced by a measurement when one is
// given. None is a vendor figure: they are orders of magnitude to plan
// with, printed as assumed.
const (
	// ncclStepSoftware is NCCL's own cost of one ring step of a small
	// message over the socket transport (proxy thread, kernel launch,
	// LL-protocol flag wait).
	ncclStepSoftware = 40 * time.Microsecond
	// vpcHopLatency is one one-way hop on the VPC path (a VXLAN
	// encapsulation in a guest or node kernel plus a trip across the
	// zone's network).
	vpcHopLatency = 70 * time.Microsecond
	// hostStepLatency is one ring step between two GPUs of one VM (P2P
	// over PCIe or SHM through host memory, LL protocol).
	hostStepLatency = 8 * time.Microsecond
	// vpcBusBandwidth is the realistic default NCCL bus bandwidth over
	// TCP through both tunnels; vpcPeakBusBandwidth the bound: Compute
	// Engine caps an N1 VM's egress at 2 Gbps per vCPU, 16 Gbps (2 GB/s)
	// for n1-standard-8 (Compute Engine "Network bandwidth").
	vpcBusBandwidth     = 1e9
	vpcPeakBusBandwidth = 2e9
	// hostBusBandwidth is the realistic default between two T4s of one
	// VM (SHM copies through host memory, or P2P across the VM's PCIe
	// topology); hostPeakBusBandwidth the T4's PCIe Gen3 x16 link,
	// 15.75 GB/s (NVIDIA T4 data sheet).
	hostBusBandwidth     = 6e9
	hostPeakBusBandwidth = 15.75e9
)

// vpcHops is the hop count between neighbouring ranks on PathVPC.
const vpcHops = 3

// Link is the network model one estimate uses.
type Link struct {
	Path Path
	// Hops between neighbouring ranks (0 inside one VM).
	Hops int
	// Step is one ring step of a small message; StepMeasured says it
	// came from --nccl-latency (half the measured 2-rank all-reduce).
	Step         time.Duration
	StepMeasured bool
	// BusBandwidth prices payloads (bytes per second, NCCL's busbw);
	// BusMeasured says it came from --nccl-bandwidth. PeakBusBandwidth is
	// the bound.
	BusBandwidth     float64
	BusMeasured      bool
	PeakBusBandwidth float64
}

// linkFor builds the link for a path, with the decode settings'
// measurements in place of the assumptions.
func linkFor(path Path, d Decode) (Link, error) {
	var l Link
	switch path {
	case PathVPC, "":
		l = Link{Path: PathVPC, Hops: vpcHops, Step: ncclStepSoftware + vpcHops*vpcHopLatency,
			BusBandwidth: vpcBusBandwidth, PeakBusBandwidth: vpcPeakBusBandwidth}
	case PathHost:
		l = Link{Path: PathHost, Step: hostStepLatency, BusBandwidth: hostBusBandwidth, PeakBusBandwidth: hostPeakBusBandwidth}
	default:
		return l, fmt.Errorf("path %q: use vpc (one GPU per podVM) or host (all GPUs in one podVM)", path)
	}
	if d.NCCLLatency > 0 {
		// The NCCL check times a 2-rank ring all-reduce: two steps.
		l.Step, l.StepMeasured = d.NCCLLatency/2, true
	}
	if d.BusBandwidth > 0 {
		l.BusBandwidth, l.BusMeasured = d.BusBandwidth, true
		l.PeakBusBandwidth = max(l.PeakBusBandwidth, d.BusBandwidth)
	}
	return l, nil
}

// AllReduce is the latency of one small ring all-reduce over n ranks:
// reduce-scatter and all-gather, n-1 steps each (NCCL's ring algorithm;
// nccl-tests doc/PERFORMANCE.md counts the same 2(n-1)/n in its bus
// bandwidth). This is what makes a larger group slower per collective:
// 2 steps at tp 2, 6 at tp 4.
func (l Link) AllReduce(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return time.Duration(2*(n-1)) * l.Step
}

// AllGather is the latency of one small ring all-gather: n-1 steps.
func (l Link) AllGather(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return time.Duration(n-1) * l.Step
}

// wire is the time bus bytes take at bandwidth bytes per second.
func wire(bytes int64, bandwidth float64) time.Duration {
	if bandwidth <= 0 {
		return 0
	}
	return time.Duration(float64(bytes) / bandwidth * float64(time.Second))
}

// describe names the path for the report.
func (l Link) describe() string {
	if l.Path == PathHost {
		return "one podVM: NCCL P2P over PCIe, or SHM through host memory"
	}
	return fmt.Sprintf("one GPU per podVM: %d hops between ranks (podVM-node VXLAN, node-node VPC, node-podVM VXLAN)", l.Hops)
}
