package gcpt4

import (
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

func testVM() podVM {
	return podVM{name: "podvm-llm-0-abcdef12", podName: "llm-0", sandboxID: "ABCDEF1234567890abcdef1234567890abcdef1234567890abcdef1234567890", userData: "I2Nsb3VkLWNvbmZpZw=="}
}

func TestBuildInstanceT4(t *testing.T) {
	c := validConfig()
	c.Subnetwork = "podvms"
	cat := mustCatalog(t, "", "")
	p, _ := cat.Lookup("t4-1")
	inst := c.buildInstance(testVM(), p, "us-central1-b", ProvisioningStandard, 50)

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
	s := c.buildInstance(testVM(), p, "us-central1-a", ProvisioningSpot, 50).GetScheduling()
	if s.GetProvisioningModel() != "SPOT" || s.GetInstanceTerminationAction() != "DELETE" || s.GetOnHostMaintenance() != "TERMINATE" || s.GetAutomaticRestart() {
		t.Errorf("spot scheduling = %v", s)
	}

	h, _ := cat.Lookup("h100-cc")
	inst := c.buildInstance(testVM(), h, "us-central1-a", ProvisioningStandard, 50)
	if inst.GetConfidentialInstanceConfig().GetConfidentialInstanceType() != "TDX" {
		t.Errorf("h100-cc must be TDX: %v", inst.GetConfidentialInstanceConfig())
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
	inst := c.buildFromTemplate(testVM(), props, "us-central1-a")
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
	if got := c.buildFromTemplate(testVM(), props, "us-central1-a").GetNetworkInterfaces(); got != nil {
		t.Errorf("private template: NICs overridden needlessly: %v", got)
	}
}

func TestRequestIDDeterministic(t *testing.T) {
	a := requestID("p", "us-central1-a", "STANDARD", "podvm-x-1", "sid")
	if a != requestID("p", "us-central1-a", "STANDARD", "podvm-x-1", "sid") {
		t.Fatal("same create must give the same requestId")
	}
	for _, other := range []string{
		requestID("p", "us-central1-b", "STANDARD", "podvm-x-1", "sid"),
		requestID("p", "us-central1-a", "STANDARD", "podvm-x-1", "sid2"),
		requestID("p", "us-central1-a", "SPOT", "podvm-x-1", "sid"),
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
