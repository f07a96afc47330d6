// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
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
	p, fake := newTestProvider(t, func(c *Config) { c.ProvisioningModel = setting.ProvisioningSpot })
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
	want := map[string]podevent.Interruption{
		preempted: {Cause: podevent.CausePreempted, Operation: "compute.instances.preempted", By: "system"},
		maint:     {Cause: podevent.CauseHostMaintenance, Operation: "compute.instances.terminateOnHostMaintenance", By: "system"},
		guest:     {Cause: podevent.CauseGuestShutdown, Operation: "compute.instances.guestTerminate", By: "system"},
		stopped:   {Cause: podevent.CauseStopped, Operation: "stop", By: user},
		deleted:   {Cause: podevent.CauseDeleted, Operation: "delete", By: user},
		running:   {Cause: podevent.CauseUnknown},
		restarted: {Cause: podevent.CauseStopped, Operation: "stop", By: user},
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
	if got, err := p.Interruption(ctx, InstanceID(zone, maint)); err == nil || !strings.Contains(err.Error(), "compute.zoneOperations.list") || got.Cause != podevent.CauseUnknown {
		t.Errorf("refused lookup: %+v, %v", got, err)
	}
	if _, err := p.Interruption(ctx, maint); err == nil {
		t.Error("a bare name (no zone) was looked up")
	}
}

