// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

func testVM() podVM {
	return podVM{name: "podvm-llm-0-abcdef12", podName: "llm-0", sandboxID: "ABCDEF1234567890abcdef1234567890abcdef1234567890abcdef1234567890", userData: "I2Nsb3VkLWNvbmZpZw=="}
}

func TestBuildInstanceT4(t *testing.T) {
	c := validConfig()
	c.Subnetwork = "podvms"
	cat := mustCatalog(t, "", "")
	p, _ := cat.Lookup("t4-1")
	inst := c.buildInstance(testVM(), p, "us-central1-b", setting.ProvisioningStandard, 50)

	if got := inst.GetMachineType(); got != "zones/us-central1-b/machineTypes/n1-standard-4" {
		t.Errorf("machineType = %s", got)
	}
	acc := inst.GetGuestAccelerators()
	if len(acc) != 1 || acc[0].GetAcceleratorType() != "zones/us-central1-b/acceleratorTypes/nvidia-tesla-t4" || acc[0].GetAcceleratorCount() != 1 {
		t.Errorf("guestAccelerators = %v", acc)
	}
	s := inst.GetScheduling()
	if s.GetOnHostMaintenance() != "TERMINATE" || s.AutomaticRestart == nil || s.GetAutomaticRestart() || s.ProvisioningModel != nil {
		t.Errorf("scheduling = %v, want TERMINATE, automaticRestart=false, no model", s)
	}
	nic := inst.GetNetworkInterfaces()
	if len(nic) != 1 || len(nic[0].GetAccessConfigs()) != 0 || nic[0].GetSubnetwork() != "projects/demo-project/regions/us-central1/subnetworks/podvms" || nic[0].GetNetwork() != "global/networks/default" {
		t.Errorf("networkInterfaces = %v", nic)
	}
	d := inst.GetDisks()[0].GetInitializeParams()
	if d.GetSourceImage() != "projects/demo-project/global/images/podvm-t4" || d.GetDiskSizeGb() != 50 || d.GetDiskType() != "zones/us-central1-b/diskTypes/pd-balanced" {
		t.Errorf("boot disk = %v", d)
	}
	labels := inst.GetLabels()
	if labels[ManagedByLabel] != ManagedByValue || labels[SandboxLabel] != "abcdef1234567890abcdef1234567890abcdef1234567890abcdef123456789" || labels[PodLabel] != "llm-0" || labels[ProfileLabel] != "t4-1" {
		t.Errorf("labels = %v", labels)
	}
	meta := map[string]string{}
	for _, it := range inst.GetMetadata().GetItems() {
		meta[it.GetKey()] = it.GetValue()
	}
	if meta[UserDataMetadata] != "I2Nsb3VkLWNvbmZpZw==" || meta["user-data-encoding"] != "base64" || meta[SandboxMetadata] != testVM().sandboxID {
		t.Errorf("metadata = %v", meta)
	}
	if inst.ConfidentialInstanceConfig != nil {
		t.Errorf("T4 VM must not be confidential")
	}
}

