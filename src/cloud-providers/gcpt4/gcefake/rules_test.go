// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Tests of the fake's GCE rules, each the case GCE accepts next to the
// one it rejects (the rule's source is cited next to its code).

func features(names ...string) []*computepb.GuestOsFeature {
	var out []*computepb.GuestOsFeature
	for _, n := range names {
		out = append(out, &computepb.GuestOsFeature{Type: proto.String(n)})
	}
	return out
}

func expectInvalid(t *testing.T, s *Server, inst *computepb.Instance, contain string) {
	t.Helper()
	gerr := insertErr(t, s, zoneA, inst, 400, "invalid")
	if !strings.Contains(gerr.Message, contain) {
		t.Errorf("%s: message %q, want %q", inst.GetName(), gerr.Message, contain)
	}
}

// N1 custom machine types take T4s within the per-count ceilings.
func TestN1CustomMachineTypes(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	custom := func(name, mt string, gpus int32) *computepb.Instance {
		inst := t4Instance(name, zoneA, gpus)
		inst.MachineType = proto.String("zones/us-central1-a/machineTypes/" + mt)
		return inst
	}
	mustInsert(t, c, zoneA, custom("c6", "custom-6-23040", 1))
	mustInsert(t, c, zoneA, custom("c1", "custom-1-1024", 1))
	mustInsert(t, c, zoneA, custom("c60", "custom-60-61440", 4))
	got := map[string]string{}
	for _, i := range s.Instances() {
		got[i.GetName()] = i.GetMachineType()
	}
	if !strings.HasSuffix(got["c6"], "/machineTypes/custom-6-23040") {
		t.Errorf("stored machine type %s", got["c6"])
	}
	for _, tc := range []struct {
		mt      string
		gpus    int32
		contain string
	}{
		{"custom-7-16384", 1, "1 or an even number of vCPUs"},
		{"custom-98-65536", 4, "1 or an even number of vCPUs"},
		{"custom-4-10000", 1, "multiple of 256 MB"},
		{"custom-2-16384", 1, "between 0.9 GB and 6.5 GB per vCPU"},
		{"custom-4-2048", 1, "between 0.9 GB and 6.5 GB per vCPU"},
		// Over the 1-T4 ceiling of 48 vCPUs.
		{"custom-50-65536", 1, "exceeds the limit of 48 vCPUs"},
		{"custom-50-65536", 2, "exceeds the limit of 48 vCPUs"},
	} {
		expectInvalid(t, s, custom("bad", tc.mt, tc.gpus), tc.contain)
	}
	mtc := newClient(t, s, compute.NewMachineTypesRESTClient)
	m, err := mtc.Get(testCtx(t), &computepb.GetMachineTypeRequest{Project: testProject, Zone: zoneA, MachineType: "custom-6-23040"})
	if err != nil || m.GetGuestCpus() != 6 || m.GetMemoryMb() != 23040 {
		t.Errorf("machineTypes.get custom-6-23040: %v %v", m, err)
	}
}

// Label keys and values may use lowercase international characters.
func TestLabelsInternational(t *testing.T) {
	s := newFake(t)
	inst := t4Instance("intl", zoneA, 1)
	inst.Labels = map[string]string{"équipe": "données", "名前": "値-1", "k": strings.Repeat("é", 63)}
	mustInsert(t, instancesClient(t, s), zoneA, inst)
	for _, bad := range []map[string]string{
		{"Équipe": "x"},                 // uppercase international
		{"k": "Données"},                // uppercase in a value
		{"k": strings.Repeat("é", 64)},  // 64 characters
		{"1k": "x"},                     // key starts with a digit
		{"k": strings.Repeat("日本", 32)}, // 64 characters (192 bytes)
	} {
		b := t4Instance("intl-bad", zoneA, 1)
		b.Labels = bad
		wantInsertErr(t, s, zoneA, b, 400, "invalid")
	}
}

