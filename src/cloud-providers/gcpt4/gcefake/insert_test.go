// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"
)

func TestInsertHappyPath(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)

	rid := "0b4c1f3e-5d2a-4c8e-9f11-1a2b3c4d5e6f"
	req := insertReq(zoneA, t4Instance("podvm-a", zoneA, 1))
	req.RequestId = proto.String(rid)
	op, err := c.Insert(ctx, req)
	if err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if err := op.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	p := op.Proto()
	if p.GetError() != nil || p.GetStatus() != computepb.Operation_DONE || p.GetOperationType() != "insert" ||
		p.GetClientOperationId() != rid || p.GetKind() != "compute#operation" || !strings.HasPrefix(p.GetName(), "operation-") ||
		p.GetTargetLink() != "https://www.googleapis.com/compute/v1/projects/demo-project/zones/us-central1-a/instances/podvm-a" {
		t.Fatalf("unexpected operation: %v", p)
	}

	inst, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "podvm-a"})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if inst.GetStatus() != "RUNNING" || inst.GetId() == 0 || p.GetTargetId() != inst.GetId() {
		t.Fatalf("status/id: %v %v (op target %v)", inst.GetStatus(), inst.GetId(), p.GetTargetId())
	}
	if got := inst.GetMachineType(); got != "https://www.googleapis.com/compute/v1/projects/demo-project/zones/us-central1-a/machineTypes/n1-standard-4" {
		t.Errorf("machineType = %q", got)
	}
	if len(inst.GetNetworkInterfaces()) != 1 {
		t.Fatalf("nics = %v", inst.GetNetworkInterfaces())
	}
	nic := inst.GetNetworkInterfaces()[0]
	ip, err := netip.ParseAddr(nic.GetNetworkIP())
	if err != nil || !netip.MustParsePrefix("10.128.0.0/20").Contains(ip) {
		t.Errorf("networkIP = %q, want an address in 10.128.0.0/20", nic.GetNetworkIP())
	}
	if len(nic.GetAccessConfigs()) != 0 {
		t.Errorf("unexpected accessConfigs: %v", nic.GetAccessConfigs())
	}
	if nic.GetName() != "nic0" || !strings.HasSuffix(nic.GetSubnetwork(), "/regions/us-central1/subnetworks/default") ||
		!strings.HasPrefix(nic.GetNetwork(), "https://www.googleapis.com/compute/v1/") {
		t.Errorf("nic = %v", nic)
	}
	ga := inst.GetGuestAccelerators()
	if len(ga) != 1 || ga[0].GetAcceleratorType() != "https://www.googleapis.com/compute/v1/projects/demo-project/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4" || ga[0].GetAcceleratorCount() != 1 {
		t.Errorf("guestAccelerators = %v", ga)
	}
	sc := inst.GetScheduling()
	if sc.GetOnHostMaintenance() != "TERMINATE" || sc.GetAutomaticRestart() || sc.GetProvisioningModel() != "STANDARD" {
		t.Errorf("scheduling = %v", sc)
	}
	d := inst.GetDisks()
	if len(d) != 1 || !d[0].GetBoot() || d[0].GetDiskSizeGb() != 30 || d[0].GetInitializeParams() != nil ||
		d[0].GetSource() != "https://www.googleapis.com/compute/v1/projects/demo-project/zones/us-central1-a/disks/podvm-a" {
		t.Errorf("disks = %v", d)
	}
	if inst.GetLabels()["managed-by"] != "caa" || inst.GetMetadata().GetFingerprint() == "" || len(inst.GetMetadata().GetItems()) != 1 {
		t.Errorf("labels/metadata = %v %v", inst.GetLabels(), inst.GetMetadata())
	}

	// A second instance gets the next, distinct address.
	mustInsert(t, c, zoneA, t4Instance("podvm-b", zoneA, 1))
	all := s.Instances()
	if len(all) != 2 || all[0].GetNetworkInterfaces()[0].GetNetworkIP() == all[1].GetNetworkInterfaces()[0].GetNetworkIP() {
		t.Fatalf("instances/IPs not distinct: %v", all)
	}
}

func TestInsertAccessConfigGetsExternalIP(t *testing.T) {
	s := newFake(t)
	inst := t4Instance("public", zoneA, 1)
	inst.NetworkInterfaces[0].AccessConfigs = []*computepb.AccessConfig{{}}
	mustInsert(t, instancesClient(t, s), zoneA, inst)
	ac := s.Instances()[0].GetNetworkInterfaces()[0].GetAccessConfigs()
	if len(ac) != 1 || !strings.HasPrefix(ac[0].GetNatIP(), "34.") || ac[0].GetType() != "ONE_TO_ONE_NAT" {
		t.Fatalf("accessConfigs = %v", ac)
	}
}

