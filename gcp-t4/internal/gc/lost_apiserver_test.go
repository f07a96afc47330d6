package gc

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// startNodeWith is startNode with more adaptor flags (a provisioning
// model).
func (k *kube) startNodeWith(t *testing.T, fake *gcefake.Server, extra ...string) *node {
	t.Helper()
	srv, err := adaptor.Start(append(k.adaptorFlags(fake, shortTempDir(t)), extra...), "test", os.Stderr, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return &node{srv: srv, shim: shimclient.New(srv.SocketPath(), 0)}
}

// lostEvents are the lost Events on a pod, read as a user reads them.
func (k *kube) lostEvents(t *testing.T, ns, pod string) []corev1.Event {
	t.Helper()
	list, err := k.cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: podevent.PhaseLabel + "=" + podevent.PhaseLost,
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestLostPodVMOnARealAPIServer is issue #40's acceptance on the emulator
// and a real API server: two pods run on podVMs (through `gcp-t4
// adaptor`, which records PeerPods as CAA does), a live sibling and a
// victim; the victim's VM is deleted by an admin, stopped by an admin,
// stopped by host maintenance, or preempted (a Spot podVM, which GCE
// deletes: the provider sets instanceTerminationAction DELETE). One pass
// of the reaper, as its own ServiceAccount with the install's RBAC and
// its provider on the emulator, leaves 0 VMs of the victim's, tells the
// victim's pod why in one PodVMLost Event, and leaves the sibling's VM
// running (0 wrongly deleted). The pass runs three minutes on, past the
// clock-skew allowance a PeerPod must predate the list by, and inside the
// grace period: a stopped VM is deleted whatever its age. No sleeps: the
// pass is driven explicitly, and every VM change has completed (the
// emulator's operations have no latency) before it runs.
func TestLostPodVMOnARealAPIServer(t *testing.T) {
	k := startKube(t)
	k.applyRBAC(t, "install/components/reaper/rbac.yaml")
	api := k.podAPI(t, "caa-gcp-t4-reaper")
	cfg := &rest.Config{Host: api.URL, BearerToken: api.Token, TLSClientConfig: rest.TLSClientConfig{CAData: api.CAPEM}}
	reaperKube, reaperDyn := kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)

	const zone = "us-central1-a"
	admin := func(t *testing.T, fake *gcefake.Server, verb, name string) {
		t.Helper()
		c, err := compute.NewInstancesRESTClient(t.Context(), fake.ClientOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var op *compute.Operation
		switch verb {
		case "delete":
			op, err = c.Delete(t.Context(), &computepb.DeleteInstanceRequest{Project: fake.Project(), Zone: zone, Instance: name})
		case "stop":
			op, err = c.Stop(t.Context(), &computepb.StopInstanceRequest{Project: fake.Project(), Zone: zone, Instance: name})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for i, sc := range []struct {
		name  string
		flags []string
		// lose does it to the victim's VM, by name.
		lose  func(t *testing.T, fake *gcefake.Server, vm string)
		cause string
		// words are in the Event's message; USER is the emulator's caller.
		words   string
		deleted bool // the reaper deleted what was left
	}{
		{name: "DeletedOutOfBand", cause: podevent.CauseDeleted, words: "a service account deleted it",
			lose: func(t *testing.T, fake *gcefake.Server, vm string) { admin(t, fake, "delete", vm) }},
		{name: "StoppedByAnAdmin", cause: podevent.CauseStopped, words: "a service account stopped it", deleted: true,
			lose: func(t *testing.T, fake *gcefake.Server, vm string) { admin(t, fake, "stop", vm) }},
		{name: "StoppedByHostMaintenance", cause: podevent.CauseHostMaintenance, words: "host maintenance stopped it", deleted: true,
			lose: func(t *testing.T, fake *gcefake.Server, vm string) {
				if err := fake.Interrupt(zone, vm, gcefake.HostMaintenance); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "SpotPreempted", flags: []string{"-provisioning-model", setting.ProvisioningSpot}, cause: podevent.CausePreempted, words: "GCE preempted it",
			lose: func(t *testing.T, fake *gcefake.Server, vm string) {
				if err := fake.Interrupt(zone, vm, gcefake.Preemption); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			fake := gcefake.New()
			defer fake.Close()
			ns := "lost-" + strings.ToLower(sc.name)
			k.pod(t, ns, "victim-0")
			k.pod(t, ns, "sibling-0")
			// The API server outlives the scenario and its emulator: its
			// pods go with it, so that no later scenario's reaper finds
			// their PeerPods naming VMs its emulator never had.
			t.Cleanup(func() {
				for _, pod := range []string{"victim-0", "sibling-0"} {
					if err := k.cs.CoreV1().Pods(ns).Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
						t.Error(err)
					}
				}
			})
			n := k.startNodeWith(t, fake, sc.flags...)
			victimSid, siblingSid := strings.Repeat(string(rune('a'+2*i)), 64), strings.Repeat(string(rune('b'+2*i)), 64)
			n.run(t, victimSid, ns, "victim-0")
			n.run(t, siblingSid, ns, "sibling-0")
			victim, sibling := vmOfSandbox(fake, victimSid), vmOfSandbox(fake, siblingSid)
			if victim == "" || sibling == "" {
				t.Fatalf("podVMs %q and %q", victim, sibling)
			}
			_, victimName := splitInstanceID(victim)
			sc.lose(t, fake, victimName)
			words := strings.ReplaceAll(sc.words, "USER", "demo@"+fake.Project()+".iam.gserviceaccount.com")

			m := NewMetrics()
			later := func() time.Time { return time.Now().Add(3 * time.Minute) }
			c := &Collector{VMs: newProvider(t, fake, k.uid), Cluster: KubeCluster{Client: reaperKube, PeerPods: peerpod.Client{Dynamic: reaperDyn}},
				Policy: DefaultPolicy(), Delete: true, Now: later, Log: quiet(),
				Observer: Report{Metrics: m, Now: later, Events: &Events{Client: reaperKube, Now: later, Log: quiet(), Key: &startupevents.KeySource{Client: reaperKube, Namespace: caaNamespace},
					Pod: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "caa-gcp-t4-reaper-x", Namespace: caaNamespace}}}}
			p, err := c.Run(t.Context())
			if err != nil {
				t.Fatal(err)
			}

			if wantDeleted := map[bool]int{true: 1}[sc.deleted]; p.Count(Deleted) != wantDeleted || len(p.Gone) != 1-wantDeleted {
				t.Errorf("first pass: %d deleted, %d gone; want %d and %d", p.Count(Deleted), len(p.Gone), wantDeleted, 1-wantDeleted)
			}
			left, wronglyDeleted := 0, 1
			for _, vm := range fake.Instances() {
				switch id := gcpt4.InstanceID(zone, vm.GetName()); id {
				case victim:
					left++
				case sibling:
					wronglyDeleted = 0
					if vm.GetStatus() != "RUNNING" {
						t.Errorf("the sibling's VM is %s", vm.GetStatus())
					}
				default:
					t.Errorf("unexpected VM %s", id)
				}
			}
			if left != 0 || wronglyDeleted != 0 {
				t.Errorf("victim's VMs left %d, live VMs wrongly deleted %d; want 0 and 0", left, wronglyDeleted)
			}
			evs := k.lostEvents(t, ns, "victim-0")
			if len(evs) != 1 {
				t.Fatalf("victim-0 has %d lost Events, want 1", len(evs))
			}
			ev := evs[0]
			if ev.Reason != podevent.ReasonLost || ev.Type != corev1.EventTypeWarning || ev.Annotations[podevent.CauseAnnotation] != sc.cause ||
				ev.Labels[podevent.PodVMLabel] != victimName || !strings.Contains(ev.Message, words) ||
				strings.Contains(ev.Message, "the reaper deleted it") != sc.deleted || strings.Contains(ev.Message, "@") {
				t.Errorf("victim-0's Event: %s %s %v: %s", ev.Reason, ev.Type, ev.Annotations, ev.Message)
			}
			if evs := k.lostEvents(t, ns, "sibling-0"); len(evs) != 0 {
				t.Errorf("the sibling was told it is lost: %v", evs)
			}
			if got := testutil.ToFloat64(m.lost.WithLabelValues(sc.cause)); got != 1 {
				t.Errorf("lost{%s} = %v, want 1", sc.cause, got)
			}
			// A second pass tells nobody again and deletes nothing.
			p2, err := c.Run(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if evs := k.lostEvents(t, ns, "victim-0"); len(evs) != 1 || len(fake.Instances()) != 1 || len(p2.Gone) != 1 || p2.Gone[0].ID != victim {
				t.Errorf("after a second pass: %d lost Events, %d VMs, gone %v; want 1, 1 and the victim's", len(evs), len(fake.Instances()), p2.Gone)
			}
			t.Logf("lost podVM %q: %d victim VMs left, %d live VMs wrongly deleted, pod told %q (deleted %d, gone %d in the first pass)",
				sc.name, left, wronglyDeleted, ev.Annotations[podevent.CauseAnnotation], p.Count(Deleted), len(p.Gone))
		})
	}
}

// TestLostPodVMToldByTheAdaptorOnARealAPIServer: the usual path. kata's
// shim notices the lost agent and CAA deletes the podVM (measured with
// real CAA v0.22.0: 0.02 s after a stop whose guest shuts down, 35 s after
// a silent loss; docs/reaper.md), before any reaper pass. CAA's provider,
// with the adaptor's ServiceAccount and the install's RBAC, tells the
// victim's pod what ended its podVM in one PodVMLost Event; the live
// sibling keeps its VM and is told nothing; a reaper pass afterwards
// finds nothing left and tells nobody again.
func TestLostPodVMToldByTheAdaptorOnARealAPIServer(t *testing.T) {
	k := startKube(t)
	fake := gcefake.New()
	defer fake.Close()
	k.applyRBAC(t, "install/base/rbac.yaml")
	caa, err := startCAA(t, fake, k.uid, k.podAPI(t, "cloud-api-adaptor"))
	if err != nil {
		t.Fatal(err)
	}
	const ns, zone = "lost-by-caa", "us-central1-a"
	spec := provider.InstanceTypeSpec{GPUs: 1, VCPUs: 3, Memory: 12288}
	ids := map[string]*provider.Instance{}
	for pod, sid := range map[string]string{"victim-0": sidA, "sibling-0": sidB} {
		k.pod(t, ns, pod)
		inst, err := caa.CreateInstance(t.Context(), pod, sid, secretCloudConfig(ns, pod), spec)
		if err != nil {
			t.Fatal(err)
		}
		ids[pod] = inst
		k.sandboxReady(t, ns, pod)
		k.waitStartup(t, ns, pod, podevent.ReasonReachable)
	}
	victim, sibling := ids["victim-0"], ids["sibling-0"]
	if err := fake.Interrupt(zone, victim.Name, gcefake.HostMaintenance); err != nil {
		t.Fatal(err)
	}
	// kata's shim: StopVM, which CAA turns into the provider's delete.
	if err := caa.DeleteInstance(t.Context(), victim.ID); err != nil {
		t.Fatal(err)
	}
	k.waitStartup(t, ns, "victim-0", podevent.ReasonLost)
	evs := k.lostEvents(t, ns, "victim-0")
	if len(evs) != 1 {
		t.Fatalf("victim-0 has %d lost Events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Type != corev1.EventTypeWarning || ev.Source.Component != podevent.Component || ev.Annotations[podevent.CauseAnnotation] != podevent.CauseHostMaintenance ||
		ev.Labels[podevent.PodVMLabel] != victim.Name || !strings.Contains(ev.Message, "host maintenance stopped it") || !strings.Contains(ev.Message, "new podVM") {
		t.Errorf("victim-0's Event: %s %s %+v %v: %s", ev.Reason, ev.Type, ev.Source, ev.Annotations, ev.Message)
	}
	left, wronglyDeleted := 0, 1
	for _, vm := range fake.Instances() {
		switch vm.GetName() {
		case victim.Name:
			left++
		case sibling.Name:
			wronglyDeleted = 0
		}
	}
	if left != 0 || wronglyDeleted != 0 {
		t.Errorf("victim's VMs left %d, live VMs wrongly deleted %d; want 0 and 0", left, wronglyDeleted)
	}
	k.reap(t, fake)
	if evs := k.lostEvents(t, ns, "victim-0"); len(evs) != 1 {
		t.Errorf("after a reaper pass victim-0 has %d lost Events, want 1", len(evs))
	}
	if evs := k.lostEvents(t, ns, "sibling-0"); len(evs) != 0 || len(fake.Instances()) != 1 {
		t.Errorf("sibling: %d lost Events, %d VMs; want 0 and its 1", len(evs), len(fake.Instances()))
	}
	t.Logf("told by the adaptor: %s", ev.Message)
}
