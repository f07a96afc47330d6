// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// newTestProvider starts a fake and a provider on it with the demo layout.
func newTestProvider(t testing.TB, mutate func(*Config)) (*Provider, *gcefake.Server) {
	t.Helper()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	return newTestProviderOn(t, fake, mutate)
}

// newTestProviderOn makes a provider on an existing fake, as a restarted
// adaptor would find the same project.
func newTestProviderOn(t testing.TB, fake *gcefake.Server, mutate func(*Config)) (*Provider, *gcefake.Server) {
	t.Helper()
	cfg := validConfig()
	cfg.Subnetwork = "default"
	cfg.UnavailableTTL = 3 * time.Minute
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := NewProvider(context.Background(), cfg, log.New(io.Discard, "", 0), fake.ClientOptions()...)
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	p.backoff = func(int) time.Duration { return time.Millisecond }
	t.Cleanup(func() { _ = p.Teardown() })
	return p, fake
}

func cloudConfig(pod string) cloudinit.CloudConfigGenerator {
	return &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: `{"pod-name":"` + pod + `"}`}}}
}

// assertNoExternalIP fails if any instance in the fake has an external IP:
// the one property a leaked misconfiguration would make expensive and unsafe.
func assertNoExternalIP(t *testing.T, fake *gcefake.Server) {
	t.Helper()
	for _, inst := range fake.Instances() {
		for _, nic := range inst.GetNetworkInterfaces() {
			if len(nic.GetAccessConfigs()) > 0 || len(nic.GetIpv6AccessConfigs()) > 0 {
				t.Errorf("instance %s has an external IP: %v", inst.GetName(), nic.GetAccessConfigs())
			}
		}
	}
}

func TestCreateT4PodVM(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	ctx := context.Background()
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	if inst.Name != "podvm-llm-0-01234567" || inst.ID != "zones/us-central1-a/instances/podvm-llm-0-01234567" {
		t.Errorf("instance = %+v", inst)
	}
	if len(inst.IPs) != 1 || !inst.IPs[0].IsPrivate() {
		t.Errorf("want one private IP, got %v", inst.IPs)
	}
	vms := fake.Instances()
	if len(vms) != 1 {
		t.Fatalf("fake has %d instances", len(vms))
	}
	vm := vms[0]
	if !strings.HasSuffix(vm.GetMachineType(), "/machineTypes/n1-standard-4") {
		t.Errorf("machineType = %s", vm.GetMachineType())
	}
	acc := vm.GetGuestAccelerators()
	if len(acc) != 1 || !strings.HasSuffix(acc[0].GetAcceleratorType(), "/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4") || acc[0].GetAcceleratorCount() != 1 {
		t.Errorf("guestAccelerators = %v", acc)
	}
	if s := vm.GetScheduling(); s.GetOnHostMaintenance() != "TERMINATE" || s.GetAutomaticRestart() {
		t.Errorf("scheduling = %v", s)
	}
	if vm.GetNetworkInterfaces()[0].GetNetworkIP() != inst.IPs[0].String() {
		t.Errorf("returned IP %s is not the VM's %s", inst.IPs[0], vm.GetNetworkInterfaces()[0].GetNetworkIP())
	}
	var userData string
	for _, it := range vm.GetMetadata().GetItems() {
		if it.GetKey() == UserDataMetadata {
			userData = it.GetValue()
		}
	}
	raw, err := base64.StdEncoding.DecodeString(userData)
	if err != nil || !strings.Contains(string(raw), "/run/peerpod/apf.json") {
		t.Errorf("user-data is not CAA's cloud-config in base64: %q (%v)", raw, err)
	}
	if vm.GetLabels()[ManagedByLabel] != ManagedByValue || vm.GetLabels()[SandboxLabel] == "" {
		t.Errorf("labels = %v", vm.GetLabels())
	}
	assertNoExternalIP(t, fake)

	// Insert, one long-poll wait, one get, and no image lookup per create.
	if n := fake.CountCalls("instances.insert"); n != 1 {
		t.Errorf("inserts = %d", n)
	}
	if n := fake.CountCalls("images.get") + fake.CountCalls("zoneOperations.get"); n != 0 {
		t.Errorf("images.get + operations.get calls = %d, want 0 (wait long-polls; disk size needs no image call)", n)
	}
	if n := fake.CountCalls("instances.get"); n != 1 {
		t.Errorf("gets = %d, want 1", n)
	}

	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatalf("DeleteInstance: %v", err)
	}
	if n := len(fake.Instances()); n != 0 {
		t.Fatalf("%d instances left after delete", n)
	}
	// Deleting again is success: CAA and peerpod-ctrl may both try.
	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatalf("second DeleteInstance: %v", err)
	}
}

