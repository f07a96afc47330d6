package gc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

func withStatus(vm managed.VM, status string) managed.VM {
	vm.Status = status
	return vm
}

// TestDecideStoppedVMs: a TERMINATED VM is deleted at once whatever its
// age; when its live pod still used it, it is lost and its pod is named.
// A VM still STOPPING or SUSPENDED is judged as a running one.
func TestDecideStoppedVMs(t *testing.T) {
	now := t0.Add(2 * time.Hour)
	pol := DefaultPolicy()
	live := podAt("ml", "train-0", "uid-train", corev1.PodRunning, t0.Add(-time.Minute))
	young := now.Add(-time.Minute) // inside the grace period and the longest create
	owned := vmAt("ml", "train-0", "1111aaaa", young)
	for _, c := range []struct {
		name    string
		vm      managed.VM
		pods    []Pod
		pps     []peerpod.PeerPod
		want    Verdict
		lost    bool
		podUID  string
		release int // finalized PeerPods, released once the VM is gone
	}{
		{name: "in use by its PeerPod's live pod, TERMINATED: lost, deleted though young",
			vm: withStatus(owned, "TERMINATED"), pods: []Pod{live}, pps: []peerpod.PeerPod{ppFor(live, owned, young)},
			want: Orphan, lost: true, podUID: "uid-train", release: 1},
		{name: "no PeerPod yet, its create may still run, TERMINATED: lost",
			vm: withStatus(vmAt("ml", "train-0", "2222bbbb", young), "TERMINATED"), pods: []Pod{live},
			want: Orphan, lost: true, podUID: "uid-train"},
		{name: "unowned (no PeerPod after the longest create), TERMINATED: lost",
			vm: withStatus(vmAt("ml", "train-0", "3333cccc", t0), "TERMINATED"), pods: []Pod{live},
			want: Orphan, lost: true, podUID: "uid-train"},
		{name: "its pod gone, TERMINATED and young: an orphan without grace, not lost",
			vm:   withStatus(vmAt("ml", "gone-0", "4444dddd", young), "TERMINATED"),
			want: Orphan},
		{name: "no cluster label, TERMINATED: never deleted",
			vm: func() managed.VM {
				v := withStatus(vmAt("", "old-0", "5555eeee", t0), "TERMINATED")
				v.Cluster = ""
				return v
			}(),
			want: Unidentified},
		{name: "STOPPING: judged as running (TERMINATED or gone by the next pass)",
			vm: withStatus(owned, "STOPPING"), pods: []Pod{live}, pps: []peerpod.PeerPod{ppFor(live, owned, young)},
			want: InUse, release: 1},
		{name: "SUSPENDED: judged as running (a resume restores the sandbox)",
			vm: withStatus(owned, "SUSPENDED"), pods: []Pod{live}, pps: []peerpod.PeerPod{ppFor(live, owned, young)},
			want: InUse, release: 1},
		{name: "its pod gone, RUNNING and young: waits for the grace period, as before",
			vm:   vmAt("ml", "gone-0", "4444dddd", young),
			want: TooYoung},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(now, pol, []managed.VM{c.vm}, c.pods, c.pps, true)
			if len(got) != 1 {
				t.Fatalf("%d findings", len(got))
			}
			f := got[0]
			if f.Verdict != c.want || f.Lost != c.lost || len(f.Release) != c.release {
				t.Fatalf("verdict %s, lost %v, %d to release (%s); want %s, %v, %d", f.Verdict, f.Lost, len(f.Release), f.Reason, c.want, c.lost, c.release)
			}
			if c.lost && (f.Pod == nil || string(f.Pod.UID) != c.podUID || !strings.Contains(f.Reason, "TERMINATED while pod ml/train-0 still used it")) {
				t.Errorf("lost VM's pod %+v, reason %q", f.Pod, f.Reason)
			}
			if !c.lost && f.Verdict != Unowned && f.Pod != nil {
				t.Errorf("a %s VM names pod %+v", f.Verdict, f.Pod)
			}
		})
	}
}

