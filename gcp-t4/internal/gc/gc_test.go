package gc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
)

const clusterA = "3f1c9d2e-6b7a-4e21-9c55-0a1b2c3d4e5f"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func vmAt(ns, pod, sandbox string, created time.Time) managed.VM {
	name := fmt.Sprintf("podvm-%s-%.8s", pod, sandbox)
	return managed.VM{ID: gcpt4.InstanceID("us-central1-a", name), Name: name, Zone: "us-central1-a",
		Pod: pod, Namespace: ns, Sandbox: sandbox, Cluster: clusterA, Node: "node-1", Created: created}
}

func podAt(ns, name, uid string, phase corev1.PodPhase, created time.Time) Pod {
	return Pod{Namespace: ns, Name: name, UID: types.UID(uid), Phase: phase, Created: created}
}

func ppFor(p Pod, vm managed.VM, created time.Time) peerpod.PeerPod {
	return peerpod.PeerPod{Namespace: p.Namespace, Name: p.Name + "-resource-" + vm.Sandbox[:5], UID: types.UID("pp-" + vm.Name),
		OwnerName: p.Name, OwnerUID: p.UID, InstanceID: vm.ID, CloudProvider: gcpt4.ProviderName, Created: created, Finalized: true}
}

// TestDecide covers each rule, each with the case the old name-based gc
// got wrong where there is one.
func TestDecide(t *testing.T) {
	now := t0.Add(2 * time.Hour)
	pol := DefaultPolicy()
	live := podAt("ml", "train-0", "uid-train", corev1.PodRunning, t0.Add(-time.Minute))
	vmLive := vmAt("ml", "train-0", "2222aaaa", t0.Add(10*time.Minute))

	type tc struct {
		name    string
		vms     []managed.VM
		pods    []Pod
		pps     []peerpod.PeerPod
		noCRD   bool
		want    map[string]Verdict // by sandbox prefix
		release int
		// unownedPod is the UID of the pod an unowned VM's Event goes to.
		unownedPod types.UID
	}
	crashVM := vmAt("ml", "train-0", "1111bbbb", t0)
	otherNS := podAt("research", "train-0", "uid-research", corev1.PodRunning, t0.Add(-time.Hour))
	otherNSVM := vmAt("research", "train-0", "3333cccc", t0)
	job := podAt("batch", "job-0", "uid-job", corev1.PodSucceeded, t0.Add(-time.Minute))
	jobVM := vmAt("batch", "job-0", "4444dddd", t0)
	gonePP := ppFor(podAt("ml", "gone-0", "uid-gone", corev1.PodRunning, t0), vmAt("ml", "gone-0", "5555eeee", t0), t0)
	gonePP.Deleting = true
	// kubectl delete peerpod while its pod runs: the finalizer holds it.
	handDeleted := ppFor(live, vmLive, t0.Add(11*time.Minute))
	handDeleted.Deleting = true
	cases := []tc{
		{name: "live pod, its PeerPod names the VM",
			vms: []managed.VM{vmLive}, pods: []Pod{live}, pps: []peerpod.PeerPod{ppFor(live, vmLive, t0.Add(11*time.Minute))},
			want: map[string]Verdict{"2222aaaa": InUse}},
		{name: "crash mid-create: 1111 accepted, CAA died, kubelet retried as 2222",
			vms: []managed.VM{crashVM, vmLive}, pods: []Pod{live}, pps: []peerpod.PeerPod{ppFor(live, vmLive, t0.Add(11*time.Minute))},
			want: map[string]Verdict{"1111bbbb": Orphan, "2222aaaa": InUse}, release: 0},
		{name: "crash after CAA recorded 1111: the older PeerPod of the same pod",
			vms: []managed.VM{crashVM, vmLive}, pods: []Pod{live},
			pps:  []peerpod.PeerPod{ppFor(live, crashVM, t0.Add(time.Minute)), ppFor(live, vmLive, t0.Add(11*time.Minute))},
			want: map[string]Verdict{"1111bbbb": Orphan, "2222aaaa": InUse}, release: 1},
		{name: "same pod name in another namespace does not keep a leaked VM",
			vms: []managed.VM{vmAt("ml", "train-0", "6666ffff", t0), otherNSVM}, pods: []Pod{otherNS},
			pps:  []peerpod.PeerPod{ppFor(otherNS, otherNSVM, t0.Add(time.Minute))},
			want: map[string]Verdict{"6666ffff": Orphan, "3333cccc": InUse}},
		{name: "a Succeeded Job pod keeps nothing alive, recorded or not",
			vms: []managed.VM{jobVM, vmAt("batch", "job-0", "7777aaaa", t0)}, pods: []Pod{job},
			pps:  []peerpod.PeerPod{ppFor(job, jobVM, t0.Add(time.Minute))},
			want: map[string]Verdict{"4444dddd": Orphan, "7777aaaa": Orphan}, release: 1},
		{name: "a StatefulSet pod recreated after the VM does not keep it",
			vms: []managed.VM{vmAt("ml", "llm-0", "8888bbbb", t0)}, pods: []Pod{podAt("ml", "llm-0", "uid-new", corev1.PodRunning, t0.Add(time.Hour))},
			want: map[string]Verdict{"8888bbbb": Orphan}},
		{name: "the PeerPod was deleted with its pod: released once past the grace period",
			vms: []managed.VM{vmAt("ml", "gone-0", "5555eeee", t0)}, pps: []peerpod.PeerPod{gonePP},
			want: map[string]Verdict{"5555eeee": Orphan}, release: 1},
		{name: "the PeerPod was deleted with its pod moments after the VM: waits for the grace period",
			vms: []managed.VM{vmAt("ml", "gone-0", "5555eeee", now.Add(-time.Second))}, pps: []peerpod.PeerPod{gonePP},
			want: map[string]Verdict{"5555eeee": TooYoung}},
		{name: "a PeerPod deleted by hand while its pod and sandbox live: in use",
			vms: []managed.VM{vmLive}, pods: []Pod{live}, pps: []peerpod.PeerPod{handDeleted},
			want: map[string]Verdict{"2222aaaa": InUse}},
		{name: "a PeerPod deleted by hand, then the pod's sandbox retried: the old VM is an orphan",
			vms: []managed.VM{vmLive, vmAt("ml", "train-0", "cccc3333", t0.Add(30*time.Minute))}, pods: []Pod{live},
			pps:  []peerpod.PeerPod{handDeleted, ppFor(live, vmAt("ml", "train-0", "cccc3333", t0.Add(30*time.Minute)), t0.Add(31*time.Minute))},
			want: map[string]Verdict{"2222aaaa": Orphan, "cccc3333": InUse}, release: 1},
		{name: "no PeerPod yet, within the longest create: creating",
			vms: []managed.VM{vmAt("ml", "train-0", "9999cccc", now.Add(-pol.Creating+time.Minute))}, pods: []Pod{live},
			want: map[string]Verdict{"9999cccc": Creating}},
		{name: "no PeerPod after the longest create, live pod, nothing newer: unowned, kept",
			vms: []managed.VM{vmAt("ml", "train-0", "9999cccc", t0)}, pods: []Pod{live},
			want: map[string]Verdict{"9999cccc": Unowned}, unownedPod: "uid-train"},
		{name: "without the CRD a live pod's VM is kept; a gone pod's collected",
			vms: []managed.VM{vmAt("ml", "train-0", "9999cccc", t0), vmAt("ml", "gone-1", "aaaa1111", t0)}, pods: []Pod{live}, noCRD: true,
			want: map[string]Verdict{"9999cccc": Unowned, "aaaa1111": Orphan}},
		{name: "an orphan younger than the grace period waits",
			vms:  []managed.VM{vmAt("ml", "gone-1", "aaaa1111", now.Add(-pol.Grace+time.Minute))},
			want: map[string]Verdict{"aaaa1111": TooYoung}},
		{name: "a VM without a cluster label is never deleted",
			vms:  []managed.VM{func() managed.VM { v := vmAt("", "old-0", "bbbb2222", t0); v.Cluster = ""; return v }()},
			want: map[string]Verdict{"bbbb2222": Unidentified}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(now, pol, c.vms, c.pods, c.pps, !c.noCRD)
			release := 0
			for _, f := range got {
				if w := c.want[f.VM.Sandbox]; f.Verdict != w {
					t.Errorf("%s: %s (%s), want %s", f.VM.Name, f.Verdict, f.Reason, w)
				}
				if f.Verdict == Orphan {
					release += len(f.Release)
				}
				if f.Verdict == Unowned && c.unownedPod != "" && (f.Pod == nil || f.Pod.UID != c.unownedPod) {
					t.Errorf("%s: unowned VM's pod %+v, want %s", f.VM.Name, f.Pod, c.unownedPod)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("%d findings for %d VMs", len(got), len(c.want))
			}
			if release != c.release {
				t.Errorf("%d PeerPods to release, want %d", release, c.release)
			}
		})
	}
}