func TestCreateWaitsWithLongPoll(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	fake.SetOperationLatency(300 * time.Millisecond)
	if _, err := p.CreateInstance(context.Background(), "slow", sandbox, cloudConfig("slow"), oneT4); err != nil {
		t.Fatal(err)
	}
	waits, gets := fake.CountCalls("zoneOperations.wait"), fake.CountCalls("zoneOperations.get")
	if waits < 1 || gets != 0 {
		t.Fatalf("operations.wait = %d, operations.get = %d; want long-poll waits and no client-side get polling", waits, gets)
	}
	if total := len(fake.Calls()); total != 3 {
		t.Errorf("GCE calls for one create = %d, want 3 (insert, wait, get)", total)
	}
}

func TestTwoAndFourT4s(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	for i, gpus := range []int64{2, 3} {
		spec := provider.InstanceTypeSpec{GPUs: gpus}
		if _, err := p.CreateInstance(context.Background(), "multi", strings.Repeat(string(rune('a'+i)), 64), cloudConfig("m"), spec); err != nil {
			t.Fatalf("%d GPUs: %v", gpus, err)
		}
	}
	got := map[string]int32{}
	for _, vm := range fake.Instances() {
		got[lastSegment(vm.GetMachineType())] = vm.GetGuestAccelerators()[0].GetAcceleratorCount()
	}
	if got["n1-standard-8"] != 2 || got["n1-standard-16"] != 4 {
		t.Fatalf("shapes = %v, want n1-standard-8×2 and n1-standard-16×4", got)
	}
}

func TestRetriedCreateMakesOneVM(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	ctx := context.Background()
	a, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	// CAA retries StartVM after a lost answer: same pod, same sandbox.
	b, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatalf("second create: %v", err)
	}
	if a.ID != b.ID || a.IPs[0] != b.IPs[0] || len(fake.Instances()) != 1 {
		t.Fatalf("retried create made another VM: %+v vs %+v, %d instances", a, b, len(fake.Instances()))
	}
	// Both inserts carried the same requestId.
	var ids []string
	for _, c := range fake.Calls() {
		if c.Kind == "instances.insert" {
			ids = append(ids, c.RawQuery)
		}
	}
	if len(ids) != 2 || ids[0] != ids[1] || !strings.Contains(ids[0], "requestId=") {
		t.Fatalf("insert queries = %v, want the same requestId twice", ids)
	}
}

func TestInsertRetriedAfter503IsIdempotent(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	fake.FailNext("POST", "instances.insert", 503, 2)
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4); err != nil {
		t.Fatalf("create with two transient 503s: %v", err)
	}
	if n := fake.CountCalls("instances.insert"); n != 3 {
		t.Errorf("inserts = %d, want 3 (two failed, one accepted)", n)
	}
	if len(fake.Instances()) != 1 {
		t.Fatalf("instances = %d", len(fake.Instances()))
	}
}

func TestNameClashWithAnotherSandboxIsAnError(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	ctx := context.Background()
	if _, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("a"), oneT4); err != nil {
		t.Fatal(err)
	}
	other := "01234567" + strings.Repeat("f", 56) // same first 8 characters, same name
	_, err := p.CreateInstance(ctx, "llm-0", other, cloudConfig("b"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "belongs to sandbox") {
		t.Fatalf("want a clash error, got %v", err)
	}
	if len(fake.Instances()) != 1 {
		t.Fatalf("instances = %d", len(fake.Instances()))
	}
}

func TestZoneFallbackOnStockout(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.FallbackZones = commaList{"us-central1-c", "us-central1-b", "us-central1-f"} })
	fake.SetStockout("us-central1-a", true)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	// GCE's zonesAvailable hint (b, f) is preferred over the configured
	// order, which would have tried c (no T4 there) first.
	if !strings.HasPrefix(inst.ID, "zones/us-central1-b/") {
		t.Fatalf("instance ID = %s, want it in us-central1-b", inst.ID)
	}
	if err := p.DeleteInstance(context.Background(), inst.ID); err != nil || len(fake.Instances()) != 0 {
		t.Fatalf("delete in the fallback zone: %v, %d left", err, len(fake.Instances()))
	}
}

