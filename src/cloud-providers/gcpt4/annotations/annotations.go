// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package annotations names, once, the pod annotations the peer-pods
// path carries: the ones the peer-pods webhook writes and a pod author may
// set (kata's hypervisor annotations), and the sandbox's name and
// namespace the CRI runtime adds, all of which the kata shim forwards to
// CAA in a CreateVM request. The provider's allow-lists, the operator
// tools (plan, the adaptor's stand-in, the shim client) and the tests read
// these names from here.
//
// kata's own names are in src/runtime/virtcontainers/pkg/annotations/
// annotations.go at kata-containers cf82bb35 (the commit CAA v0.22.0
// pins): ImagePath line 36, MachineType 89, DefaultGPUs 138,
// DefaultGPUModel 140, DefaultVCPUs 147, DefaultMemory 157, Initdata 268.
// The module proxy does not serve kata's module, so they are spelled here.
//
// Stdlib only, no imports: this package travels with the drop-in.
package annotations

// HypervisorPrefix is kata's prefix of the hypervisor annotations
// (kataAnnotHypervisorPrefix); the cost guard keeps every annotation
// under io.katacontainers. fixed after a pod is created.
const HypervisorPrefix = "io.katacontainers.config.hypervisor."

const (
	// MachineType names the podVM's machine type (or a profile).
	MachineType = HypervisorPrefix + "machine_type"
	// Image names the podVM's boot image.
	Image = HypervisorPrefix + "image"
	// VCPUs is the vCPUs the webhook summed from the pod's requests.
	VCPUs = HypervisorPrefix + "default_vcpus"
	// Memory is the memory in MiB the webhook summed.
	Memory = HypervisorPrefix + "default_memory"
	// GPUs is the GPUs the webhook counted ("0" for none).
	GPUs = HypervisorPrefix + "default_gpus"
	// GPUModel is the GPU model the webhook recorded, if any.
	GPUModel = HypervisorPrefix + "default_gpu_model"
	// InitData is the pod's initdata (kata's Initdata).
	InitData = HypervisorPrefix + "cc_init_data"
)

// The sandbox's identity as the CRI runtime (containerd) annotates it.
const (
	SandboxName      = "io.kubernetes.cri.sandbox-name"
	SandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
)