// TestVanished: a live pod's newest PeerPod naming a VM GCE no longer
// lists is a gone podVM; nothing else is.
func TestVanished(t *testing.T) {
	listedAt := t0.Add(time.Hour)
	pol := DefaultPolicy()
	live := podAt("ml", "a", "uid-a", corev1.PodRunning, t0)
	vmA := vmAt("ml", "a", "aaaa0000", t0)
	ppA := ppFor(live, vmA, t0.Add(time.Minute))
	deleting := podAt("ml", "b", "uid-b", corev1.PodRunning, t0)
	deleting.Deleting = true
	finished := podAt("ml", "c", "uid-c", corev1.PodSucceeded, t0)
	fresh := podAt("ml", "d", "uid-d", corev1.PodRunning, t0)
	retried := podAt("ml", "e", "uid-e", corev1.PodRunning, t0)
	listedVM := vmAt("ml", "e", "eeee1111", t0.Add(30*time.Minute))
	handDeleted := ppFor(podAt("ml", "f", "uid-f", corev1.PodRunning, t0), vmAt("ml", "f", "ffff0000", t0), t0.Add(time.Minute))
	handDeleted.Deleting = true
	pps := []peerpod.PeerPod{
		ppA,
		ppFor(deleting, vmAt("ml", "b", "bbbb0000", t0), t0.Add(time.Minute)),
		ppFor(finished, vmAt("ml", "c", "cccc0000", t0), t0.Add(time.Minute)),
		// Recorded moments before the list: its VM may be newer than it.
		ppFor(fresh, vmAt("ml", "d", "dddd0000", t0), listedAt.Add(-pol.Skew/2)),
		// An old sandbox's VM is gone, its newer sandbox's VM is listed.
		ppFor(retried, vmAt("ml", "e", "eeee0000", t0), t0.Add(time.Minute)),
		ppFor(retried, listedVM, t0.Add(31*time.Minute)),
		handDeleted,
		// The PeerPod of a pod that no longer exists.
		ppFor(podAt("ml", "g", "uid-g", corev1.PodRunning, t0), vmAt("ml", "g", "9999aaaa", t0), t0.Add(time.Minute)),
	}
	pods := []Pod{live, deleting, finished, fresh, retried, podAt("ml", "f", "uid-f", corev1.PodRunning, t0)}
	got := Vanished(listedAt, pol, []managed.VM{listedVM}, pods, pps)
	if len(got) != 1 || got[0].ID != vmA.ID || got[0].Pod.UID != "uid-a" || got[0].PeerPod != "ml/"+ppA.Name {
		t.Fatalf("gone %+v, want only pod a's VM", got)
	}
	if got := Vanished(listedAt, pol, []managed.VM{listedVM, vmA}, pods, pps); len(got) != 0 {
		t.Fatalf("a listed VM is gone: %+v", got)
	}
}

// interruptingVMs is a provider that says what ended each VM.
type interruptingVMs struct {
	recordingVMs
	causes  map[string]podevent.Interruption
	lookups int
}

func (v *interruptingVMs) Interruption(_ context.Context, id string) (podevent.Interruption, error) {
	v.lookups++
	return v.causes[id], nil
}

func (v *interruptingVMs) DeleteInstance(ctx context.Context, id string) error {
	var kept []managed.VM
	for _, vm := range v.vms {
		if vm.ID != id {
			kept = append(kept, vm)
		}
	}
	v.vms = kept
	return v.recordingVMs.DeleteInstance(ctx, id)
}