// memCluster is the cluster as the reaper sees it, in memory, for the
// tests that need to interleave changes with the reaper's reads.
type memCluster struct {
	pods     map[types.UID]Pod
	peerPods map[types.UID]*peerpod.PeerPod
	noCRD    bool
	failPods bool
	released int
}

func newMemCluster() *memCluster {
	return &memCluster{pods: map[types.UID]Pod{}, peerPods: map[types.UID]*peerpod.PeerPod{}}
}

func (m *memCluster) ListPods(context.Context) ([]Pod, error) {
	if m.failPods {
		return nil, io.ErrUnexpectedEOF
	}
	var out []Pod
	for _, p := range m.pods {
		out = append(out, p)
	}
	return out, nil
}

func (m *memCluster) ListPeerPods(context.Context) ([]peerpod.PeerPod, error) {
	if m.noCRD {
		return nil, fmt.Errorf("listing: %w", peerpod.ErrNoCRD)
	}
	var out []peerpod.PeerPod
	for _, pp := range m.peerPods {
		out = append(out, *pp)
	}
	return out, nil
}

func (m *memCluster) ReleasePeerPod(_ context.Context, ns, name string) error {
	for uid, pp := range m.peerPods {
		if pp.Namespace == ns && pp.Name == name {
			pp.Finalized = false
			m.released++
			if pp.Deleting {
				delete(m.peerPods, uid)
			}
		}
	}
	return nil
}