func rawInsert(t *testing.T, s *Server, zone, body string) (int, string) {
	t.Helper()
	url := fmt.Sprintf("%s/compute/v1/projects/%s/zones/%s/instances", s.URL(), testProject, zone)
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp.StatusCode, string(b)
}

func TestUnknownFieldRejected(t *testing.T) {
	s := newFake(t)
	code, body := rawInsert(t, s, zoneA, `{"name":"x","bogusField":1}`)
	if code != 400 {
		t.Fatalf("code = %d, body %s", code, body)
	}
	var we wireError
	if err := json.Unmarshal([]byte(body), &we); err != nil {
		t.Fatalf("error body is not GCE JSON: %v: %s", err, body)
	}
	want := `Invalid JSON payload received. Unknown name "bogusField" at 'resource': Cannot find field.`
	if we.Error.Message != want || we.Error.Code != 400 || len(we.Error.Errors) != 1 || we.Error.Errors[0].Reason != "invalid" {
		t.Fatalf("error = %+v, want message %q", we.Error, want)
	}

	// Nested unknown names carry their path.
	_, body = rawInsert(t, s, zoneA, `{"name":"x","scheduling":{"onHostMaintenence":"TERMINATE"}}`)
	if !strings.Contains(body, `Unknown name \"onHostMaintenence\" at 'resource.scheduling'`) {
		t.Fatalf("nested unknown field: %s", body)
	}
	_, body = rawInsert(t, s, zoneA, `{"name":"x","disks":[{"boot":true},{"bogus":1}]}`)
	if !strings.Contains(body, `at 'resource.disks[1]'`) {
		t.Fatalf("unknown field in list: %s", body)
	}
	// Wrong JSON types and malformed JSON are rejected too.
	if code, body := rawInsert(t, s, zoneA, `{"name":5}`); code != 400 || !strings.Contains(body, "Invalid JSON payload") {
		t.Fatalf("type mismatch: %d %s", code, body)
	}
	if code, _ := rawInsert(t, s, zoneA, `{"name":`); code != 400 {
		t.Fatalf("malformed JSON: %d", code)
	}
	if code, body := rawInsert(t, s, zoneA, ``); code != 400 || !strings.Contains(body, "Required field 'resource'") {
		t.Fatalf("empty body: %d %s", code, body)
	}
	if n := len(s.Instances()); n != 0 {
		t.Fatalf("%d instances created by rejected requests", n)
	}
}

func TestBadEnumRejected(t *testing.T) {
	s := newFake(t)
	cases := []struct {
		name   string
		mutate func(*computepb.Instance)
		field  string
		value  string
	}{
		{"onHostMaintenance", func(i *computepb.Instance) { i.Scheduling.OnHostMaintenance = proto.String("LIVE") }, "resource.scheduling.onHostMaintenance", "LIVE"},
		{"provisioningModel", func(i *computepb.Instance) { i.Scheduling.ProvisioningModel = proto.String("CHEAP") }, "resource.scheduling.provisioningModel", "CHEAP"},
		{"undefined sentinel", func(i *computepb.Instance) {
			i.Scheduling.OnHostMaintenance = proto.String("UNDEFINED_ON_HOST_MAINTENANCE")
		}, "resource.scheduling.onHostMaintenance", "UNDEFINED_ON_HOST_MAINTENANCE"},
		{"confidentialInstanceType", func(i *computepb.Instance) {
			i.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{ConfidentialInstanceType: proto.String("TDX2")}
		}, "resource.confidentialInstanceConfig.confidentialInstanceType", "TDX2"},
		{"stackType", func(i *computepb.Instance) { i.NetworkInterfaces[0].StackType = proto.String("IPV5") }, "resource.networkInterfaces[0].stackType", "IPV5"},
		{"nicType", func(i *computepb.Instance) { i.NetworkInterfaces[0].NicType = proto.String("gvnic") }, "resource.networkInterfaces[0].nicType", "gvnic"},
		{"disk type", func(i *computepb.Instance) { i.Disks[0].Type = proto.String("EPHEMERAL") }, "resource.disks[0].type", "EPHEMERAL"},
		{"disk mode", func(i *computepb.Instance) { i.Disks[0].Mode = proto.String("RW") }, "resource.disks[0].mode", "RW"},
		{"disk interface", func(i *computepb.Instance) { i.Disks[0].Interface = proto.String("IDE") }, "resource.disks[0].interface", "IDE"},
		{"accessConfig type", func(i *computepb.Instance) {
			i.NetworkInterfaces[0].AccessConfigs = []*computepb.AccessConfig{{Type: proto.String("NAT")}}
		}, "resource.networkInterfaces[0].accessConfigs[0].type", "NAT"},
		{"guest os feature", func(i *computepb.Instance) {
			i.Disks[0].GuestOsFeatures = []*computepb.GuestOsFeature{{Type: proto.String("UEFI")}}
		}, "resource.disks[0].guestOsFeatures[0].type", "UEFI"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := t4Instance("enum-"+strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"), zoneA, 1)
			tc.mutate(inst)
			gerr := insertErr(t, s, zoneA, inst, 400, "invalid")
			want := fmt.Sprintf("Invalid value for field '%s': '%s'.", tc.field, tc.value)
			if !strings.HasPrefix(gerr.Message, want) {
				t.Fatalf("message = %q, want prefix %q", gerr.Message, want)
			}
		})
	}
}