// TestLostPodVMIsDeletedAndExplained: one pass deletes a TERMINATED VM its
// live pod used, says what stopped it and releases its PeerPod; the next
// passes find it gone (the PeerPod still names it) without asking GCE
// again; the metric counts it once, by cause; a sibling's VM stays.
func TestLostPodVMIsDeletedAndExplained(t *testing.T) {
	m := newMemCluster()
	victim := podAt("ml", "victim", "uid-v", corev1.PodRunning, t0)
	sibling := podAt("ml", "sibling", "uid-s", corev1.PodRunning, t0)
	vmV, vmS := withStatus(vmAt("ml", "victim", "aaaa0000", t0), "TERMINATED"), withStatus(vmAt("ml", "sibling", "bbbb0000", t0), "RUNNING")
	for _, x := range []struct {
		pod Pod
		vm  managed.VM
	}{{victim, vmV}, {sibling, vmS}} {
		m.pods[x.pod.UID] = x.pod
		pp := ppFor(x.pod, x.vm, t0.Add(time.Minute))
		m.peerPods[pp.UID] = &pp
	}
	at := t0.Add(40 * time.Minute)
	vms := &interruptingVMs{recordingVMs: recordingVMs{vms: []managed.VM{vmV, vmS}},
		causes: map[string]podevent.Interruption{vmV.ID: {Cause: podevent.CauseHostMaintenance, Operation: "compute.instances.terminateOnHostMaintenance", By: "system", At: at}}}
	metrics := NewMetrics()
	c := &Collector{VMs: vms, Cluster: m, Policy: DefaultPolicy(), Delete: true, Now: func() time.Time { return t0.Add(time.Hour) }, Log: quiet(),
		Observer: Report{Metrics: metrics, Now: func() time.Time { return t0.Add(time.Hour) }}}
	p, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(vms.deleted) != 1 || vms.deleted[0] != vmV.ID || m.released != 1 {
		t.Fatalf("deleted %v, released %d; want the victim's VM and its PeerPod", vms.deleted, m.released)
	}
	var f Finding
	for _, x := range p.Findings {
		if x.VM.ID == vmV.ID {
			f = x
		}
	}
	if f.Verdict != Deleted || !f.Lost || f.Interruption == nil || f.Interruption.Cause != podevent.CauseHostMaintenance ||
		!strings.Contains(f.Reason, "host maintenance stopped it at "+at.Format(time.RFC3339)) {
		t.Fatalf("victim's finding %+v", f)
	}
	for i := 0; i < 2; i++ {
		p, err = c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Gone) != 1 || p.Gone[0].ID != vmV.ID || p.Gone[0].Interruption == nil || p.Gone[0].Interruption.Cause != podevent.CauseHostMaintenance {
			t.Fatalf("pass %d: gone %+v, want the victim's VM, with its cause", i+2, p.Gone)
		}
	}
	if vms.lookups != 1 || len(vms.deleted) != 1 {
		t.Errorf("%d lookups, %d deletes; want 1 each", vms.lookups, len(vms.deleted))
	}
	if got := testutil.ToFloat64(metrics.lost.WithLabelValues(podevent.CauseHostMaintenance)); got != 1 {
		t.Errorf("lost{host-maintenance} = %v, want 1", got)
	}
}

// honourNameSelector makes the fake clientset's Event lists honour a
// metadata.name field selector, as the API server does.
func honourNameSelector(cs *kubefake.Clientset) {
	cs.PrependReactor("list", "events", func(action k8stesting.Action) (bool, runtime.Object, error) {
		la := action.(k8stesting.ListAction)
		sel := la.GetListRestrictions().Fields
		if sel == nil || sel.Empty() {
			return false, nil, nil
		}
		obj, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("events"), corev1.SchemeGroupVersion.WithKind("Event"), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		out := &corev1.EventList{}
		for _, ev := range obj.(*corev1.EventList).Items {
			if sel.Matches(fields.Set{"metadata.name": ev.Name}) {
				out.Items = append(out.Items, ev)
			}
		}
		return true, out, nil
	})
}

