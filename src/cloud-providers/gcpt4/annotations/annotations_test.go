// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package annotations

import "testing"

// The names as kata spells them at cf82bb35 (virtcontainers/pkg/
// annotations/annotations.go) and containerd's CRI plugin does, written
// out whole and apart from the constants: the shim client used to spell
// them itself so that a typo on one side could not agree with itself;
// this is that check, in one place.
func TestNamesAreKatas(t *testing.T) {
	for got, want := range map[string]string{
		MachineType:      "io.katacontainers.config.hypervisor.machine_type",
		Image:            "io.katacontainers.config.hypervisor.image",
		VCPUs:            "io.katacontainers.config.hypervisor.default_vcpus",
		Memory:           "io.katacontainers.config.hypervisor.default_memory",
		GPUs:             "io.katacontainers.config.hypervisor.default_gpus",
		GPUModel:         "io.katacontainers.config.hypervisor.default_gpu_model",
		InitData:         "io.katacontainers.config.hypervisor.cc_init_data",
		SandboxName:      "io.kubernetes.cri.sandbox-name",
		SandboxNamespace: "io.kubernetes.cri.sandbox-namespace",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