func TestAllZonesOutOfStock(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.FallbackZones = commaList{"us-central1-b"} })
	fake.SetStockout("us-central1-a", true)
	fake.SetStockout("us-central1-b", true)
	_, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "tried us-central1-a (STANDARD): ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS; us-central1-b (STANDARD)") || !strings.Contains(err.Error(), "GCP_ZONES") {
		t.Fatalf("want an all-zones stockout error naming the fix, got %v", err)
	}
	if len(fake.Instances()) != 0 {
		t.Fatal("a VM was left behind")
	}
}

func TestSilentOperationFailureIsCaught(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	fake.SetStockout("us-central1-a", true)
	fake.SetSilentOperationFailure(true)
	_, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "ZONE_RESOURCE_POOL_EXHAUSTED") {
		t.Fatalf("an operation that failed without an HTTP status must still fail the create, got %v", err)
	}
}

func TestQuotaExceededSaysWhatToDo(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.FallbackZones = commaList{"us-central1-b"} })
	fake.SetQuota("us-central1", "NVIDIA_T4_GPUS", 0)
	_, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "NVIDIA_T4_GPUS") || !strings.Contains(err.Error(), "SPOT") {
		t.Fatalf("want a quota error naming the metric and the Spot alternative, got %v", err)
	}
	// A regional quota fails every zone of the region: no second insert.
	if n := fake.CountCalls("instances.insert"); n != 1 {
		t.Errorf("inserts = %d, want 1", n)
	}
}

func TestSpotPodVM(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.ProvisioningModel = setting.ProvisioningSpot })
	fake.SetQuota("us-central1", "NVIDIA_T4_GPUS", 0) // Spot uses the preemptible quota
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4); err != nil {
		t.Fatalf("spot create: %v", err)
	}
	s := fake.Instances()[0].GetScheduling()
	if s.GetProvisioningModel() != "SPOT" || s.GetInstanceTerminationAction() != "DELETE" {
		t.Fatalf("scheduling = %v", s)
	}
}

// addTDXImage gives the fake a podVM image a TDX VM can boot.
func addTDXImage(fake *gcefake.Server, name string, features ...string) {
	var fs []*computepb.GuestOsFeature
	for _, f := range features {
		fs = append(fs, &computepb.GuestOsFeature{Type: proto.String(f)})
	}
	fake.AddImage(fake.Project(), &computepb.Image{Name: proto.String(name), DiskSizeGb: proto.Int64(30), GuestOsFeatures: fs})
}

func TestConfidentialH100Profile(t *testing.T) {
	spec := provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1}
	// Without an image of its own h100-cc is refused before any call: the
	// T4 image is not a TDX image.
	p, fake := newTestProvider(t, allowH100)
	_, err := p.CreateInstance(context.Background(), "cc-0", sandbox, cloudConfig("cc"), spec)
	if err == nil || !strings.Contains(err.Error(), "(TDX Confidential VM) needs an image") || fake.CountCalls("instances.insert") != 0 {
		t.Fatalf("h100-cc without an image: %v (%d inserts)", err, fake.CountCalls("instances.insert"))
	}

	p, fake = newTestProvider(t, func(c *Config) { c.ProfileImages = provider.KeyValueFlag{"h100-cc": "podvm-tdx"}; allowH100(c) })
	addTDXImage(fake, "podvm-tdx", "UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")
	if err := p.ConfigVerifier(); err != nil {
		t.Fatalf("ConfigVerifier with a TDX image: %v", err)
	}
	// a3-highgpu-1g is sold as Spot: it uses the preemptible H100 quota.
	fake.SetQuota("us-central1", "PREEMPTIBLE_NVIDIA_H100_GPUS", 0)
	_, err = p.CreateInstance(context.Background(), "cc-0", sandbox, cloudConfig("cc"), spec)
	if err == nil || !strings.Contains(err.Error(), "PREEMPTIBLE_NVIDIA_H100_GPUS") {
		t.Fatalf("want a preemptible H100 quota error, got %v", err)
	}
	fake.SetQuota("us-central1", "PREEMPTIBLE_NVIDIA_H100_GPUS", 1)
	// kubelet retries a failed sandbox with a new sandbox ID, hence a new
	// requestId; the failed request's ID stays failed, as in GCE.
	retrySandbox := strings.Repeat("c", 64)
	if _, err := p.CreateInstance(context.Background(), "cc-0", retrySandbox, cloudConfig("cc"), spec); err != nil {
		t.Fatalf("h100-cc create: %v", err)
	}
	vm := fake.Instances()[0]
	if lastSegment(vm.GetMachineType()) != "a3-highgpu-1g" || vm.GetConfidentialInstanceConfig().GetConfidentialInstanceType() != "TDX" || len(vm.GetGuestAccelerators()) != 0 {
		t.Fatalf("vm = %s %v %v", vm.GetMachineType(), vm.GetConfidentialInstanceConfig(), vm.GetGuestAccelerators())
	}
	if vm.GetScheduling().GetProvisioningModel() != setting.ProvisioningSpot || vm.GetDisks()[0].GetInterface() != "NVME" ||
		vm.GetNetworkInterfaces()[0].GetNicType() != setting.NICTypeGVNIC || lastSegment(vm.GetDisks()[0].GetGuestOsFeatures()[1].GetType()) != "TDX_CAPABLE" {
		t.Fatalf("vm scheduling %v, disk %v, nic %v", vm.GetScheduling(), vm.GetDisks()[0], vm.GetNetworkInterfaces()[0])
	}
}