func TestLiveMigrationRejected(t *testing.T) {
	s := newFake(t)
	for _, ohm := range []*string{nil, proto.String("MIGRATE")} {
		inst := t4Instance("migrate", zoneA, 1)
		inst.Scheduling.OnHostMaintenance = ohm
		gerr := insertErr(t, s, zoneA, inst, 400, "badRequest")
		if gerr.Message != "Instances with guest accelerators do not support live migration." {
			t.Fatalf("message = %q", gerr.Message)
		}
	}
	// Bundled GPUs count as guest accelerators too.
	g2 := t4Instance("g2", zoneA, 1)
	g2.GuestAccelerators = nil
	g2.MachineType = proto.String("zones/us-central1-a/machineTypes/g2-standard-4")
	g2.Scheduling = nil
	gerr := insertErr(t, s, zoneA, g2, 400, "badRequest")
	if gerr.Message != liveMigrationReject {
		t.Fatalf("g2 message = %q", gerr.Message)
	}
	g2.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE")}
	mustInsert(t, instancesClient(t, s), zoneA, g2)
}

func TestAcceleratorValidation(t *testing.T) {
	s := newFake(t)
	cases := []struct {
		name    string
		zone    string
		mutate  func(*computepb.Instance)
		contain string
	}{
		{"count 3", zoneA, func(i *computepb.Instance) { i.GuestAccelerators[0].AcceleratorCount = proto.Int32(3) },
			"'resource.guestAccelerators[0].acceleratorCount': '3'"},
		{"count 8", zoneA, func(i *computepb.Instance) { i.GuestAccelerators[0].AcceleratorCount = proto.Int32(8) },
			"'resource.guestAccelerators[0].acceleratorCount': '8'"},
		{"count 0", zoneA, func(i *computepb.Instance) { i.GuestAccelerators[0].AcceleratorCount = proto.Int32(0) },
			"must be greater than 0"},
		{"e2-medium", zoneA, func(i *computepb.Instance) {
			i.MachineType = proto.String("zones/us-central1-a/machineTypes/e2-medium")
		},
			"machine type 'e2-medium' is not supported"},
		{"g1-small", zoneA, func(i *computepb.Instance) { i.MachineType = proto.String("zones/us-central1-a/machineTypes/g1-small") },
			"machine type 'g1-small' is not supported"},
		{"f1-micro", zoneA, func(i *computepb.Instance) { i.MachineType = proto.String("zones/us-central1-a/machineTypes/f1-micro") },
			"machine type 'f1-micro' is not supported"},
		{"c3 with T4", zoneA, func(i *computepb.Instance) {
			i.MachineType = proto.String("zones/us-central1-a/machineTypes/c3-standard-4")
		},
			"machine type 'c3-standard-4' is not supported"},
		{"zone without T4", "us-central1-c", nil,
			"Accelerator type 'nvidia-tesla-t4' does not exist in zone 'us-central1-c'"},
		{"accelerator of other zone", zoneA, func(i *computepb.Instance) {
			i.GuestAccelerators[0].AcceleratorType = proto.String("zones/us-central1-b/acceleratorTypes/nvidia-tesla-t4")
		}, "'resource.guestAccelerators[0].acceleratorType': 'zones/us-central1-b/acceleratorTypes/nvidia-tesla-t4'"},
		{"bare accelerator name", zoneA, func(i *computepb.Instance) {
			i.GuestAccelerators[0].AcceleratorType = proto.String("nvidia-tesla-t4")
		}, "'resource.guestAccelerators[0].acceleratorType': 'nvidia-tesla-t4'"},
		{"too many vCPUs for 1 T4", zoneA, func(i *computepb.Instance) {
			i.MachineType = proto.String("zones/us-central1-a/machineTypes/n1-standard-64")
		}, "exceeds the limit of 48 vCPUs"},
		{"H100 attached", zoneA, func(i *computepb.Instance) {
			i.GuestAccelerators[0].AcceleratorType = proto.String("zones/us-central1-a/acceleratorTypes/nvidia-h100-80gb")
		}, "bundled"},
		{"bundled type plus guestAccelerators", zoneA, func(i *computepb.Instance) {
			i.MachineType = proto.String("zones/us-central1-a/machineTypes/g2-standard-4")
		}, "guestAccelerators must not be specified"},
		{"two accelerator entries", zoneA, func(i *computepb.Instance) {
			i.GuestAccelerators = append(i.GuestAccelerators, i.GuestAccelerators[0])
		}, "At most one"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := t4Instance("accel", tc.zone, 1)
			if tc.mutate != nil {
				tc.mutate(inst)
			}
			gerr := insertErr(t, s, tc.zone, inst, 400, "invalid")
			if !strings.Contains(gerr.Message, tc.contain) {
				t.Fatalf("message = %q, want it to contain %q", gerr.Message, tc.contain)
			}
		})
	}
	// The limits are per count: 4 T4 allow up to 96 vCPUs / 624 GB.
	c := instancesClient(t, s)
	big := t4Instance("four", zoneA, 4)
	big.MachineType = proto.String("projects/demo-project/zones/us-central1-a/machineTypes/n1-highmem-96")
	mustInsert(t, c, zoneA, big)
	// (another region: n1-highmem-96 used all 96 CPUS of us-central1)
	two := t4Instance("two", "us-east1-c", 2)
	two.MachineType = proto.String("https://www.googleapis.com/compute/v1/projects/demo-project/zones/us-east1-c/machineTypes/n1-standard-32")
	mustInsert(t, c, "us-east1-c", two)
}

