// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"slices"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"
)

func getInstance(t *testing.T, c *compute.InstancesClient, name string) *computepb.Instance {
	t.Helper()
	inst, err := c.Get(testCtx(t), &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: name})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return inst
}

func wantStatus(t *testing.T, c *compute.InstancesClient, name, want string) *computepb.Instance {
	t.Helper()
	inst := getInstance(t, c, name)
	if inst.GetStatus() != want {
		t.Fatalf("%s is %s, want %s", name, inst.GetStatus(), want)
	}
	return inst
}

// listOps lists a zone's operations through the API with a filter.
func listOps(t *testing.T, s *Server, filter string) []*computepb.Operation {
	t.Helper()
	ops := newClient(t, s, compute.NewZoneOperationsRESTClient)
	req := &computepb.ListZoneOperationsRequest{Project: testProject, Zone: zoneA, MaxResults: proto.Uint32(2)}
	if filter != "" {
		req.Filter = proto.String(filter)
	}
	it := ops.List(testCtx(t), req)
	var out []*computepb.Operation
	for {
		op, err := it.Next()
		if err == iterator.Done {
			return out
		}
		if err != nil {
			t.Fatalf("zoneOperations.list %q: %v", filter, err)
		}
		out = append(out, op)
	}
}

func opTypes(ops []*computepb.Operation) []string {
	var out []string
	for _, op := range ops {
		out = append(out, op.GetOperationType())
	}
	return out
}

