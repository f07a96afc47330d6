// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// Creates of the shapes selection picks, against the fake's GCE rules:
// each is accepted by the fake and is the cheapest shape that fits.
func TestCreateCheapestShapes(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	for i, tc := range []struct {
		spec  provider.InstanceTypeSpec
		shape string
		gpus  int32
	}{
		{provider.InstanceTypeSpec{GPUs: 1, Memory: 40 * 1024}, "custom-8-40960", 1},
		{provider.InstanceTypeSpec{VCPUs: 8, Memory: 32 * 1024}, "e2-standard-8", 0},
		{provider.InstanceTypeSpec{GPUs: 1, VCPUs: 6}, "custom-6-15360", 1},
	} {
		sid := strings.Repeat(string(rune('a'+i)), 64)
		inst, err := p.CreateInstance(context.Background(), "pod", sid, cloudConfig("p"), tc.spec)
		if err != nil {
			t.Fatalf("%+v: %v", tc.spec, err)
		}
		var vm *computepb.Instance
		for _, v := range fake.Instances() {
			if v.GetName() == inst.Name {
				vm = v
			}
		}
		var gpus int32
		for _, a := range vm.GetGuestAccelerators() {
			gpus += a.GetAcceleratorCount()
		}
		if lastSegment(vm.GetMachineType()) != tc.shape || gpus != tc.gpus {
			t.Errorf("%+v: VM %s with %d GPUs, want %s with %d", tc.spec, lastSegment(vm.GetMachineType()), gpus, tc.shape, tc.gpus)
		}
		if vm.GetLabels()[ProfileLabel] != catalog.AutoProfileName {
			t.Errorf("%+v: caa-profile %q, want %q", tc.spec, vm.GetLabels()[ProfileLabel], catalog.AutoProfileName)
		}
	}
	if n := fake.ReplaysWithAnotherBody(); n != 0 {
		t.Errorf("%d requestIds were reused for another body", n)
	}
}

// Spot exhausted everywhere, standard capacity available: with
// GCP_SPOT_FALLBACK the pod lands on standard in the primary zone, and
// the standard insert is a request of its own.
func TestSpotExhaustedFallsBackToStandard(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) {
		c.ProvisioningModel, c.SpotFallback = setting.ProvisioningSpot, true
		c.FallbackZones = commaList{"us-central1-b"}
	})
	fake.SetStockoutFor("us-central1-a", setting.ProvisioningSpot, true)
	fake.SetStockoutFor("us-central1-b", setting.ProvisioningSpot, true)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	if !strings.HasPrefix(inst.ID, "zones/us-central1-a/") {
		t.Errorf("instance %s, want the primary zone", inst.ID)
	}
	vm := fake.Instances()[0]
	if vm.GetScheduling().GetProvisioningModel() != setting.ProvisioningStandard || vm.GetScheduling().InstanceTerminationAction != nil {
		t.Errorf("scheduling = %v, want standard", vm.GetScheduling())
	}
	var ids []string
	for _, c := range fake.Calls() {
		if c.Kind == "instances.insert" {
			ids = append(ids, c.Path+"?"+c.RawQuery)
		}
	}
	if len(ids) != 3 || ids[0] == ids[2] {
		t.Errorf("inserts = %v, want Spot in a and b, then standard in a with its own requestId", ids)
	}
	if n := fake.ReplaysWithAnotherBody(); n != 0 {
		t.Errorf("%d requestIds were reused for another body", n)
	}
	// The next pod skips the stocked-out Spot offerings without a call.
	fake.ResetCalls()
	if _, err := p.CreateInstance(context.Background(), "llm-1", strings.Repeat("e", 64), cloudConfig("llm-1"), oneT4); err != nil {
		t.Fatal(err)
	}
	if n := fake.CountCalls("instances.insert"); n != 1 {
		t.Errorf("second pod made %d inserts, want 1 (the cached Spot stockouts cost none)", n)
	}
}

// Without the fallback, standard capacity is not used and the error says
// how to allow it.
func TestSpotExhaustedWithoutFallback(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.ProvisioningModel = setting.ProvisioningSpot })
	fake.SetStockoutFor("us-central1-a", setting.ProvisioningSpot, true)
	_, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "GCP_SPOT_FALLBACK=true") || len(fake.Instances()) != 0 {
		t.Fatalf("want a no-capacity error suggesting the fallback, got %v", err)
	}
}

func TestGVNICOption(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.NICType = setting.NICTypeGVNIC })
	if err := p.ConfigVerifier(); err != nil {
		t.Fatalf("the default image has GVNIC: %v", err)
	}
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	if nic := fake.Instances()[0].GetNetworkInterfaces()[0]; nic.GetNicType() != setting.NICTypeGVNIC {
		t.Errorf("nic = %v", nic)
	}
}