// TestLostIsToldOnItsPodOnce: the pod of a lost VM gets one PodVMLost
// Event in the start-up schema, however many passes and reapers see it; a
// gone VM's pod too, unless the provider reported its start-up failed
// (the adaptor deleted it itself).
func TestLostIsToldOnItsPodOnce(t *testing.T) {
	cs := kubefake.NewClientset()
	honourNameSelector(cs)
	const caaNS = "confidential-containers-system"
	if err := timelinetest.InstallKey(context.Background(), cs, caaNS); err != nil {
		t.Fatal(err)
	}
	events := func() *Events {
		return &Events{Client: cs, Now: func() time.Time { return t0.Add(time.Hour) }, Log: quiet(), Key: &startupevents.KeySource{Client: cs, Namespace: caaNS},
			Pod: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "caa-gcp-t4-reaper-x", Namespace: caaNS}}
	}
	victim := podAt("ml", "victim", "uid-v", corev1.PodRunning, t0)
	failedPod := podAt("ml", "failed", "uid-f", corev1.PodRunning, t0)
	forger := podAt("ml", "forger", "uid-x", corev1.PodRunning, t0)
	vm := vmAt("ml", "victim", "aaaa0000", t0)
	gone := vmAt("ml", "failed", "bbbb0000", t0)
	forgerVM := vmAt("ml", "forger", "cccc0000", t0)
	at := t0.Add(40 * time.Minute)
	preempted := &podevent.Interruption{Cause: podevent.CausePreempted, Operation: "compute.instances.preempted", By: "system", At: at}
	lostPass := Pass{Findings: []Finding{{VM: vm, Verdict: Deleted, Lost: true, Pod: &victim, Interruption: preempted, Reason: "lost"}}}
	gonePass := Pass{Gone: []GoneVM{{ID: vm.ID, Pod: victim, Interruption: preempted}, {ID: gone.ID, Pod: failedPod}, {ID: forgerVM.ID, Pod: forger}}}
	// The provider told failedPod its podVM's start-up failed (signed); a
	// tenant wrote the same Event on forger's pod, to silence its loss.
	for _, p := range []struct {
		pod, vm string
		signed  bool
	}{{"failed", gone.Name, true}, {"forger", forgerVM.Name, false}} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ml",
			Name: podevent.Name(p.pod, p.vm, podevent.PhaseFailed), Labels: map[string]string{podevent.PhaseLabel: podevent.PhaseFailed}}}
		if p.signed {
			startupevents.Sign(timelinetest.Key(), ev)
		}
		if _, err := cs.CoreV1().Events("ml").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first := events()
	first.Emit(context.Background(), lostPass)
	first.Emit(context.Background(), gonePass)
	events().Emit(context.Background(), gonePass) // a restarted reaper
	list, err := cs.CoreV1().Events("ml").List(context.Background(), metav1.ListOptions{LabelSelector: podevent.PhaseLabel + "=" + podevent.PhaseLost})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("%d lost Events, want 2 (the victim's and the forger's)", len(list.Items))
	}
	for _, ev := range list.Items {
		if !eventsig.Verify(timelinetest.Key(), startupevents.FieldsOf(&ev)) {
			t.Errorf("lost Event %s is not signed", ev.Name)
		}
	}
	ev := list.Items[0]
	if ev.InvolvedObject.Name != "victim" {
		ev = list.Items[1]
	}
	if ev.Name != podevent.Name("victim", vm.Name, podevent.PhaseLost) || ev.Reason != podevent.ReasonLost || ev.Type != corev1.EventTypeWarning ||
		ev.InvolvedObject.UID != "uid-v" || ev.Labels[podevent.PodVMLabel] != vm.Name ||
		ev.Annotations[podevent.CauseAnnotation] != podevent.CausePreempted || ev.Annotations[podevent.ZoneAnnotation] != "us-central1-a" ||
		ev.Annotations[podevent.AtAnnotation] != at.Format(time.RFC3339Nano) ||
		!strings.Contains(ev.Message, "GCE preempted it") || !strings.Contains(ev.Message, "the reaper deleted it") {
		t.Errorf("lost Event %+v", ev)
	}
	// A gone VM nobody told of: the message says it no longer exists.
	cs2 := kubefake.NewClientset()
	honourNameSelector(cs2)
	e := &Events{Client: cs2, Now: func() time.Time { return t0 }, Log: quiet()}
	e.Emit(context.Background(), Pass{Gone: []GoneVM{{ID: vm.ID, Pod: victim}}})
	list, err = cs2.CoreV1().Events("ml").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || !strings.Contains(list.Items[0].Message, "no longer exists on GCE") ||
		list.Items[0].Annotations[podevent.CauseAnnotation] != podevent.CauseUnknown {
		t.Fatalf("gone Event: %v %+v", err, list)
	}
}
