// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"context"
	"errors"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

const (
	testProject = "demo-project"
	zoneA       = "us-central1-a"
)

// newTestClock is the Clock the fake's own tests start from.
func newTestClock() *Clock {
	return NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

func newFake(t *testing.T, opts ...Option) *Server {
	t.Helper()
	s := New(opts...)
	t.Cleanup(s.Close)
	return s
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newClient builds any apiv1 REST client against the fake and closes it at
// the end of the test.
func newClient[C interface{ Close() error }](t *testing.T, s *Server, mk func(context.Context, ...option.ClientOption) (C, error)) C {
	t.Helper()
	c, err := mk(context.Background(), s.ClientOptions()...)
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func instancesClient(t *testing.T, s *Server) *compute.InstancesClient {
	return newClient(t, s, compute.NewInstancesRESTClient)
}

// t4Instance is a request GCE accepts: N1 + T4 with TERMINATE, a boot disk
// from the default image, the default network and no external address.
func t4Instance(name, zone string, gpus int32) *computepb.Instance {
	return &computepb.Instance{
		Name:        proto.String(name),
		MachineType: proto.String("zones/" + zone + "/machineTypes/n1-standard-4"),
		GuestAccelerators: []*computepb.AcceleratorConfig{{
			AcceleratorType:  proto.String("zones/" + zone + "/acceleratorTypes/nvidia-tesla-t4"),
			AcceleratorCount: proto.Int32(gpus),
		}},
		Scheduling: &computepb.Scheduling{
			OnHostMaintenance: proto.String("TERMINATE"),
			AutomaticRestart:  proto.Bool(false),
		},
		Disks: []*computepb.AttachedDisk{{
			Boot:       proto.Bool(true),
			AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String("projects/" + testProject + "/global/images/podvm-t4"),
				DiskSizeGb:  proto.Int64(30),
				DiskType:    proto.String("zones/" + zone + "/diskTypes/pd-balanced"),
			},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{{
			Network: proto.String("global/networks/default"),
		}},
		Labels: map[string]string{"managed-by": "caa", "pod": name},
		Metadata: &computepb.Metadata{Items: []*computepb.Items{
			{Key: proto.String("user-data"), Value: proto.String("#cloud-config\n")},
		}},
	}
}

func insertReq(zone string, inst *computepb.Instance) *computepb.InsertInstanceRequest {
	return &computepb.InsertInstanceRequest{Project: testProject, Zone: zone, InstanceResource: inst}
}

// mustInsert inserts and waits, failing the test on any error.
func mustInsert(t *testing.T, c *compute.InstancesClient, zone string, inst *computepb.Instance) *compute.Operation {
	t.Helper()
	ctx := testCtx(t)
	op, err := c.Insert(ctx, insertReq(zone, inst))
	if err != nil {
		t.Fatalf("Insert(%s): %v", inst.GetName(), err)
	}
	if err := op.Wait(ctx); err != nil {
		t.Fatalf("Wait(%s): %v", inst.GetName(), err)
	}
	if e := op.Proto().GetError(); e != nil {
		t.Fatalf("insert %s failed: %v", inst.GetName(), e)
	}
	return op
}

// syncErr asserts a synchronous googleapi error and returns it.
func syncErr(t *testing.T, err error, code int, reason string) *googleapi.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("expected HTTP %d %s, got success", code, reason)
	}
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("expected *googleapi.Error, got %T: %v", err, err)
	}
	if gerr.Code != code {
		t.Fatalf("code = %d, want %d (%v)", gerr.Code, code, err)
	}
	if len(gerr.Errors) == 0 || gerr.Errors[0].Reason != reason {
		t.Fatalf("reason = %+v, want %q (%v)", gerr.Errors, reason, err)
	}
	return gerr
}

// insertErr inserts and expects a synchronous rejection.
func insertErr(t *testing.T, s *Server, zone string, inst *computepb.Instance, code int, reason string) *googleapi.Error {
	t.Helper()
	_, err := instancesClient(t, s).Insert(testCtx(t), insertReq(zone, inst))
	return syncErr(t, err, code, reason)
}

// wantSyncErr is syncErr for a caller that needs only the assertion.
func wantSyncErr(t *testing.T, err error, code int, reason string) {
	t.Helper()
	_ = syncErr(t, err, code, reason)
}

// wantInsertErr is insertErr for a caller that needs only the assertion.
func wantInsertErr(t *testing.T, s *Server, zone string, inst *computepb.Instance, code int, reason string) {
	t.Helper()
	_ = insertErr(t, s, zone, inst, code, reason)
}
