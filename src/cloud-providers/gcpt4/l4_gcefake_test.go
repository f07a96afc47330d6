// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// An L4 podVM the admin allows is created as GCE wants a G2 VM: the
// machine type alone, no guestAccelerators, in a zone that has L4s; its
// quota is the L4's.
func TestL4PodVMOnTheEmulator(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) {
		c.InstanceTypes = commaList{"nvidia-l4"}
		c.MaxGPUsPerPod, c.MaxVCPUsPerPod, c.MaxMemoryPerPod = 2, 24, 96*1024
		c.FallbackZones = commaList{"us-central1-f", "us-central1-b"}
	})
	// us-central1-f has no L4 (the emulator, like GCE): automatic L4s are
	// held to every zone by ConfigVerifier.
	if err := p.ConfigVerifier(); err == nil || !strings.Contains(err.Error(), "zone us-central1-f has no nvidia-l4") {
		t.Fatalf("ConfigVerifier with an L4-less zone: %v", err)
	}
	p, fake = newTestProviderOn(t, fake, func(c *Config) {
		c.InstanceTypes = commaList{"nvidia-l4"}
		c.MaxGPUsPerPod, c.MaxVCPUsPerPod, c.MaxMemoryPerPod = 2, 24, 96*1024
		c.FallbackZones = commaList{"us-central1-b"}
	})
	if err := p.ConfigVerifier(); err != nil {
		t.Fatalf("ConfigVerifier: %v", err)
	}
	fake.SetQuota("us-central1", "NVIDIA_L4_GPUS", 1)
	spec := provider.InstanceTypeSpec{GPUs: 2}
	if _, err := p.CreateInstance(context.Background(), "l4-0", sandbox, cloudConfig("l4"), spec); err == nil || !strings.Contains(err.Error(), "NVIDIA_L4_GPUS") {
		t.Fatalf("2 L4s over a quota of 1: %v", err)
	}
	fake.SetQuota("us-central1", "NVIDIA_L4_GPUS", 4)
	if _, err := p.CreateInstance(context.Background(), "l4-0", strings.Repeat("d", 64), cloudConfig("l4"), spec); err != nil {
		t.Fatalf("2-L4 create: %v", err)
	}
	vms := fake.Instances()
	if len(vms) != 1 {
		t.Fatalf("%d VMs", len(vms))
	}
	vm := vms[0]
	if lastSegment(vm.GetMachineType()) != "g2-standard-24" || len(vm.GetGuestAccelerators()) != 0 || !strings.HasPrefix(lastSegment(vm.GetZone()), "us-central1-a") {
		t.Fatalf("vm %s in %s with %v", vm.GetMachineType(), vm.GetZone(), vm.GetGuestAccelerators())
	}
}