// Spot without explicit automaticRestart/onHostMaintenance is what GCE's
// REST example sends; GCE fills in false and TERMINATE. An insert without
// any scheduling block is a standard VM (and must not crash the fake).
func TestSchedulingDefaults(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	spot := t4Instance("spot", zoneA, 1)
	spot.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("DELETE")}
	mustInsert(t, c, zoneA, spot)
	cpu := t4Instance("plain", zoneA, 1)
	cpu.GuestAccelerators, cpu.Scheduling = nil, nil
	mustInsert(t, c, zoneA, cpu)
	for _, i := range s.Instances() {
		sc := i.GetScheduling()
		switch i.GetName() {
		case "spot":
			if sc.GetAutomaticRestart() || sc.GetOnHostMaintenance() != "TERMINATE" || sc.GetProvisioningModel() != "SPOT" {
				t.Errorf("spot defaults: %v", sc)
			}
		case "plain":
			if !sc.GetAutomaticRestart() || sc.GetOnHostMaintenance() != "MIGRATE" || sc.GetProvisioningModel() != "STANDARD" {
				t.Errorf("standard defaults: %v", sc)
			}
		}
	}
	// A GPU VM without a scheduling block is refused (it would live-migrate),
	// and the fake keeps answering.
	gpu := t4Instance("gpu-nosched", zoneA, 1)
	gpu.Scheduling = nil
	wantInsertErr(t, s, zoneA, gpu, 400, "badRequest")
	mustInsert(t, c, zoneA, t4Instance("after", zoneA, 1))
}