func TestBuildInstanceSpotAndConfidential(t *testing.T) {
	c := validConfig()
	cat := mustCatalog(t, "", "")
	p, _ := cat.Lookup("cpu-2")
	s := c.buildInstance(testVM(), p, "us-central1-a", setting.ProvisioningSpot, 50).GetScheduling()
	if s.GetProvisioningModel() != "SPOT" || s.GetInstanceTerminationAction() != "DELETE" || s.GetOnHostMaintenance() != "TERMINATE" || s.GetAutomaticRestart() {
		t.Errorf("spot scheduling = %v", s)
	}

	c.ProfileImages = map[string]string{"h100-cc": "podvm-tdx"}
	h, _ := cat.Lookup("h100-cc")
	inst := c.buildInstance(testVM(), h, "us-central1-a", setting.ProvisioningSpot, 50)
	if inst.GetConfidentialInstanceConfig().GetConfidentialInstanceType() != "TDX" {
		t.Errorf("h100-cc must be TDX: %v", inst.GetConfidentialInstanceConfig())
	}
	// A Confidential VM boots from NVMe, A3 networks through gVNIC, and
	// the profile's own image is used, not the T4 image.
	boot := inst.GetDisks()[0]
	if boot.GetInterface() != "NVME" || boot.GetInitializeParams().GetSourceImage() != "projects/demo-project/global/images/podvm-tdx" {
		t.Errorf("h100-cc boot disk = %v", boot)
	}
	if nic := inst.GetNetworkInterfaces()[0]; nic.GetNicType() != setting.NICTypeGVNIC {
		t.Errorf("h100-cc NIC = %v, want GVNIC", nic)
	}
	if len(inst.GetGuestAccelerators()) != 0 {
		t.Errorf("a3-highgpu-1g has a bundled H100; guestAccelerators must be empty, got %v", inst.GetGuestAccelerators())
	}
	if inst.GetScheduling().GetOnHostMaintenance() != "TERMINATE" || inst.GetMinCpuPlatform() != "Intel Sapphire Rapids" {
		t.Errorf("h100-cc scheduling/platform = %v / %s", inst.GetScheduling(), inst.GetMinCpuPlatform())
	}
}

func TestBuildFromTemplateMergesAndStripsExternalIP(t *testing.T) {
	c := validConfig()
	props := &computepb.InstanceProperties{
		MachineType:       proto.String("n1-standard-4"),
		GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}},
		Labels:            map[string]string{"team": "ml"},
		Metadata:          &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String("startup-script"), Value: proto.String("echo hi")}, {Key: proto.String(UserDataMetadata), Value: proto.String("stale")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"), AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT")}}}},
	}
	inst := c.buildFromTemplate(testVM(), props, "us-central1-a", setting.ProvisioningStandard)
	if inst.GetMachineType() != "" || len(inst.GetGuestAccelerators()) != 0 {
		t.Errorf("the template's shape must not be overridden: %v", inst)
	}
	if inst.GetLabels()["team"] != "ml" || inst.GetLabels()[ManagedByLabel] != ManagedByValue {
		t.Errorf("labels must merge the template's: %v", inst.GetLabels())
	}
	meta := map[string]string{}
	for _, it := range inst.GetMetadata().GetItems() {
		if _, dup := meta[it.GetKey()]; dup {
			t.Errorf("duplicate metadata key %s", it.GetKey())
		}
		meta[it.GetKey()] = it.GetValue()
	}
	if meta["startup-script"] != "echo hi" || meta[UserDataMetadata] != testVM().userData {
		t.Errorf("metadata must keep the template's items and replace user-data: %v", meta)
	}
	nics := inst.GetNetworkInterfaces()
	if len(nics) != 1 || len(nics[0].GetAccessConfigs()) != 0 || nics[0].GetNetwork() != "global/networks/default" {
		t.Errorf("NICs must be the template's without accessConfigs: %v", nics)
	}
	if inst.GetScheduling().GetOnHostMaintenance() != "TERMINATE" {
		t.Errorf("a GPU template without TERMINATE must be overridden: %v", inst.GetScheduling())
	}
	// The template itself is untouched (it is cached and reused).
	if len(props.GetNetworkInterfaces()[0].GetAccessConfigs()) != 1 {
		t.Errorf("buildFromTemplate modified the cached template")
	}

	// A private template keeps its NIC list: no override is sent.
	props.NetworkInterfaces[0].AccessConfigs = nil
	if got := c.buildFromTemplate(testVM(), props, "us-central1-a", setting.ProvisioningStandard).GetNetworkInterfaces(); got != nil {
		t.Errorf("private template: NICs overridden needlessly: %v", got)
	}
}

