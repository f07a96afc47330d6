// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

func nsCloudConfig(pod, ns string) cloudinit.CloudConfigGenerator {
	return &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json",
		Content: fmt.Sprintf(`{"pod-name":%q,"pod-namespace":%q}`, pod, ns)}}}
}

// GPUs are counted in GCE before each create: the namespace's and the
// cluster's podVMs (the fake's listing of what was inserted), not a
// counter the adaptor could lose on restart.
func TestGPUTotals(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.MaxGPUsPerNamespace, c.MaxGPUsTotal = 2, 3 })
	ctx := context.Background()
	two := provider.InstanceTypeSpec{GPUs: 2}
	one := provider.InstanceTypeSpec{GPUs: 1}
	sandbox := func(i int) string { return strings.Repeat(string(rune('a'+i)), 64) }
	if _, err := p.CreateInstance(ctx, "a0", sandbox(0), nsCloudConfig("a0", "team-a"), two); err != nil {
		t.Fatal(err)
	}
	// A retry of the same pod finds its own VM, not a third GPU.
	if _, err := p.CreateInstance(ctx, "a0", sandbox(0), nsCloudConfig("a0", "team-a"), two); err != nil {
		t.Fatalf("retry: %v", err)
	}
	_, err := p.CreateInstance(ctx, "a1", sandbox(1), nsCloudConfig("a1", "team-a"), one)
	if err == nil || !strings.Contains(err.Error(), "GCP_MAX_GPUS_PER_NAMESPACE=2") || !strings.Contains(err.Error(), "namespace team-a: 2 GPU(s) in use") {
		t.Fatalf("third GPU in team-a: %v", err)
	}
	// CPU-only pods are not counted.
	if _, err := p.CreateInstance(ctx, "a2", sandbox(2), nsCloudConfig("a2", "team-a"), provider.InstanceTypeSpec{}); err != nil {
		t.Fatalf("CPU-only pod: %v", err)
	}
	if _, err := p.CreateInstance(ctx, "b0", sandbox(3), nsCloudConfig("b0", "team-b"), one); err != nil {
		t.Fatal(err)
	}
	_, err = p.CreateInstance(ctx, "b1", sandbox(4), nsCloudConfig("b1", "team-b"), one)
	if err == nil || !strings.Contains(err.Error(), "GCP_MAX_GPUS_TOTAL=3") || !strings.Contains(err.Error(), "cluster: 3 GPU(s) in use") {
		t.Fatalf("fourth GPU in the cluster: %v", err)
	}
	if n := len(fake.Instances()); n != 3 {
		t.Errorf("%d instances, want 3", n)
	}
	// Freed GPUs count no more.
	vms, err := p.ListManaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.Pod == "a0" {
			if err := p.DeleteInstance(ctx, vm.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.CreateInstance(ctx, "b1", sandbox(4), nsCloudConfig("b1", "team-b"), one); err != nil {
		t.Fatalf("after a0 is gone: %v", err)
	}
}