// The TDX VM rules: TDX_CAPABLE image, NVMe, Spot (not STANDARD) for
// a3-highgpu-1g, gVNIC; and the minCpuPlatform values of the series.
func TestConfidentialAndPlatformRules(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	s.AddImage(testProject, &computepb.Image{Name: proto.String("tdx"), DiskSizeGb: proto.Int64(20), GuestOsFeatures: features("UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")})
	s.AddImage(testProject, &computepb.Image{Name: proto.String("tdx-no-gvnic"), DiskSizeGb: proto.Int64(20), GuestOsFeatures: features("UEFI_COMPATIBLE", "TDX_CAPABLE")})
	a3 := func(name string) *computepb.Instance {
		inst := t4Instance(name, zoneA, 1)
		inst.GuestAccelerators = nil
		inst.MachineType = proto.String("zones/us-central1-a/machineTypes/a3-highgpu-1g")
		inst.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{ConfidentialInstanceType: proto.String("TDX")}
		inst.MinCpuPlatform = proto.String("Intel Sapphire Rapids")
		inst.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("DELETE")}
		inst.Disks[0].InitializeParams.SourceImage = proto.String("global/images/tdx")
		inst.Disks[0].Interface = proto.String("NVME")
		inst.NetworkInterfaces[0].NicType = proto.String("GVNIC")
		return inst
	}
	mustInsert(t, c, zoneA, a3("ok"))
	// The interface may be left out on A3: it takes only NVMe.
	noIface := a3("ok-default-nvme")
	noIface.Disks[0].Interface = nil
	mustInsert(t, c, zoneA, noIface)
	for _, i := range s.Instances() {
		if i.GetDisks()[0].GetInterface() != "NVME" {
			t.Errorf("%s: stored interface %s", i.GetName(), i.GetDisks()[0].GetInterface())
		}
	}
	for _, tc := range []struct {
		mutate  func(*computepb.Instance)
		contain string
	}{
		{func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.SourceImage = proto.String("global/images/podvm-t4")
		}, "TDX_CAPABLE"},
		{func(i *computepb.Instance) {
			i.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE")}
		}, "only available with the SPOT or FLEX_START"},
		{func(i *computepb.Instance) { i.Disks[0].Interface = proto.String("SCSI") }, "supports only the NVME disk interface"},
		{func(i *computepb.Instance) { i.NetworkInterfaces[0].NicType = proto.String("VIRTIO_NET") }, "supports only the GVNIC"},
		{func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.SourceImage = proto.String("global/images/tdx-no-gvnic")
		}, "does not support gVNIC"},
		{func(i *computepb.Instance) { i.MinCpuPlatform = proto.String("Intel Cascade Lake") }, "not available for machine type 'a3-highgpu-1g'"},
		{func(i *computepb.Instance) { i.MinCpuPlatform = proto.String("Intel Sapphire Rapid") }, "Unknown CPU platform"},
		{func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.DiskType = proto.String("zones/us-central1-a/diskTypes/pd-standard")
		}, "Disk type 'pd-standard' is not supported for machine type 'a3-highgpu-1g'"},
		{func(i *computepb.Instance) { i.Disks[0].InitializeParams.DiskType = nil }, "default disk type pd-standard"},
	} {
		inst := a3("bad")
		tc.mutate(inst)
		expectInvalid(t, s, inst, tc.contain)
	}
	// STANDARD is sold from a specific reservation.
	res := a3("reserved")
	res.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE")}
	res.ReservationAffinity = &computepb.ReservationAffinity{ConsumeReservationType: proto.String("SPECIFIC_RESERVATION"), Key: proto.String("compute.googleapis.com/reservation-name"), Values: []string{"h100"}}
	s.SetQuota("us-central1", "NVIDIA_H100_GPUS", 1)
	mustInsert(t, c, zoneA, res)

	// SCSI on a confidential VM of a series that has both interfaces.
	s.AddImage(testProject, &computepb.Image{Name: proto.String("sev"), DiskSizeGb: proto.Int64(20), GuestOsFeatures: features("UEFI_COMPATIBLE", "SEV_CAPABLE")})
	n2d := t4Instance("sev-scsi", zoneA, 1)
	n2d.GuestAccelerators = nil
	n2d.MachineType = proto.String("zones/us-central1-a/machineTypes/n2d-standard-4")
	n2d.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{ConfidentialInstanceType: proto.String("SEV")}
	n2d.Disks[0].InitializeParams.SourceImage = proto.String("global/images/sev")
	expectInvalid(t, s, n2d, "require the NVME disk interface")
	n2d.Disks[0].Interface = proto.String("NVME")
	n2d.Disks[0].InitializeParams.SourceImage = proto.String("global/images/tdx")
	expectInvalid(t, s, n2d, "SEV_CAPABLE")
	n2d.Disks[0].InitializeParams.SourceImage = proto.String("global/images/sev")
	mustInsert(t, c, zoneA, n2d)

	// N1 takes its own platforms only; E2 takes none.
	n1 := t4Instance("n1-skylake", zoneA, 1)
	n1.MinCpuPlatform = proto.String("Intel Skylake")
	mustInsert(t, c, zoneA, n1)
	n1.Name, n1.MinCpuPlatform = proto.String("n1-spr"), proto.String("Intel Sapphire Rapids")
	expectInvalid(t, s, n1, "not available for machine type 'n1-standard-4'")
	e2 := t4Instance("e2-plat", zoneA, 1)
	e2.GuestAccelerators = nil
	e2.MachineType = proto.String("zones/us-central1-a/machineTypes/e2-standard-4")
	e2.MinCpuPlatform = proto.String("Intel Skylake")
	expectInvalid(t, s, e2, "does not support specifying a minimum CPU platform")
}

// Hyperdisk does not attach to N1 or E2; gVNIC needs an image with GVNIC.
func TestDiskAndNICSeriesRules(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	hd := t4Instance("hd", zoneA, 1)
	hd.Disks[0].InitializeParams.DiskType = proto.String("zones/us-central1-a/diskTypes/hyperdisk-balanced")
	expectInvalid(t, s, hd, "Disk type 'hyperdisk-balanced' is not supported for machine type 'n1-standard-4'")
	hd.GuestAccelerators = nil
	hd.MachineType = proto.String("zones/us-central1-a/machineTypes/e2-standard-4")
	expectInvalid(t, s, hd, "is not supported for machine type 'e2-standard-4'")
	// gVNIC on N1: the default image has the GVNIC feature, a BIOS image not.
	g := t4Instance("gvnic", zoneA, 1)
	g.NetworkInterfaces[0].NicType = proto.String("GVNIC")
	mustInsert(t, c, zoneA, g)
	s.AddImage(testProject, &computepb.Image{Name: proto.String("plain"), DiskSizeGb: proto.Int64(10)})
	g2 := t4Instance("gvnic-plain", zoneA, 1)
	g2.NetworkInterfaces[0].NicType = proto.String("GVNIC")
	g2.Disks[0].InitializeParams.SourceImage = proto.String("global/images/plain")
	expectInvalid(t, s, g2, "does not support gVNIC")
	g2.NetworkInterfaces[0].NicType = proto.String("E1000")
	expectInvalid(t, s, g2, "Value must be one of")
}