// A template names its disk type; an instance override needs the zonal URL
// (AttachedDiskInitializeParams.diskType in the discovery document). And
// Spot is applied as a scheduling override, not ignored.
func TestBuildFromTemplateDiskTypeURLAndSpot(t *testing.T) {
	c := validConfig()
	props := &computepb.InstanceProperties{
		MachineType: proto.String("n1-standard-4"),
		Scheduling:  &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE")},
		Disks: []*computepb.AttachedDisk{
			{Boot: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("global/images/old"), DiskType: proto.String("pd-balanced")}},
			{InitializeParams: &computepb.AttachedDiskInitializeParams{DiskType: proto.String("projects/demo-project/zones/us-central1-b/diskTypes/pd-ssd"), DiskSizeGb: proto.Int64(10)}},
		},
	}
	vm := testVM()
	vm.image = "podvm-new"
	inst := c.buildFromTemplate(vm, props, "us-central1-b", setting.ProvisioningSpot)
	disks := inst.GetDisks()
	if len(disks) != 2 || disks[0].GetInitializeParams().GetDiskType() != "zones/us-central1-b/diskTypes/pd-balanced" ||
		disks[0].GetInitializeParams().GetSourceImage() != "projects/demo-project/global/images/podvm-new" ||
		disks[1].GetInitializeParams().GetDiskType() != "projects/demo-project/zones/us-central1-b/diskTypes/pd-ssd" {
		t.Errorf("disks = %v", disks)
	}
	if props.GetDisks()[0].GetInitializeParams().GetDiskType() != "pd-balanced" {
		t.Error("the cached template was modified")
	}
	s := inst.GetScheduling()
	if s.GetProvisioningModel() != setting.ProvisioningSpot || s.GetInstanceTerminationAction() != "DELETE" || s.GetAutomaticRestart() || s.GetOnHostMaintenance() != "TERMINATE" {
		t.Errorf("spot over a standard template: scheduling = %v", s)
	}
	// The standard fallback over a Spot template clears what only Spot takes.
	props.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("STOP")}
	s = c.buildFromTemplate(testVM(), props, "us-central1-b", setting.ProvisioningStandard).GetScheduling()
	if s.GetProvisioningModel() != setting.ProvisioningStandard || s.InstanceTerminationAction != nil {
		t.Errorf("standard over a Spot template: scheduling = %v", s)
	}
	if c.buildFromTemplate(testVM(), props, "us-central1-b", setting.ProvisioningSpot).Scheduling != nil {
		t.Error("a Spot template created as Spot needs no scheduling override")
	}
}

func TestTemplateModels(t *testing.T) {
	std := &computepb.InstanceProperties{MachineType: proto.String("n1-standard-4")}
	spot := &computepb.InstanceProperties{MachineType: proto.String("n1-standard-4"), Scheduling: &computepb.Scheduling{ProvisioningModel: proto.String("SPOT")}}
	flex := &computepb.InstanceProperties{MachineType: proto.String("n1-standard-4"), Scheduling: &computepb.Scheduling{ProvisioningModel: proto.String("FLEX_START")}}
	a3 := &computepb.InstanceProperties{MachineType: proto.String("a3-highgpu-1g")}
	cases := []struct {
		model    string
		fallback bool
		props    *computepb.InstanceProperties
		want     string
		err      string
	}{
		{setting.ProvisioningStandard, false, std, "STANDARD", ""},
		{setting.ProvisioningStandard, false, spot, "SPOT", ""},
		{setting.ProvisioningSpot, false, std, "SPOT", ""},
		{setting.ProvisioningSpot, true, std, "SPOT,STANDARD", ""},
		{setting.ProvisioningStandard, false, flex, "FLEX_START", ""},
		{setting.ProvisioningSpot, false, flex, "", "SPOT cannot override"},
		{setting.ProvisioningStandard, false, a3, "", "sold only as Spot"},
		{setting.ProvisioningSpot, true, a3, "SPOT", ""},
	}
	for _, tc := range cases {
		c := validConfig()
		c.InstanceTemplate = "t"
		c.ProvisioningModel, c.SpotFallback = tc.model, tc.fallback
		got, err := c.templateModels(tc.props)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s/%v over %v: err = %v, want %q", tc.model, tc.fallback, tc.props.GetScheduling(), err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("%s/%v over %v: %v, %v; want %s", tc.model, tc.fallback, tc.props.GetScheduling(), got, err, tc.want)
		}
	}
}

