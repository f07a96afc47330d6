// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/protobuf/proto"
)

func TestQuotaExceeded(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	// 8 T4 per region by default: two 4-GPU VMs fit, a third does not.
	for i := range 2 {
		inst := t4Instance(fmt.Sprintf("q%d", i), zoneA, 4)
		inst.MachineType = proto.String("zones/us-central1-a/machineTypes/n1-standard-8")
		mustInsert(t, c, zoneA, inst)
	}
	op, err := c.Insert(ctx, insertReq("us-central1-b", t4Instance("q-over", "us-central1-b", 1)))
	if err != nil {
		t.Fatalf("quota errors are asynchronous, got sync error %v", err)
	}
	err = op.Wait(ctx)
	var ae *apierror.APIError
	if !errors.As(err, &ae) || ae.HTTPCode() != http.StatusForbidden {
		t.Fatalf("Wait error = %v, want HTTP 403 APIError", err)
	}
	e := op.Proto().GetError().GetErrors()
	if len(e) != 1 || e[0].GetCode() != "QUOTA_EXCEEDED" || e[0].GetMessage() != "Quota 'NVIDIA_T4_GPUS' exceeded. Limit: 8.0 in region us-central1." {
		t.Fatalf("operation error = %v", e)
	}
	qi := e[0].GetErrorDetails()[0].GetQuotaInfo()
	if qi.GetMetricName() != "compute.googleapis.com/nvidia_t4_gpus" || qi.GetLimit() != 8 || qi.GetDimensions()["region"] != "us-central1" || qi.GetLimitName() == "" {
		t.Fatalf("quotaInfo = %v", qi)
	}
	if op.Proto().GetHttpErrorStatusCode() != 403 {
		t.Fatalf("httpErrorStatusCode = %d", op.Proto().GetHttpErrorStatusCode())
	}
	if _, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: "us-central1-b", Instance: "q-over"}); err == nil {
		t.Fatal("instance created despite quota error")
	}
	// Spot draws on the preemptible quota, which still has room.
	spot := t4Instance("q-spot", "us-central1-b", 1)
	spot.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)}
	mustInsert(t, c, "us-central1-b", spot)
	// Another region has its own T4 quota but GPUS_ALL_REGIONS is global.
	s.SetQuota("", "GPUS_ALL_REGIONS", 9)
	op, err = c.Insert(ctx, insertReq("us-east1-c", t4Instance("q-east", "us-east1-c", 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := op.Wait(ctx); err == nil {
		t.Fatal("want GPUS_ALL_REGIONS failure")
	}
	e = op.Proto().GetError().GetErrors()
	if e[0].GetMessage() != "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 9.0 globally." ||
		e[0].GetErrorDetails()[0].GetQuotaInfo().GetMetricName() != "compute.googleapis.com/gpus_all_regions" {
		t.Fatalf("operation error = %v", e)
	}
	// H100: on-demand quota is 0 by default.
	s.SetQuota("", "GPUS_ALL_REGIONS", 100)
	a3 := t4Instance("a3", zoneA, 1)
	a3.GuestAccelerators = nil
	a3.MachineType = proto.String("zones/us-central1-a/machineTypes/a3-highgpu-1g")
	// On demand, a3-highgpu-1g comes only from a reservation (rules_test.go).
	a3.ReservationAffinity = &computepb.ReservationAffinity{ConsumeReservationType: proto.String("SPECIFIC_RESERVATION"), Key: proto.String("compute.googleapis.com/reservation-name"), Values: []string{"h100"}}
	op, err = c.Insert(ctx, insertReq(zoneA, a3))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	_ = op.Wait(ctx)
	if msg := op.Proto().GetError().GetErrors()[0].GetMessage(); msg != "Quota 'NVIDIA_H100_GPUS' exceeded. Limit: 0.0 in region us-central1." {
		t.Fatalf("message = %q", msg)
	}
	// CPUS: 96 per region; 8 + 8 + 4 are in use in us-central1.
	cpu := t4Instance("cpu", "us-central1-c", 1)
	cpu.GuestAccelerators = nil
	cpu.MachineType = proto.String("zones/us-central1-c/machineTypes/n1-standard-96")
	op, err = c.Insert(ctx, insertReq("us-central1-c", cpu))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	_ = op.Wait(ctx)
	if code := op.Proto().GetError().GetErrors()[0].GetCode(); code != "QUOTA_EXCEEDED" ||
		!strings.HasPrefix(op.Proto().GetError().GetErrors()[0].GetMessage(), "Quota 'CPUS' exceeded") {
		t.Fatalf("cpu quota: %v", op.Proto().GetError())
	}
}

func TestStockout(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	s.SetStockout("us-central1-b", true)
	op, err := c.Insert(ctx, insertReq("us-central1-b", t4Instance("so", "us-central1-b", 2)))
	if err != nil {
		t.Fatalf("stockouts are asynchronous, got %v", err)
	}
	err = op.Wait(ctx)
	var ae *apierror.APIError
	if !errors.As(err, &ae) || ae.HTTPCode() != http.StatusServiceUnavailable {
		t.Fatalf("Wait error = %v, want HTTP 503", err)
	}
	e := op.Proto().GetError().GetErrors()
	if len(e) != 1 || e[0].GetCode() != "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" {
		t.Fatalf("operation error = %v", e)
	}
	var info *computepb.ErrorInfo
	var localized string
	for _, d := range e[0].GetErrorDetails() {
		if d.GetErrorInfo() != nil {
			info = d.GetErrorInfo()
		}
		if d.GetLocalizedMessage() != nil {
			localized = d.GetLocalizedMessage().GetMessage()
		}
	}
	md := info.GetMetadatas()
	if info.GetReason() != "resource_availability" || info.GetDomain() != "compute.googleapis.com" ||
		md["zonesAvailable"] != "us-central1-a,us-central1-f" || md["attachment"] != "nvidia-tesla-t4:2" ||
		md["vmType"] != "n1-standard-4" || md["zone"] != "us-central1-b" || localized == "" {
		t.Fatalf("errorInfo = %v, localized %q", info, localized)
	}
	if len(s.Instances()) != 0 {
		t.Fatal("instance created despite stockout")
	}
	// A stocked-out zone drops out of zonesAvailable elsewhere.
	s.SetStockout("us-central1-a", true)
	op, _ = c.Insert(ctx, insertReq("us-central1-a", t4Instance("so2", "us-central1-a", 1)))
	_ = op.Wait(ctx)
	for _, d := range op.Proto().GetError().GetErrors()[0].GetErrorDetails() {
		if d.GetErrorInfo() != nil && d.GetErrorInfo().GetMetadatas()["zonesAvailable"] != "us-central1-f" {
			t.Fatalf("zonesAvailable = %q", d.GetErrorInfo().GetMetadatas()["zonesAvailable"])
		}
	}
	s.SetStockout("us-central1-b", false)
	mustInsert(t, c, "us-central1-b", t4Instance("so", "us-central1-b", 2))
}

func TestSilentOperationFailure(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	s.SetSilentOperationFailure(true)
	s.SetStockout(zoneA, true)
	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("silent", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := op.Wait(ctx); err != nil {
		t.Fatalf("silent failure: Wait must return nil (that is the trap), got %v", err)
	}
	if op.Proto().GetError() == nil || op.Proto().HttpErrorStatusCode != nil {
		t.Fatalf("operation = %v", op.Proto())
	}
	if len(s.Instances()) != 0 {
		t.Fatal("instance created")
	}
}

func TestFailNext(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	s.FailNext(http.MethodPost, "instances.insert", http.StatusServiceUnavailable, 1)
	_, err := c.Insert(ctx, insertReq(zoneA, t4Instance("fn", zoneA, 1)))
	wantSyncErr(t, err, 503, "backendError")
	if n := s.CountCalls("instances.insert"); n != 1 {
		t.Fatalf("Insert is not retried by the client: want 1 call, got %d", n)
	}
	if len(s.Instances()) != 0 {
		t.Fatal("failed request had side effects")
	}
	calls := s.Calls()
	if last := calls[len(calls)-1]; last.Status != 503 || last.Method != "POST" || !strings.Contains(last.RawQuery, "") {
		t.Fatalf("last call = %+v", last)
	}
	// Only one failure was scripted.
	mustInsert(t, c, zoneA, t4Instance("fn", zoneA, 1))

	// Get retries 503 on its own.
	s.ResetCalls()
	s.FailNext(http.MethodGet, "instances.get", http.StatusServiceUnavailable, 1)
	if _, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "fn"}); err != nil {
		t.Fatalf("Get should have retried: %v", err)
	}
	if n := s.CountCalls("instances.get"); n != 2 {
		t.Fatalf("instances.get calls = %d, want 2", n)
	}
	s.FailNext(http.MethodGet, "instances.get", http.StatusTooManyRequests, 1)
	_, err = c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "fn"})
	wantSyncErr(t, err, 429, "rateLimitExceeded")
	s.FailNextReason(http.MethodDelete, "instances.delete", 403, "rateLimitExceeded", 1)
	_, err = c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "fn"})
	wantSyncErr(t, err, 403, "rateLimitExceeded")
	s.FailNext(http.MethodDelete, "instances.delete", 400, 1)
	_, err = c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "fn"})
	wantSyncErr(t, err, 400, "invalid")
	if len(s.Instances()) != 1 {
		t.Fatal("injected delete failures removed the instance")
	}
}