func addTemplate(fake *gcefake.Server, region string, props *computepb.InstanceProperties) {
	fake.AddInstanceTemplate(region, &computepb.InstanceTemplate{Name: proto.String("t4-private"), Properties: props})
}

func t4TemplateProps() *computepb.InstanceProperties {
	return &computepb.InstanceProperties{
		MachineType:       proto.String("n1-standard-4"),
		GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}},
		Scheduling:        &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: proto.String("projects/demo-project/global/images/podvm-t4"), DiskSizeGb: proto.Int64(40), DiskType: proto.String("pd-balanced")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default")}},
	}
}

// Template mode: a pod image override keeps the template's bare disk type
// valid (sent as a zonal URL); GCP_PROVISIONING_MODEL=SPOT is applied; a
// regional template skips fallback zones of other regions.
func TestTemplatePath(t *testing.T) {
	const regional = "projects/demo-project/regions/us-central1/instanceTemplates/t4-private"
	p, fake := newTestProvider(t, func(c *Config) {
		c.InstanceTemplate = regional
		c.ProvisioningModel = setting.ProvisioningSpot
		c.FallbackZones = commaList{"us-east1-c", "us-central1-b"}
		// The pod's image annotation must be allowed in template mode
		// too (allow.go, admitImage).
		c.AllowedImages = commaList{"podvm-t4-v2"}
	})
	addTemplate(fake, "us-central1", t4TemplateProps())
	fake.AddImage("demo-project", &computepb.Image{Name: proto.String("podvm-t4-v2"), DiskSizeGb: proto.Int64(20),
		GuestOsFeatures: []*computepb.GuestOsFeature{{Type: proto.String("UEFI_COMPATIBLE")}}})
	if err := p.ConfigVerifier(); err != nil {
		t.Fatalf("ConfigVerifier: %v", err)
	}
	fake.SetStockout("us-central1-a", true)
	spec := oneT4
	spec.Image = "podvm-t4-v2"
	inst, err := p.CreateInstance(context.Background(), "tmpl", sandbox, cloudConfig("t"), spec)
	if err != nil {
		t.Fatalf("create from the regional template: %v", err)
	}
	if !strings.HasPrefix(inst.ID, "zones/us-central1-b/") {
		t.Errorf("instance %s, want us-central1-b (us-east1-c cannot use a us-central1 template)", inst.ID)
	}
	for _, c := range fake.Calls() {
		if strings.Contains(c.Path, "/zones/us-east1-c/") {
			t.Errorf("a call went to us-east1-c: %s", c.Path)
		}
	}
	vm := fake.Instances()[0]
	if vm.GetScheduling().GetProvisioningModel() != setting.ProvisioningSpot || vm.GetScheduling().GetInstanceTerminationAction() != "DELETE" {
		t.Errorf("GCP_PROVISIONING_MODEL=SPOT over a standard template: scheduling %v", vm.GetScheduling())
	}
	if !strings.HasSuffix(vm.GetDisks()[0].GetSource(), "/disks/"+vm.GetName()) || vm.GetDisks()[0].GetDiskSizeGb() != 40 {
		t.Errorf("boot disk %v", vm.GetDisks()[0])
	}

	// Every zone in another region: a clear error, no call.
	p2, fake2 := newTestProvider(t, func(c *Config) { c.InstanceTemplate = regional; c.Zone = "us-east1-c"; c.Subnetwork = "" })
	addTemplate(fake2, "us-central1", t4TemplateProps())
	if err := p2.ConfigVerifier(); err == nil || !strings.Contains(err.Error(), "regional to us-central1") {
		t.Errorf("verifier, all zones elsewhere: %v", err)
	}
	fake2.ResetCalls()
	if _, err := p2.CreateInstance(context.Background(), "tmpl", sandbox, cloudConfig("t"), oneT4); err == nil || !strings.Contains(err.Error(), "none of the zones") {
		t.Errorf("create, all zones elsewhere: %v", err)
	}
	if n := fake2.CountCalls("instances.insert"); n != 0 {
		t.Errorf("%d inserts into zones the template cannot serve", n)
	}

	// Spot over a Flex-start template is refused, not billed otherwise.
	p3, fake3 := newTestProvider(t, func(c *Config) { c.InstanceTemplate = "t4-private"; c.ProvisioningModel = setting.ProvisioningSpot })
	flex := t4TemplateProps()
	flex.Scheduling.ProvisioningModel = proto.String("FLEX_START")
	addTemplate(fake3, "", flex)
	if _, err := p3.CreateInstance(context.Background(), "tmpl", sandbox, cloudConfig("t"), oneT4); err == nil || !strings.Contains(err.Error(), "FLEX_START") {
		t.Errorf("SPOT over FLEX_START: %v", err)
	}
}