// ConfigVerifier checks every profile's image for the guest OS features
// its VM needs, before a pod meets GCE's refusal.
func TestConfigVerifierChecksProfileImages(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.ProfileImages = provider.KeyValueFlag{"h100-cc": "podvm-uefi-only"} })
	addTDXImage(fake, "podvm-uefi-only", "UEFI_COMPATIBLE")
	err := p.ConfigVerifier()
	if err == nil || !strings.Contains(err.Error(), "profile h100-cc") || !strings.Contains(err.Error(), "TDX_CAPABLE, GVNIC") || !strings.Contains(err.Error(), "--guest-os-features=UEFI_COMPATIBLE,TDX_CAPABLE,GVNIC") {
		t.Fatalf("want the missing TDX_CAPABLE and GVNIC named, got %v", err)
	}
	// gVNIC for the T4 podVMs needs GVNIC on PODVM_IMAGE_NAME.
	p, fake = newTestProvider(t, func(c *Config) { c.NICType = setting.NICTypeGVNIC; c.ImageName = "plain" })
	addTDXImage(fake, "plain", "UEFI_COMPATIBLE")
	if err := p.ConfigVerifier(); err == nil || !strings.Contains(err.Error(), "GVNIC") {
		t.Fatalf("gVNIC on an image without GVNIC: %v", err)
	}
	// An h100-cc without an image does not fail the verifier: it is only
	// refused when a pod names it.
	p, _ = newTestProvider(t, nil)
	if err := p.ConfigVerifier(); err != nil {
		t.Fatalf("unused h100-cc without an image: %v", err)
	}
}