func TestMachineTypeValidation(t *testing.T) {
	s := newFake(t)
	cases := map[string]string{
		"":              "Machine type must be specified",
		"n1-standard-4": "Must be the URL",
		"zones/us-central1-b/machineTypes/n1-standard-4": "zone of the instance",
		"zones/us-central1-a/machineTypes/n1-standard-3": "Machine type with name 'n1-standard-3' does not exist in zone 'us-central1-a'",
		"zones/us-central1-a/machineTypes/a3-highgpu-8g": "does not exist",
	}
	for mt, want := range cases {
		inst := t4Instance("mt", zoneA, 1)
		if mt == "" {
			inst.MachineType = nil
		} else {
			inst.MachineType = proto.String(mt)
		}
		gerr := insertErr(t, s, zoneA, inst, 400, "invalid")
		if !strings.Contains(gerr.Message, "resource.machineType") || !strings.Contains(gerr.Message, want) {
			t.Errorf("machineType %q: message %q, want %q", mt, gerr.Message, want)
		}
	}
	// a3-highgpu-1g only exists where H100s are.
	inst := t4Instance("a3", "us-central1-b", 1)
	inst.GuestAccelerators = nil
	inst.MachineType = proto.String("zones/us-central1-b/machineTypes/a3-highgpu-1g")
	wantInsertErr(t, s, "us-central1-b", inst, 400, "invalid")
	// Unknown zone and wrong project are 404s.
	_, err := instancesClient(t, s).Insert(testCtx(t), insertReq("us-central1-z", t4Instance("x", zoneA, 1)))
	wantSyncErr(t, err, 404, "notFound")
	req := insertReq(zoneA, t4Instance("x", zoneA, 1))
	req.Project = "other-project"
	_, err = instancesClient(t, s).Insert(testCtx(t), req)
	if gerr := syncErr(t, err, 404, "notFound"); gerr.Message != "The resource 'projects/other-project' was not found" {
		t.Fatalf("message = %q", gerr.Message)
	}
}

func TestNameAndDuplicate(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	for _, bad := range []string{"", "Upper", "1starts-with-digit", "ends-with-", strings.Repeat("a", 64), "under_score"} {
		wantInsertErr(t, s, zoneA, t4Instance(bad, zoneA, 1), 400, "invalid")
	}
	mustInsert(t, c, zoneA, t4Instance("dup", zoneA, 1))
	_, err := c.Insert(testCtx(t), insertReq(zoneA, t4Instance("dup", zoneA, 1)))
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("want *googleapi.Error, got %v", err)
	}
	if gerr.Code != 409 || gerr.Errors[0].Reason != "alreadyExists" ||
		gerr.Message != "The resource 'projects/demo-project/zones/us-central1-a/instances/dup' already exists" {
		t.Fatalf("got %d %+v %q", gerr.Code, gerr.Errors, gerr.Message)
	}
	// The same name in another zone is a different resource.
	mustInsert(t, c, "us-central1-b", t4Instance("dup", "us-central1-b", 1))
}