// A user's stop and start: RUNNING → STOPPING → TERMINATED while the stop
// runs, and back; what GCE refuses in between; a TERMINATED VM can be
// deleted and a deleted one is gone for every call. The operation list
// tells the story, page by page.
func TestStopStartDelete(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now))
	c := instancesClient(t, s)
	ctx := testCtx(t)
	mustInsert(t, c, zoneA, t4Instance("vm", zoneA, 1))
	s.SetOperationLatency(30 * time.Second)

	stop, err := c.Stop(ctx, &computepb.StopInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	wantStatus(t, c, "vm", "STOPPING")
	// Starting or stopping again while it stops: not ready.
	_, err = c.Start(ctx, &computepb.StartInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	wantSyncErr(t, err, 400, "resourceNotReady")
	_, err = c.Stop(ctx, &computepb.StopInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	wantSyncErr(t, err, 400, "resourceNotReady")
	clk.Advance(time.Minute)
	if err = stop.Wait(ctx); err != nil {
		t.Fatalf("stop wait: %v", err)
	}
	inst := wantStatus(t, c, "vm", "TERMINATED")
	if inst.GetLastStopTimestamp() == "" || len(inst.GetNetworkInterfaces()) == 0 || inst.GetNetworkInterfaces()[0].GetNetworkIP() == "" || len(inst.GetDisks()) == 0 {
		t.Fatalf("a stopped VM keeps its disk and address and says when it stopped: %v", inst)
	}
	// Stopping a stopped VM succeeds and changes nothing.
	again, err := c.Stop(ctx, &computepb.StopInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	if err != nil {
		t.Fatalf("stop of a stopped VM: %v", err)
	}
	wantStatus(t, c, "vm", "TERMINATED")
	clk.Advance(time.Minute)
	if err = again.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	start, err := c.Start(ctx, &computepb.StartInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	wantStatus(t, c, "vm", "STAGING")
	clk.Advance(time.Minute)
	if err = start.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if inst := wantStatus(t, c, "vm", "RUNNING"); inst.GetLastStartTimestamp() <= inst.GetLastStopTimestamp() {
		t.Fatalf("lastStart %s not after lastStop %s", inst.GetLastStartTimestamp(), inst.GetLastStopTimestamp())
	}

	// Stopped again, then deleted: GCE deletes a TERMINATED VM.
	stop, err = c.Stop(ctx, &computepb.StopInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if err = stop.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	del, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	if err != nil {
		t.Fatalf("delete of a TERMINATED VM: %v", err)
	}
	clk.Advance(time.Minute)
	if err = del.Wait(ctx); err != nil || len(s.Instances()) != 0 {
		t.Fatalf("after delete: %v %v", err, s.Instances())
	}
	_, err = c.Start(ctx, &computepb.StartInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	wantSyncErr(t, err, 404, "notFound")
	_, err = c.Stop(ctx, &computepb.StopInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	wantSyncErr(t, err, 404, "notFound")

	link := "https://www.googleapis.com/compute/v1/projects/" + testProject + "/zones/" + zoneA + "/instances/vm"
	got := opTypes(listOps(t, s, `targetLink = "`+link+`"`))
	want := []string{"insert", "stop", "stop", "start", "stop", "delete"}
	if !slices.Equal(got, want) {
		t.Fatalf("operations on vm: %v, want %v", got, want)
	}
	if got := opTypes(listOps(t, s, `operationType = "start"`)); !slices.Equal(got, []string{"start"}) {
		t.Fatalf("filtered by type: %v", got)
	}
	ops := newClient(t, s, compute.NewZoneOperationsRESTClient)
	_, err = ops.List(ctx, &computepb.ListZoneOperationsRequest{Project: testProject, Zone: zoneA, Filter: proto.String(`progress = 100`)}).Next()
	wantSyncErr(t, err, 400, "invalid")
}

// spot is a Spot T4 VM with the given termination action.
func spot(name, action string) *computepb.Instance {
	inst := t4Instance(name, zoneA, 1)
	inst.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String(action)}
	return inst
}

// What GCE does on its own: preemption (STOP or DELETE), a host
// maintenance event (TERMINATE stops a GPU VM; MIGRATE keeps a VM
// running), a host error with automatic restart, the guest powering off;
// each shows as a system operation. What GCE never does is refused.
func TestInterrupt(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now))
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, spot("spot-stop", "STOP"))
	mustInsert(t, c, zoneA, spot("spot-del", "DELETE"))
	mustInsert(t, c, zoneA, t4Instance("gpu", zoneA, 1))
	s.AddInstance(zoneA, &computepb.Instance{Name: proto.String("cpu"), MachineType: proto.String("n1-standard-4")})
	s.AddInstance(zoneA, &computepb.Instance{Name: proto.String("cpu-restart"), MachineType: proto.String("n1-standard-4")})
	s.SetOperationLatency(30 * time.Second)

	if err := s.Interrupt(zoneA, "gpu", Preemption); err == nil || !strings.Contains(err.Error(), "never preempted") {
		t.Fatalf("preempting a standard VM: %v", err)
	}
	if err := s.Interrupt(zoneA, "nope", Preemption); err == nil {
		t.Fatal("preempting an unknown VM succeeded")
	}
	for _, name := range []string{"spot-stop", "spot-del"} {
		if err := s.Interrupt(zoneA, name, Preemption); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, c, name, "STOPPING")
	}
	if err := s.Interrupt(zoneA, "spot-stop", Preemption); err == nil {
		t.Fatal("a STOPPING VM was preempted again")
	}
	if err := s.Interrupt(zoneA, "gpu", HostMaintenance); err != nil {
		t.Fatal(err)
	}
	if err := s.Interrupt(zoneA, "cpu", HostMaintenance); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, c, "cpu", "RUNNING") // live migration
	if err := s.Interrupt(zoneA, "cpu-restart", HostError); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)

	if inst := wantStatus(t, c, "spot-stop", "TERMINATED"); inst.GetLastStopTimestamp() == "" {
		t.Fatal("a preempted VM says when it stopped")
	}
	_, err := c.Get(testCtx(t), &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "spot-del"})
	wantSyncErr(t, err, 404, "notFound")
	wantStatus(t, c, "gpu", "TERMINATED")
	if inst := wantStatus(t, c, "cpu-restart", "RUNNING"); inst.GetLastStopTimestamp() == "" || inst.GetLastStartTimestamp() == "" {
		t.Fatalf("a restarted VM says when it stopped and started: %v", inst)
	}
	s.PowerOff(zoneA, "cpu")
	if inst := wantStatus(t, c, "cpu", "TERMINATED"); inst.GetLastStopTimestamp() == "" {
		t.Fatal("a VM its guest powered off says when it stopped")
	}

	byTarget := map[string][]string{}
	for _, op := range listOps(t, s, `user = "system"`) {
		name := op.GetTargetLink()[strings.LastIndex(op.GetTargetLink(), "/")+1:]
		byTarget[name] = append(byTarget[name], op.GetOperationType())
		if op.GetStatus() != computepb.Operation_DONE {
			t.Errorf("system operation %s on %s is %v", op.GetOperationType(), name, op.GetStatus())
		}
		if op.GetOperationType() == opPreempted && op.GetStatusMessage() != "Instance was preempted." {
			t.Errorf("preemption's message %q", op.GetStatusMessage())
		}
	}
	want := map[string][]string{
		"spot-stop":   {opPreempted},
		"spot-del":    {opPreempted},
		"gpu":         {opTerminateOnHost},
		"cpu":         {opMigrateOnHost, opGuestTerminate},
		"cpu-restart": {opHostError, opAutomaticRestart},
	}
	for name, w := range want {
		if !slices.Equal(byTarget[name], w) {
			t.Errorf("%s's system operations %v, want %v", name, byTarget[name], w)
		}
	}
	if len(byTarget) != len(want) {
		t.Errorf("system operations on %v", byTarget)
	}
	// Deleting what GCE stopped works; its address is free again.
	del, err := c.Delete(testCtx(t), &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if err := del.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, inst := range s.Instances() {
		if inst.GetName() == "gpu" {
			t.Fatal("the stopped VM survived its delete")
		}
	}
}