func TestCreateFromTemplate(t *testing.T) {
	for _, regional := range []bool{false, true} {
		name := "global"
		tmplURL := "projects/demo-project/global/instanceTemplates/t4-private"
		region := ""
		if regional {
			name, region = "regional", "us-central1"
			tmplURL = "projects/demo-project/regions/us-central1/instanceTemplates/t4-private"
		}
		t.Run(name, func(t *testing.T) {
			p, fake := newTestProvider(t, func(c *Config) { c.InstanceTemplate = tmplURL })
			fake.AddInstanceTemplate(region, &computepb.InstanceTemplate{
				Name: proto.String("t4-private"),
				Properties: &computepb.InstanceProperties{
					MachineType:       proto.String("n1-highmem-4"),
					GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}},
					Scheduling:        &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)},
					Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
						SourceImage: proto.String("projects/demo-project/global/images/podvm-t4"), DiskSizeGb: proto.Int64(40)}}},
					// The template gives an external IP; the provider must strip it.
					NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"),
						AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}}}},
					Labels:   map[string]string{"team": "ml"},
					Metadata: &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String("enable-oslogin"), Value: proto.String("TRUE")}}},
				},
			})
			if err := p.ConfigVerifier(); err != nil {
				t.Fatalf("ConfigVerifier: %v", err)
			}
			for i := 0; i < 2; i++ {
				if _, err := p.CreateInstance(context.Background(), "tmpl", strings.Repeat(string(rune('a'+i)), 64), cloudConfig("t"), oneT4); err != nil {
					t.Fatalf("create %d from template: %v", i, err)
				}
			}
			assertNoExternalIP(t, fake)
			vm := fake.Instances()[0]
			if lastSegment(vm.GetMachineType()) != "n1-highmem-4" || vm.GetLabels()["team"] != "ml" || vm.GetLabels()[ManagedByLabel] != ManagedByValue {
				t.Errorf("vm = %s %v", vm.GetMachineType(), vm.GetLabels())
			}
			keys := map[string]bool{}
			for _, it := range vm.GetMetadata().GetItems() {
				keys[it.GetKey()] = true
			}
			if !keys["enable-oslogin"] || !keys[UserDataMetadata] {
				t.Errorf("metadata keys = %v, want the template's and ours", keys)
			}
			// The template is read once, however many VMs are made.
			if n := fake.CountCalls("instanceTemplates.get") + fake.CountCalls("regionInstanceTemplates.get"); n != 1 {
				t.Errorf("template reads = %d, want 1", n)
			}
			if _, err := p.CreateInstance(context.Background(), "big", strings.Repeat("z", 64), cloudConfig("t"), provider.InstanceTypeSpec{GPUs: 2}); err == nil || !strings.Contains(err.Error(), "gives 1") {
				t.Errorf("a 2-GPU pod on a 1-GPU template: %v", err)
			}
		})
	}
}

func TestConfigVerifier(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.RootVolumeSize = 10 })
	if err := p.ConfigVerifier(); err != nil {
		t.Fatalf("ConfigVerifier: %v", err)
	}
	// The image (20 GB) is larger than ROOT_VOLUME_SIZE: creates use its size.
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4); err != nil {
		t.Fatalf("create after verify: %v", err)
	}
	if got := fake.Instances()[0].GetDisks()[0].GetDiskSizeGb(); got != 20 {
		t.Errorf("boot disk = %d GB, want the image's 20", got)
	}

	p, _ = newTestProvider(t, func(c *Config) { c.Zone = "us-central1-c" })
	err := p.ConfigVerifier()
	if err == nil || !strings.Contains(err.Error(), "zone us-central1-c has no nvidia-tesla-t4") {
		t.Fatalf("want a missing-accelerator error, got %v", err)
	}

	p, _ = newTestProvider(t, func(c *Config) { c.ImageName = "no-such-image" })
	if err := p.ConfigVerifier(); err == nil || !strings.Contains(err.Error(), "PODVM_IMAGE_NAME") {
		t.Fatalf("want a missing-image error, got %v", err)
	}

	// Unreachable API: configuration checked, API checks skipped.
	cfg := validConfig()
	cfg.Endpoint = "http://127.0.0.1:1"
	off, err := NewProvider(context.Background(), cfg, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = off.Teardown() }()
	if err := off.ConfigVerifier(); err != nil {
		t.Fatalf("unreachable API must not fail the verifier: %v", err)
	}
}

func TestConcurrentCreatesAndDeletes(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	fake.SetOperationLatency(20 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sid := strings.Repeat(string(rune('a'+i)), 64)
			inst, err := p.CreateInstance(context.Background(), "w", sid, cloudConfig("w"), oneT4)
			if err != nil {
				errs <- err
				return
			}
			errs <- p.DeleteInstance(context.Background(), inst.ID)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(fake.Instances()); n != 0 {
		t.Fatalf("%d instances leaked", n)
	}
}

func TestCreateHonoursContext(t *testing.T) {
	p, fake, clk := newClockedProvider(t, nil)
	fake.SetOperationLatency(opLatency)
	ctx, expire := expiringContext(context.Background())
	defer expire()
	driven := make(chan error, 1)
	go func() { driven <- endWaitThenFinishDelete(testContext(t), fake, clk, expire) }()
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if derr := <-driven; derr != nil {
		t.Fatal(derr)
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	// The insert was accepted, so the provider deleted the VM itself.
	if inst != nil || len(fake.Instances()) != 0 {
		t.Fatalf("want the VM deleted after the deadline, got %+v and %d instances", inst, len(fake.Instances()))
	}
}