func TestRequestIDIdempotency(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	rid := "6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
	req := insertReq(zoneA, t4Instance("idem", zoneA, 1))
	req.RequestId = proto.String(rid)
	op1, err := c.Insert(ctx, req)
	if err != nil {
		t.Fatalf("first insert: %v", err)
	}
	op2, err := c.Insert(ctx, req)
	if err != nil {
		t.Fatalf("retried insert with same requestId must not fail: %v", err)
	}
	if op1.Name() != op2.Name() || op2.Proto().GetClientOperationId() != rid {
		t.Fatalf("operations differ: %s vs %s", op1.Name(), op2.Name())
	}
	if n := len(s.Instances()); n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
	// A new requestId with the same name is a real conflict.
	req.RequestId = proto.String("7f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b")
	_, err = c.Insert(ctx, req)
	wantSyncErr(t, err, 409, "alreadyExists")

	// Delete is idempotent the same way, even once the instance is gone.
	del := &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "idem", RequestId: proto.String("8f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b")}
	d1, err := c.Delete(ctx, del)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	d2, err := c.Delete(ctx, del)
	if err != nil || d1.Name() != d2.Name() {
		t.Fatalf("repeated delete: %v, %s vs %s", err, d1.Name(), d2.Name())
	}
	// Malformed and nil UUIDs are rejected.
	for _, bad := range []string{"not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		req.RequestId = proto.String(bad)
		_, err = c.Insert(ctx, req)
		if gerr := syncErr(t, err, 400, "invalid"); !strings.Contains(gerr.Message, "requestId") {
			t.Fatalf("message = %q", gerr.Message)
		}
	}
}

func TestDelete(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	_, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "ghost"})
	if gerr := syncErr(t, err, 404, "notFound"); gerr.Message != "The resource 'projects/demo-project/zones/us-central1-a/instances/ghost' was not found" {
		t.Fatalf("message = %q", gerr.Message)
	}
	mustInsert(t, c, zoneA, t4Instance("victim", zoneA, 1))
	op, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "victim"})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := op.Wait(ctx); err != nil || op.Proto().GetOperationType() != "delete" {
		t.Fatalf("wait: %v %v", err, op.Proto())
	}
	_, err = c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "victim"})
	wantSyncErr(t, err, 404, "notFound")
	// The name is free again.
	mustInsert(t, c, zoneA, t4Instance("victim", zoneA, 1))
}

func TestDiskValidation(t *testing.T) {
	s := newFake(t)
	cases := []struct {
		name    string
		mutate  func(*computepb.Instance)
		code    int
		contain string
	}{
		{"smaller than image", func(i *computepb.Instance) { i.Disks[0].InitializeParams.DiskSizeGb = proto.Int64(10) }, 400,
			"Requested disk size cannot be smaller than the image size (20 GB)"},
		{"no boot disk", func(i *computepb.Instance) { i.Disks[0].Boot = proto.Bool(false) }, 400, "Exactly one boot disk"},
		{"no disks", func(i *computepb.Instance) { i.Disks = nil }, 400, "Exactly one boot disk"},
		{"two boot disks", func(i *computepb.Instance) { i.Disks = append(i.Disks, i.Disks[0]) }, 400, "Exactly one boot disk"},
		{"missing image", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.SourceImage = proto.String("global/images/nope")
		}, 404, "The resource 'projects/demo-project/global/images/nope' was not found"},
		{"missing family", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.SourceImage = proto.String("projects/demo-project/global/images/family/nope")
		}, 404, "global/images/family/nope' was not found"},
		{"malformed image", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.SourceImage = proto.String("podvm-t4")
		}, 400, "resource.disks[0].initializeParams.sourceImage"},
		{"disk type other zone", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.DiskType = proto.String("zones/us-central1-b/diskTypes/pd-ssd")
		}, 400, "resource.disks[0].initializeParams.diskType"},
		{"unknown disk type", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.DiskType = proto.String("zones/us-central1-a/diskTypes/pd-turbo")
		}, 400, "Disk type 'pd-turbo'"},
		{"read-only and auto-deleted", func(i *computepb.Instance) {
			d := proto.Clone(i.Disks[0]).(*computepb.AttachedDisk)
			d.Boot, d.Mode, d.AutoDelete = proto.Bool(false), proto.String("READ_ONLY"), proto.Bool(true)
			i.Disks = append(i.Disks, d)
		}, 400, "Disks attached in READ_ONLY mode cannot be auto-deleted"},
		{"existing disk source", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams = nil
			i.Disks[0].Source = proto.String("zones/us-central1-a/disks/old")
		}, 404, "was not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := t4Instance("disk", zoneA, 1)
			tc.mutate(inst)
			reason := "invalid"
			if tc.code == 404 {
				reason = "notFound"
			}
			gerr := insertErr(t, s, zoneA, inst, tc.code, reason)
			if !strings.Contains(gerr.Message, tc.contain) {
				t.Fatalf("message = %q, want %q", gerr.Message, tc.contain)
			}
		})
	}
	// All documented image forms resolve; omitting diskSizeGb takes the
	// image size.
	c := instancesClient(t, s)
	for i, img := range []string{
		"global/images/podvm-t4",
		"projects/demo-project/global/images/podvm-t4",
		"https://www.googleapis.com/compute/v1/projects/demo-project/global/images/podvm-t4",
		"projects/demo-project/global/images/family/podvm-t4",
	} {
		inst := t4Instance(fmt.Sprintf("img-%d", i), zoneA, 1)
		inst.Disks[0].InitializeParams.SourceImage = proto.String(img)
		inst.Disks[0].InitializeParams.DiskSizeGb = nil
		mustInsert(t, c, zoneA, inst)
	}
	for _, inst := range s.Instances() {
		if inst.GetDisks()[0].GetDiskSizeGb() != 20 {
			t.Errorf("%s: disk size %d, want image size 20", inst.GetName(), inst.GetDisks()[0].GetDiskSizeGb())
		}
	}
}