func TestOperationLatencyWithClock(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now))
	s.SetOperationLatency(30 * time.Second)
	c := instancesClient(t, s)
	ops := newClient(t, s, compute.NewZoneOperationsRESTClient)
	ctx := testCtx(t)

	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("slow", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if op.Done() || op.Proto().GetStatus() != computepb.Operation_RUNNING {
		t.Fatalf("op should be RUNNING: %v", op.Proto().GetStatus())
	}
	// While the operation runs, the instance is visible as PROVISIONING.
	inst, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "slow"})
	if err != nil || inst.GetStatus() != "PROVISIONING" {
		t.Fatalf("during insert: %v %v", inst.GetStatus(), err)
	}
	if err := op.Poll(ctx); err != nil || op.Done() {
		t.Fatalf("Poll before latency elapsed: done=%v err=%v", op.Done(), err)
	}

	// The long-poll blocks until the clock passes the latency: once it is
	// parked on the RUNNING operation, only Advance can release it.
	type waited struct {
		op  *computepb.Operation
		err error
	}
	res := make(chan waited, 1)
	go func() {
		got, err := ops.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: testProject, Zone: zoneA, Operation: op.Name()})
		res <- waited{got, err}
	}()
	if err := s.AwaitLongPolls(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		t.Fatalf("ZoneOperations.Wait returned (%v, %v) before the clock passed the latency", r.op.GetStatus(), r.err)
	default:
	}
	clk.Advance(31 * time.Second)
	r := <-res
	if r.err != nil {
		t.Fatalf("ZoneOperations.Wait: %v", r.err)
	}
	if r.op.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("Wait returned %v after the clock passed the latency", r.op.GetStatus())
	}
	if err := op.Wait(ctx); err != nil || !op.Done() {
		t.Fatalf("op.Wait: %v", err)
	}
	inst, _ = c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "slow"})
	if inst.GetStatus() != "RUNNING" {
		t.Fatalf("after insert: %v", inst.GetStatus())
	}
	if s.CountCalls("zoneOperations.wait") != 1 || s.CountCalls("zoneOperations.get") < 2 {
		t.Fatalf("calls: wait=%d get=%d", s.CountCalls("zoneOperations.wait"), s.CountCalls("zoneOperations.get"))
	}

	// Delete with latency: STOPPING until done, then gone.
	dop, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "slow"})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if inst := s.Instances(); len(inst) != 1 || inst[0].GetStatus() != "STOPPING" {
		t.Fatalf("during delete: %v", inst)
	}
	clk.Advance(time.Minute)
	if err := dop.Wait(ctx); err != nil || len(s.Instances()) != 0 {
		t.Fatalf("after delete: %v %v", err, s.Instances())
	}
}