// When CAA deletes a podVM whose sandbox ran (StopVM: kata's shim lost
// the agent) and GCE no longer runs it, the pod is told why in one
// PodVMLost Event, under the name the reaper uses, and nothing is left:
// deleted by an admin, stopped by an admin, stopped by host maintenance,
// preempted (Spot, which GCE deletes), still stopping. A pod whose podVM
// still runs (it went away, not its podVM) gets no such Event, and its
// sibling's VM stays.
func TestStopVMOfALostPodVMTellsItsPod(t *testing.T) {
	const zone = "us-central1-a"
	admin := func(t *testing.T, fake *gcefake.Server, verb, name string) {
		t.Helper()
		c, err := compute.NewInstancesRESTClient(context.Background(), fake.ClientOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		var op *compute.Operation
		switch verb {
		case "delete":
			op, err = c.Delete(context.Background(), &computepb.DeleteInstanceRequest{Project: fake.Project(), Zone: zone, Instance: name})
		case "stop":
			op, err = c.Stop(context.Background(), &computepb.StopInstanceRequest{Project: fake.Project(), Zone: zone, Instance: name})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	user := "demo@demo-project.iam.gserviceaccount.com"
	for _, sc := range []struct {
		name  string
		spot  bool
		lose  func(t *testing.T, fake *gcefake.Server, vm string)
		cause string
		words []string
	}{
		{name: "DeletedByAnAdmin", cause: podevent.CauseDeleted, words: []string{"no longer exists on GCE", "a service account deleted it"},
			lose: func(t *testing.T, fake *gcefake.Server, vm string) { admin(t, fake, "delete", vm) }},
		{name: "StoppedByAnAdmin", cause: podevent.CauseStopped, words: []string{"is terminated", "a service account stopped it"},
			lose: func(t *testing.T, fake *gcefake.Server, vm string) { admin(t, fake, "stop", vm) }},
		{name: "HostMaintenance", cause: podevent.CauseHostMaintenance, words: []string{"is terminated", "host maintenance stopped it", "cannot live-migrate"},
			lose: func(t *testing.T, fake *gcefake.Server, vm string) {
				if err := fake.Interrupt(zone, vm, gcefake.HostMaintenance); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "SpotPreempted", spot: true, cause: podevent.CausePreempted, words: []string{"no longer exists on GCE", "GCE preempted it"},
			lose: func(t *testing.T, fake *gcefake.Server, vm string) {
				if err := fake.Interrupt(zone, vm, gcefake.Preemption); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "StillStopping", cause: podevent.CauseHostMaintenance, words: []string{"is stopping", "host maintenance stopped it"},
			lose: func(t *testing.T, fake *gcefake.Server, vm string) {
				// GCE's stop takes the guest's shutdown; kata's shim is
				// faster (StopVM within 0.02 s of a clean guest shutdown).
				fake.SetOperationLatency(time.Hour)
				if err := fake.Interrupt(zone, vm, gcefake.HostMaintenance); err != nil {
					t.Fatal(err)
				}
				// Only GCE's own stop is slow: CAA's delete is not.
				fake.SetOperationLatency(0)
			}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			fake := gcefake.New()
			t.Cleanup(fake.Close)
			api := newEventAPI(t)
			api.addPod("ml", "victim-0", "uid-v")
			api.addPod("ml", "sibling-0", "uid-s")
			p := newEventProvider(t, fake, api, io.Discard, func(c *Config) {
				if sc.spot {
					c.ProvisioningModel = setting.ProvisioningSpot
				}
			})
			t.Cleanup(func() { _ = p.Teardown() })
			ctx := context.Background()
			victim, err := p.CreateInstance(ctx, "victim-0", sandbox, podCloudConfig("ml", "victim-0"), oneT4)
			if err != nil {
				t.Fatal(err)
			}
			sibling, err := p.CreateInstance(ctx, "sibling-0", strings.Repeat("b", 64), podCloudConfig("ml", "sibling-0"), oneT4)
			if err != nil {
				t.Fatal(err)
			}
			api.sandboxReady("ml", "victim-0")
			api.sandboxReady("ml", "sibling-0")
			api.waitEvents(t, "both sandboxes ready", func(evs []storedEvent) bool {
				n := 0
				for _, e := range evs {
					if e.Reason == podevent.ReasonReachable {
						n++
					}
				}
				return n == 2
			})
			sc.lose(t, fake, victim.Name)
			if err := p.DeleteInstance(ctx, victim.ID); err != nil {
				t.Fatalf("StopVM's delete: %v", err)
			}
			evs := api.waitEvents(t, "the lost Event", hasReason(podevent.ReasonLost))
			var lost []storedEvent
			for _, e := range evs {
				if e.Reason == podevent.ReasonLost {
					lost = append(lost, e)
				}
			}
			if len(lost) != 1 {
				t.Fatalf("%d PodVMLost Events: %v", len(lost), reasons(evs))
			}
			e := lost[0]
			if e.Type != "Warning" || e.UID != "uid-v" || e.Annotations[podevent.CauseAnnotation] != sc.cause || e.Annotations[podevent.ZoneAnnotation] != zone || e.Labels[podevent.PhaseLabel] != podevent.PhaseLost {
				t.Errorf("Event: %s uid %s labels %v annotations %v", e.Type, e.UID, e.Labels, e.Annotations)
			}
			for _, w := range append(sc.words, victim.Name, "new podVM") {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message lacks %q: %s", w, e.Message)
				}
			}
			// The pod's tenant reads the Event: the kind of principal, never
			// the account.
			if strings.Contains(e.Message, user) {
				t.Errorf("the Event names the GCE principal %s: %s", user, e.Message)
			}
			var name struct{ Metadata struct{ Name string } }
			_ = json.Unmarshal(e.raw, &name)
			if want := podevent.Name("victim-0", victim.Name, podevent.PhaseLost); name.Metadata.Name != want {
				t.Errorf("Event name %q, want the reaper's %q", name.Metadata.Name, want)
			}
			if vms := fake.Instances(); len(vms) != 1 || vms[0].GetName() != sibling.Name || vms[0].GetStatus() != "RUNNING" {
				t.Fatalf("left %v, want only the sibling, running", vms)
			}
			// The sibling's pod goes away: no loss, and no GCE read to
			// find that out.
			api.deleting("ml", "sibling-0")
			gets := fake.CountCalls("instances.get")
			if err := p.DeleteInstance(ctx, sibling.ID); err != nil {
				t.Fatal(err)
			}
			if n := fake.CountCalls("instances.get"); n != gets {
				t.Errorf("the delete of a deleted pod's podVM read it from GCE (%d instances.get)", n-gets)
			}
			if err := p.Teardown(); err != nil {
				t.Fatal(err)
			}
			if n := len(slices.DeleteFunc(api.list(), func(e storedEvent) bool { return e.Reason != podevent.ReasonLost })); n != 1 {
				t.Errorf("%d PodVMLost Events after the sibling's delete, want the victim's 1", n)
			}
		})
	}
}