func TestNetworkValidation(t *testing.T) {
	s := newFake(t)
	cases := []struct {
		name    string
		mutate  func(*computepb.Instance)
		code    int
		contain string
	}{
		{"no nic", func(i *computepb.Instance) { i.NetworkInterfaces = nil }, 400, "At least one network interface"},
		{"other network", func(i *computepb.Instance) { i.NetworkInterfaces[0].Network = proto.String("global/networks/prod") }, 404,
			"The resource 'projects/demo-project/global/networks/prod' was not found"},
		{"subnet of other region", func(i *computepb.Instance) {
			i.NetworkInterfaces[0].Subnetwork = proto.String("regions/us-east1/subnetworks/default")
		}, 400, "resource.networkInterfaces[0].subnetwork"},
		{"missing subnet", func(i *computepb.Instance) {
			i.NetworkInterfaces[0].Subnetwork = proto.String("projects/demo-project/regions/us-central1/subnetworks/pods")
		}, 404, "subnetworks/pods' was not found"},
		{"ip outside subnet", func(i *computepb.Instance) { i.NetworkInterfaces[0].NetworkIP = proto.String("10.0.0.5") }, 400, "networkIP"},
		{"second nic same network", func(i *computepb.Instance) {
			i.NetworkInterfaces = append(i.NetworkInterfaces, &computepb.NetworkInterface{})
		}, 400, "Networks must be distinct"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := t4Instance("net", zoneA, 1)
			tc.mutate(inst)
			reason := "invalid"
			if tc.code == 404 {
				reason = "notFound"
			}
			gerr := insertErr(t, s, zoneA, inst, tc.code, reason)
			if !strings.Contains(gerr.Message, tc.contain) {
				t.Fatalf("message = %q, want %q", gerr.Message, tc.contain)
			}
		})
	}
	// Subnetwork-only and explicit-IP forms are accepted.
	c := instancesClient(t, s)
	inst := t4Instance("subnet-only", zoneA, 1)
	inst.NetworkInterfaces = []*computepb.NetworkInterface{{
		Subnetwork: proto.String("https://www.googleapis.com/compute/v1/projects/demo-project/regions/us-central1/subnetworks/default"),
		NetworkIP:  proto.String("10.128.0.77"),
	}}
	mustInsert(t, c, zoneA, inst)
	if ip := s.Instances()[0].GetNetworkInterfaces()[0].GetNetworkIP(); ip != "10.128.0.77" {
		t.Fatalf("networkIP = %q", ip)
	}
	dupIP := t4Instance("dup-ip", zoneA, 1)
	dupIP.NetworkInterfaces[0].NetworkIP = proto.String("10.128.0.77")
	wantInsertErr(t, s, zoneA, dupIP, 400, "invalid")
}

func TestLabelValidation(t *testing.T) {
	s := newFake(t)
	for _, tc := range []struct {
		labels  map[string]string
		contain string
	}{
		{map[string]string{"Upper": "x"}, "Label key 'Upper'"},
		{map[string]string{"1digit": "x"}, "Label key '1digit'"},
		{map[string]string{"ok": "Bad Value"}, "Label value 'Bad Value'"},
		{map[string]string{"ok": strings.Repeat("v", 64)}, "resource.labels.ok"},
		{map[string]string{strings.Repeat("k", 64): "v"}, "violates format constraints"},
	} {
		inst := t4Instance("labels", zoneA, 1)
		inst.Labels = tc.labels
		gerr := insertErr(t, s, zoneA, inst, 400, "invalid")
		if !strings.Contains(gerr.Message, tc.contain) || !strings.Contains(gerr.Message, "resource.labels") {
			t.Errorf("labels %v: message %q, want %q", tc.labels, gerr.Message, tc.contain)
		}
	}
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	inst := t4Instance("labels", zoneA, 1)
	inst.Labels = many
	wantInsertErr(t, s, zoneA, inst, 400, "invalid")
	// 64 labels, an empty value and a 63-char key are fine.
	delete(many, "k64")
	many[strings.Repeat("k", 63)] = ""
	delete(many, "k63")
	inst.Labels = many
	mustInsert(t, instancesClient(t, s), zoneA, inst)
}

