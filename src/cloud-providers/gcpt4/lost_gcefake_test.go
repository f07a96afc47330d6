// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"net/http"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// A podVM GCE stopped (host maintenance: a GPU VM cannot live-migrate) is
// deleted by DeleteInstance like a running one, which frees its disk and
// address; deleting it again, once gone, succeeds: CAA's StopVM after the
// kata shim lost the agent, or the reaper after someone deleted the VM,
// both end there.
func TestDeleteInstanceOfAStoppedVM(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	ctx := context.Background()
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.Interrupt("us-central1-a", inst.Name, gcefake.HostMaintenance); err != nil {
		t.Fatal(err)
	}
	if vms := fake.Instances(); len(vms) != 1 || vms[0].GetStatus() != "TERMINATED" {
		t.Fatalf("after host maintenance: %v", vms)
	}
	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatalf("deleting a TERMINATED podVM: %v", err)
	}
	if vms := fake.Instances(); len(vms) != 0 {
		t.Fatalf("left %v", vms)
	}
	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatalf("deleting it again, once gone: %v", err)
	}
}

// Interruption names what ended each podVM from GCE's operations: a
// preempted Spot VM (which GCE deletes: the provider sets DELETE), host
// maintenance, the guest powering off, a user's stop or delete; nothing
// for one still running; the cause of the current run for one restarted
// after an earlier stop.
func TestInterruptionNamesTheCause(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.ProvisioningModel = ProvisioningSpot })
	std, _ := newTestProviderOn(t, fake, nil)
	ctx := context.Background()
	n := 0
	create := func(p *Provider, pod string) string {
		t.Helper()
		n++
		inst, err := p.CreateInstance(ctx, pod, strings.Repeat(string("0123456789abcdef"[n]), 64), cloudConfig(pod), oneT4)
		if err != nil {
			t.Fatal(err)
		}
		return inst.Name
	}
	preempted, maint, guest, stopped, deleted, running, restarted := create(p, "preempted"), create(std, "maint"), create(std, "guest"),
		create(std, "stopped"), create(std, "deleted"), create(std, "running"), create(std, "restarted")
	const zone = "us-central1-a"
	for name, ev := range map[string]gcefake.HostEvent{preempted: gcefake.Preemption, maint: gcefake.HostMaintenance, restarted: gcefake.HostMaintenance} {
		if err := fake.Interrupt(zone, name, ev); err != nil {
			t.Fatal(err)
		}
	}
	fake.PowerOff(zone, guest)
	c, err := compute.NewInstancesRESTClient(ctx, fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	wait := func(op *compute.Operation, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wait(c.Stop(ctx, &computepb.StopInstanceRequest{Project: fake.Project(), Zone: zone, Instance: stopped}))
	wait(c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: fake.Project(), Zone: zone, Instance: deleted}))
	// Started again by hand, then stopped by its user: the last run's.
	wait(c.Start(ctx, &computepb.StartInstanceRequest{Project: fake.Project(), Zone: zone, Instance: restarted}))
	wait(c.Stop(ctx, &computepb.StopInstanceRequest{Project: fake.Project(), Zone: zone, Instance: restarted}))

	user := "demo@" + fake.Project() + ".iam.gserviceaccount.com"
	want := map[string]Interruption{
		preempted: {Cause: CausePreempted, Operation: "compute.instances.preempted", By: "system"},
		maint:     {Cause: CauseHostMaintenance, Operation: "compute.instances.terminateOnHostMaintenance", By: "system"},
		guest:     {Cause: CauseGuestShutdown, Operation: "compute.instances.guestTerminate", By: "system"},
		stopped:   {Cause: CauseStopped, Operation: "stop", By: user},
		deleted:   {Cause: CauseDeleted, Operation: "delete", By: user},
		running:   {Cause: CauseUnknown},
		restarted: {Cause: CauseStopped, Operation: "stop", By: user},
	}
	for name, w := range want {
		got, err := p.Interruption(ctx, InstanceID(zone, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Cause != w.Cause || got.Operation != w.Operation || got.By != w.By || (w.Operation != "") == got.At.IsZero() {
			t.Errorf("%s: %+v, want %+v", name, got, w)
		}
	}
	if vms := fake.Instances(); len(vms) != 5 {
		t.Errorf("%d VMs left, want 5 (the preempted Spot VM and the deleted one are gone)", len(vms))
	}

	// Without the permission the lookup fails and says which one.
	fake.FailNextReason(http.MethodGet, "zoneOperations.list", http.StatusForbidden, "forbidden", 1)
	if got, err := p.Interruption(ctx, InstanceID(zone, maint)); err == nil || !strings.Contains(err.Error(), "compute.zoneOperations.list") || got.Cause != CauseUnknown {
		t.Errorf("refused lookup: %+v, %v", got, err)
	}
	if _, err := p.Interruption(ctx, maint); err == nil {
		t.Error("a bare name (no zone) was looked up")
	}
}