func TestLongPollLimit(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now), WithLongPollLimit(100*time.Millisecond))
	s.SetOperationLatency(time.Hour)
	c := instancesClient(t, s)
	ops := newClient(t, s, compute.NewZoneOperationsRESTClient)
	ctx := testCtx(t)
	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("stuck", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	// GCE's wait may return before DONE; callers must loop.
	got, err := ops.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: testProject, Zone: zoneA, Operation: op.Name()})
	if err != nil || got.GetStatus() == computepb.Operation_DONE {
		t.Fatalf("Wait = %v, %v; want RUNNING after the long-poll limit", got.GetStatus(), err)
	}
	_, err = ops.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: testProject, Zone: zoneA, Operation: "operation-nope"})
	wantSyncErr(t, err, 404, "notFound")
	// Operations are zonal: the right name in the wrong zone is not found.
	_, err = ops.Get(ctx, &computepb.GetZoneOperationRequest{Project: testProject, Zone: "us-central1-b", Operation: op.Name()})
	wantSyncErr(t, err, 404, "notFound")
}

func TestOperationLatencyRealClock(t *testing.T) {
	s := newFake(t)
	s.SetOperationLatency(150 * time.Millisecond)
	c := instancesClient(t, s)
	ops := newClient(t, s, compute.NewZoneOperationsRESTClient)
	ctx := testCtx(t)
	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("real", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	start := time.Now()
	got, err := ops.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: testProject, Zone: zoneA, Operation: op.Name()})
	if err != nil || got.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("Wait = %v, %v", got.GetStatus(), err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("long-poll took %v", el)
	}
	if got.GetEndTime() == "" || got.GetProgress() != 100 {
		t.Fatalf("operation = %v", got)
	}
}

func TestCloseReleasesLongPoll(t *testing.T) {
	clk := newTestClock()
	// Neither the operation, nor the long-poll limit, nor the request's
	// context ends this wait: only Close can.
	s := New(WithClock(clk.Now), WithLongPollLimit(time.Hour))
	s.SetOperationLatency(time.Hour)
	ctx := context.Background()
	c, err := compute.NewInstancesRESTClient(ctx, s.ClientOptions()...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer c.Close()
	ops, err := compute.NewZoneOperationsRESTClient(ctx, s.ClientOptions()...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer ops.Close()
	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("close", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	go func() {
		_, _ = ops.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: testProject, Zone: zoneA, Operation: op.Name()})
	}()
	if err := s.AwaitLongPolls(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		s.Close()
		s.Close()
	}()
	// A liveness guard, not a timing goal: without the release, Close
	// would wait out the hour-long poll.
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close is blocked behind a parked long-poll")
	}
	// The wait was answered (still RUNNING) by the release, not cut off.
	var wait *Call
	for _, call := range s.Calls() {
		if call.Kind == "zoneOperations.wait" {
			wait = &call
		}
	}
	if wait == nil || wait.Status != http.StatusOK {
		t.Fatalf("zoneOperations.wait call = %+v, want answered with 200", wait)
	}
}