func TestMetadataValidation(t *testing.T) {
	s := newFake(t)
	item := func(k, v string) *computepb.Items {
		return &computepb.Items{Key: proto.String(k), Value: proto.String(v)}
	}
	for _, tc := range []struct {
		items   []*computepb.Items
		contain string
	}{
		{[]*computepb.Items{item("bad key", "v")}, "resource.metadata.items[0].key"},
		{[]*computepb.Items{item("", "v")}, "resource.metadata.items[0].key"},
		{[]*computepb.Items{item("a", "1"), item("a", "2")}, "Duplicate metadata key 'a'"},
		{[]*computepb.Items{item("big", strings.Repeat("x", 256*1024+1))}, "resource.metadata.items[0].value"},
		{[]*computepb.Items{item("a", strings.Repeat("x", 200*1024)), item("b", strings.Repeat("x", 200*1024)), item("c", strings.Repeat("x", 200*1024))}, "total size"},
	} {
		inst := t4Instance("md", zoneA, 1)
		inst.Metadata.Items = tc.items
		gerr := insertErr(t, s, zoneA, inst, 400, "invalid")
		if !strings.Contains(gerr.Message, tc.contain) {
			t.Errorf("message %q, want %q", gerr.Message, tc.contain)
		}
	}
	inst := t4Instance("md", zoneA, 1)
	inst.Metadata.Items = []*computepb.Items{item("user-data", strings.Repeat("x", 256*1024)), item("Under_Score-1", "")}
	mustInsert(t, instancesClient(t, s), zoneA, inst)
}

func TestSchedulingValidation(t *testing.T) {
	s := newFake(t)
	spot := func(i *computepb.Instance) {
		i.Scheduling = &computepb.Scheduling{
			ProvisioningModel:         proto.String("SPOT"),
			OnHostMaintenance:         proto.String("TERMINATE"),
			AutomaticRestart:          proto.Bool(false),
			InstanceTerminationAction: proto.String("DELETE"),
		}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*computepb.Instance)
		contain string
	}{
		{"spot with restart", func(i *computepb.Instance) { spot(i); i.Scheduling.AutomaticRestart = proto.Bool(true) }, "resource.scheduling.automaticRestart"},
		{"preemptible with restart", func(i *computepb.Instance) {
			i.Scheduling = &computepb.Scheduling{Preemptible: proto.Bool(true), OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(true)}
		}, "resource.scheduling.automaticRestart"},
		{"termination action on standard", func(i *computepb.Instance) {
			i.Scheduling.InstanceTerminationAction = proto.String("DELETE")
		}, "resource.scheduling.instanceTerminationAction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := t4Instance("sched", zoneA, 1)
			tc.mutate(inst)
			gerr := insertErr(t, s, zoneA, inst, 400, "invalid")
			if !strings.Contains(gerr.Message, tc.contain) {
				t.Fatalf("message %q, want %q", gerr.Message, tc.contain)
			}
		})
	}
	// Spot without GPUs still needs TERMINATE.
	cpuOnly := t4Instance("spot-cpu", zoneA, 1)
	cpuOnly.GuestAccelerators = nil
	spot(cpuOnly)
	cpuOnly.Scheduling.OnHostMaintenance = proto.String("MIGRATE")
	if gerr := insertErr(t, s, zoneA, cpuOnly, 400, "invalid"); !strings.Contains(gerr.Message, "resource.scheduling.onHostMaintenance") {
		t.Fatalf("message %q", gerr.Message)
	}
	ok := t4Instance("spot", zoneA, 1)
	spot(ok)
	mustInsert(t, instancesClient(t, s), zoneA, ok)
	if sc := s.Instances()[0].GetScheduling(); sc.GetProvisioningModel() != "SPOT" || sc.GetInstanceTerminationAction() != "DELETE" {
		t.Fatalf("stored scheduling %v", sc)
	}
}