type recordingVMs struct {
	vms     []managed.VM
	deleted []string
}

func (r *recordingVMs) ListManagedDetail(context.Context) (managed.List, error) {
	return managed.List{VMs: r.vms}, nil
}

func (r *recordingVMs) DeleteInstance(_ context.Context, id string) error {
	r.deleted = append(r.deleted, id)
	return nil
}

func TestNothingDeletedWhenAListFails(t *testing.T) {
	vms := &recordingVMs{vms: []managed.VM{vmAt("ml", "gone", "cccc3333", t0)}}
	m := newMemCluster()
	m.failPods = true
	c := &Collector{VMs: vms, Cluster: m, Policy: DefaultPolicy(), Delete: true, Now: func() time.Time { return t0.Add(time.Hour) }, Log: quiet()}
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing deleted") {
		t.Fatalf("want an error saying nothing was deleted, got %v", err)
	}
	if len(vms.deleted) != 0 {
		t.Fatalf("deleted %v without knowing the pods", vms.deleted)
	}
}

// TestStrayFinalizersAreReleased: a deleted PeerPod whose VM is already
// gone (or is not this cluster's) must not hold its namespace forever.
func TestStrayFinalizersAreReleased(t *testing.T) {
	m := newMemCluster()
	pp := ppFor(podAt("ml", "gone", "uid-gone", corev1.PodRunning, t0), vmAt("ml", "gone", "dddd4444", t0), t0)
	pp.Deleting = true
	m.peerPods[pp.UID] = &pp
	vms := &recordingVMs{}
	c := &Collector{VMs: vms, Cluster: m, Policy: DefaultPolicy(), Delete: true, Now: func() time.Time { return t0 }, Log: quiet()}
	p, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Released) != 1 || len(m.peerPods) != 0 || len(vms.deleted) != 0 {
		t.Fatalf("released %v, %d PeerPods left, deleted %v: want the stray finalizer released and nothing deleted", p.Released, len(m.peerPods), vms.deleted)
	}
}