// Only service accounts that exist may be attached.
func TestServiceAccountMustExist(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	sa := func(name, email string) *computepb.Instance {
		inst := t4Instance(name, zoneA, 1)
		inst.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(email), Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}}}
		return inst
	}
	expectInvalid(t, s, sa("nope", "podvm@demo-project.iam.gserviceaccount.com"), "The service account 'podvm@demo-project.iam.gserviceaccount.com' does not exist")
	mustInsert(t, c, zoneA, sa("default", "default"))
	mustInsert(t, c, zoneA, sa("compute", s.DefaultServiceAccount()))
	s.AddServiceAccount("podvm@demo-project.iam.gserviceaccount.com")
	mustInsert(t, c, zoneA, sa("added", "podvm@demo-project.iam.gserviceaccount.com"))
}

// Spot capacity runs out independently of standard capacity.
func TestStockoutPerProvisioningModel(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	s.SetStockoutFor(zoneA, "SPOT", true)
	spot := t4Instance("spot", zoneA, 1)
	spot.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("DELETE")}
	op, err := c.Insert(ctx, insertReq(zoneA, spot))
	if err != nil {
		t.Fatal(err)
	}
	_ = op.Wait(ctx)
	if e := op.Proto().GetError().GetErrors(); len(e) != 1 || e[0].GetCode() != "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" {
		t.Fatalf("spot insert: %v", op.Proto().GetError())
	}
	mustInsert(t, c, zoneA, t4Instance("standard", zoneA, 1))
	s.SetStockoutFor(zoneA, "SPOT", false)
	mustInsert(t, c, zoneA, spot)
	if n := len(s.Instances()); n != 2 {
		t.Fatalf("%d instances, want the standard and the later Spot one", n)
	}
}

// requestId: a repeat of the same method in the same zone is ignored (the
// first operation comes back), whatever the body; the same ID in another
// zone or for another method is another request.
func TestRequestIDScopes(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	rid := "1f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
	req := insertReq(zoneA, t4Instance("scope-a", zoneA, 1))
	req.RequestId = proto.String(rid)
	first, err := c.Insert(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Same ID, other body: GCE ignores it and answers with the first.
	other := insertReq(zoneA, t4Instance("scope-other", zoneA, 2))
	other.RequestId = proto.String(rid)
	again, err := c.Insert(ctx, other)
	if err != nil || again.Name() != first.Name() {
		t.Fatalf("repeat with another body: %v, %s vs %s", err, again.Name(), first.Name())
	}
	if n := s.ReplaysWithAnotherBody(); n != 1 {
		t.Errorf("ReplaysWithAnotherBody = %d, want 1", n)
	}
	// Same ID in another zone: a new request.
	b := insertReq("us-central1-b", t4Instance("scope-b", "us-central1-b", 1))
	b.RequestId = proto.String(rid)
	inB, err := c.Insert(ctx, b)
	if err != nil || inB.Name() == first.Name() {
		t.Fatalf("same ID in another zone: %v, %s", err, inB.Name())
	}
	// Same ID for a delete: a new request.
	del, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "scope-a", RequestId: proto.String(rid)})
	if err != nil || del.Name() == first.Name() {
		t.Fatalf("same ID for a delete: %v, %s", err, del.Name())
	}
	if err := del.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, i := range s.Instances() {
		names[i.GetName()] = true
	}
	if len(names) != 1 || !names["scope-b"] {
		t.Fatalf("instances = %v, want only scope-b (scope-other was ignored, scope-a deleted)", names)
	}
	if n := s.ReplaysWithAnotherBody(); n != 1 {
		t.Errorf("ReplaysWithAnotherBody = %d after scoped reuses, want still 1", n)
	}
}