func TestConfidentialValidation(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)

	tdxN1 := t4Instance("tdx-n1", zoneA, 1)
	tdxN1.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{ConfidentialInstanceType: proto.String("TDX")}
	gerr := insertErr(t, s, zoneA, tdxN1, 400, "invalid")
	if !strings.Contains(gerr.Message, "resource.confidentialInstanceConfig") || !strings.Contains(gerr.Message, "n1-standard-4") {
		t.Fatalf("message %q", gerr.Message)
	}
	// enableConfidentialCompute alone means SEV, which N1 lacks too.
	sevN1 := t4Instance("sev-n1", zoneA, 1)
	sevN1.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{EnableConfidentialCompute: proto.Bool(true)}
	wantInsertErr(t, s, zoneA, sevN1, 400, "invalid")

	// A TDX image: UEFI, TDX_CAPABLE, and GVNIC, which A3 networks through
	// (see rules_test.go for each missing piece).
	s.AddImage(testProject, &computepb.Image{Name: proto.String("podvm-tdx"), DiskSizeGb: proto.Int64(20), GuestOsFeatures: features("UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")})
	s.AddImage(testProject, &computepb.Image{Name: proto.String("podvm-sev"), DiskSizeGb: proto.Int64(20), GuestOsFeatures: features("UEFI_COMPATIBLE", "SEV_CAPABLE", "SEV_SNP_CAPABLE")})
	a3 := func(name string) *computepb.Instance {
		inst := t4Instance(name, zoneA, 1)
		inst.GuestAccelerators = nil
		inst.MachineType = proto.String("zones/us-central1-a/machineTypes/a3-highgpu-1g")
		inst.Disks[0].InitializeParams.SourceImage = proto.String("global/images/podvm-tdx")
		inst.Disks[0].Interface = proto.String("NVME")
		inst.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{ConfidentialInstanceType: proto.String("TDX")}
		inst.Scheduling = &computepb.Scheduling{
			ProvisioningModel: proto.String("SPOT"),
			OnHostMaintenance: proto.String("TERMINATE"),
			AutomaticRestart:  proto.Bool(false),
		}
		return inst
	}
	mustInsert(t, c, zoneA, a3("a3-tdx"))
	got := s.Instances()[0]
	if got.GetConfidentialInstanceConfig().GetConfidentialInstanceType() != "TDX" || len(got.GetGuestAccelerators()) != 0 {
		t.Fatalf("stored a3 instance: %v", got)
	}
	// a3-highgpu-1g with guestAccelerators is refused: the GPU is bundled.
	withGA := a3("a3-ga")
	withGA.GuestAccelerators = []*computepb.AcceleratorConfig{{
		AcceleratorType: proto.String("zones/us-central1-a/acceleratorTypes/nvidia-h100-80gb"), AcceleratorCount: proto.Int32(1),
	}}
	wantInsertErr(t, s, zoneA, withGA, 400, "invalid")
	// SEV_SNP is n2d-only; TDX on n2d is refused.
	n2d := func(typ string, ohm string) *computepb.Instance {
		inst := t4Instance("n2d-"+strings.ToLower(strings.ReplaceAll(typ, "_", "-"))+"-"+strings.ToLower(ohm), zoneA, 1)
		inst.GuestAccelerators = nil
		inst.MachineType = proto.String("zones/us-central1-a/machineTypes/n2d-standard-4")
		inst.Disks[0].InitializeParams.SourceImage = proto.String("global/images/podvm-sev")
		inst.Disks[0].Interface = proto.String("NVME")
		inst.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{EnableConfidentialCompute: proto.Bool(true), ConfidentialInstanceType: proto.String(typ)}
		inst.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String(ohm)}
		return inst
	}
	wantInsertErr(t, s, zoneA, n2d("TDX", "TERMINATE"), 400, "invalid")
	// SEV on N2D may live-migrate; SEV_SNP may not.
	mustInsert(t, c, zoneA, n2d("SEV", "MIGRATE"))
	wantInsertErr(t, s, zoneA, n2d("SEV_SNP", "MIGRATE"), 400, "invalid")
	mustInsert(t, c, zoneA, n2d("SEV_SNP", "TERMINATE"))
	// TDX on c3 needs TERMINATE.
	c3 := n2d("TDX", "MIGRATE")
	c3.MachineType = proto.String("zones/us-central1-a/machineTypes/c3-standard-4")
	c3.Disks[0].InitializeParams.SourceImage = proto.String("global/images/podvm-tdx")
	if gerr := insertErr(t, s, zoneA, c3, 400, "invalid"); !strings.Contains(gerr.Message, "resource.scheduling.onHostMaintenance") {
		t.Fatalf("message %q", gerr.Message)
	}
	// Confidential VMs need a UEFI image.
	s.AddImage(testProject, &computepb.Image{Name: proto.String("bios-only"), DiskSizeGb: proto.Int64(10)})
	bios := a3("a3-bios")
	bios.Disks[0].InitializeParams.SourceImage = proto.String("global/images/bios-only")
	if gerr := insertErr(t, s, zoneA, bios, 400, "invalid"); !strings.Contains(gerr.Message, "UEFI_COMPATIBLE") {
		t.Fatalf("message %q", gerr.Message)
	}
}

func TestCountedBody(t *testing.T) {
	// The recorded body is what the client sent, so callers can assert on
	// the wire form.
	s := newFake(t)
	mustInsert(t, instancesClient(t, s), zoneA, t4Instance("wire", zoneA, 1))
	var body []byte
	for _, call := range s.Calls() {
		if call.Kind == "instances.insert" {
			body = call.Body
		}
	}
	if !bytes.Contains(body, []byte(`"acceleratorType":"zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4"`)) {
		t.Fatalf("recorded body: %s", body)
	}
}