// With Shared VPC the network is the host project's, and so is a bare
// subnetwork name; the VMs stay in the service project.
func TestSubnetworkOfSharedVPC(t *testing.T) {
	c := validConfig()
	c.Network = "projects/host-proj/global/networks/shared"
	c.Subnetwork = "podvms"
	if got := c.subnetworkURL("us-east1-c"); got != "projects/host-proj/regions/us-east1/subnetworks/podvms" {
		t.Errorf("shared VPC subnetwork = %s", got)
	}
	c.Network = "https://www.googleapis.com/compute/v1/projects/host-proj/global/networks/shared"
	if got := c.subnetworkURL("us-east1-c"); got != "projects/host-proj/regions/us-east1/subnetworks/podvms" {
		t.Errorf("shared VPC (URL) subnetwork = %s", got)
	}
	c.Network = "default"
	if got := c.subnetworkURL("us-east1-c"); got != "projects/demo-project/regions/us-east1/subnetworks/podvms" {
		t.Errorf("own VPC subnetwork = %s", got)
	}
}

func TestNICType(t *testing.T) {
	c := validConfig()
	cat := mustCatalog(t, "", "")
	t4, _ := cat.Lookup("t4-1")
	if nic := c.buildInstance(testVM(), t4, "us-central1-a", setting.ProvisioningStandard, 50).GetNetworkInterfaces()[0]; nic.NicType != nil {
		t.Errorf("default NIC type must be GCE's: %v", nic)
	}
	c.NICType = setting.NICTypeGVNIC
	if nic := c.buildInstance(testVM(), t4, "us-central1-a", setting.ProvisioningStandard, 50).GetNetworkInterfaces()[0]; nic.GetNicType() != setting.NICTypeGVNIC {
		t.Errorf("GCP_NIC_TYPE=GVNIC: %v", nic)
	}
	if got := c.guestOSFeatures(t4); strings.Join(got, ",") != "GVNIC" {
		t.Errorf("a gVNIC podVM needs the GVNIC image feature, got %v", got)
	}
	c.NICType = "virtio"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "GCP_NIC_TYPE") {
		t.Errorf("bad NIC type: %v", err)
	}
}

func TestRequestIDDeterministic(t *testing.T) {
	const shape = "n1-standard-4/nvidia-tesla-t4/1"
	a := requestID("p", "us-central1-a", "STANDARD", shape, "podvm-x-1", "sid")
	if a != requestID("p", "us-central1-a", "STANDARD", shape, "podvm-x-1", "sid") {
		t.Fatal("same create must give the same requestId")
	}
	for _, other := range []string{
		requestID("p", "us-central1-b", "STANDARD", shape, "podvm-x-1", "sid"),
		requestID("p", "us-central1-a", "STANDARD", shape, "podvm-x-1", "sid2"),
		requestID("p", "us-central1-a", "SPOT", shape, "podvm-x-1", "sid"),
		requestID("p", "us-central1-a", "STANDARD", "n1-highmem-4/nvidia-tesla-t4/1", "podvm-x-1", "sid"),
	} {
		if other == a {
			t.Fatal("different creates share a requestId")
		}
	}
}

func TestInstanceIDRoundTrip(t *testing.T) {
	z, n := parseInstanceID(InstanceID("us-central1-f", "podvm-a-1"))
	if z != "us-central1-f" || n != "podvm-a-1" {
		t.Fatalf("round trip = %s %s", z, n)
	}
	z, n = parseInstanceID("https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-c/instances/podvm-b-2")
	if z != "us-east1-c" || n != "podvm-b-2" {
		t.Fatalf("URL = %s %s", z, n)
	}
	if z, n = parseInstanceID("podvm-c-3"); z != "" || n != "podvm-c-3" {
		t.Fatalf("bare = %s %s", z, n)
	}
}
