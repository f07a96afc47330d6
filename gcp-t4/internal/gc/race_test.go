package gc

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

func cloudConfigFor(ns, pod string) cloudinit.CloudConfigGenerator {
	return &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: `{"pod-namespace":"` + ns + `","pod-name":"` + pod + `"}`}}}
}

func newProvider(t testing.TB, fake *gcefake.Server, cluster string) *gcpt4.Provider {
	t.Helper()
	cfg := gcpt4.Config{ProjectID: fake.Project(), Zone: "us-central1-a", ImageName: "podvm-t4", Network: "default", Subnetwork: "default",
		DiskType: "pd-balanced", RootVolumeSize: 50, ProvisioningModel: setting.ProvisioningStandard, ClusterID: cluster, NodeName: "node-1"}
	p, err := gcpt4.NewProvider(context.Background(), cfg, log.New(io.Discard, "", 0), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Teardown() })
	return p
}

// sandbox states in the simulation.
const (
	sbCreating = iota // the insert was accepted; CAA has not recorded it
	sbOwned           // CAA recorded it in a PeerPod: the pod runs on it
	sbDead            // stopped (its VM deleted, or leaked by a failed delete) or crashed
)

type simSandbox struct {
	id      string
	pod     types.UID
	vmID    string
	state   int
	created time.Time
}

// sim is CAA and the kubelet on one node, driven step by step from a
// seeded random source, so that every run is the same run.
type sim struct {
	t       *testing.T
	rng     *rand.Rand
	clk     *gcefake.Clock // the one time source of GCE's fake, the simulated cluster and the reaper
	caa     *gcpt4.Provider
	cluster *memCluster
	sbs     []*simSandbox
	nextUID int
	leaks   int
	crashes int
}

func (s *sim) live() map[string]bool {
	out := map[string]bool{}
	for _, sb := range s.sbs {
		if sb.state != sbDead {
			out[sb.vmID] = true
		}
	}
	return out
}

func (s *sim) sandboxesOf(uid types.UID, states ...int) []*simSandbox {
	var out []*simSandbox
	for _, sb := range s.sbs {
		for _, st := range states {
			if sb.pod == uid && sb.state == st {
				out = append(out, sb)
			}
		}
	}
	return out
}

func (s *sim) pods() []Pod {
	var out []Pod
	for _, p := range s.cluster.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// newSandbox is RunPodSandbox + CreateVM + StartVM up to the insert.
func (s *sim) newSandbox(p Pod) {
	s.clk.Advance(time.Second)
	sid := fmt.Sprintf("%016x%016x", s.rng.Uint64(), s.rng.Uint64())
	inst, err := s.caa.CreateInstance(context.Background(), p.Name, sid, cloudConfigFor(p.Namespace, p.Name), provider.InstanceTypeSpec{GPUs: 1})
	if err != nil {
		s.t.Fatalf("create: %v", err)
	}
	s.sbs = append(s.sbs, &simSandbox{id: sid, pod: p.UID, vmID: inst.ID, state: sbCreating, created: s.clk.Now()})
}

// own is CAA recording the VM after CreateInstance returned (OwnPeerPod).
func (s *sim) own(sb *simSandbox) {
	p := s.cluster.pods[sb.pod]
	uid := types.UID(fmt.Sprintf("pp-%d", s.nextUID))
	s.nextUID++
	s.cluster.peerPods[uid] = &peerpod.PeerPod{Namespace: p.Namespace, Name: p.Name + "-resource-" + string(uid), UID: uid, OwnerName: p.Name, OwnerUID: p.UID,
		InstanceID: sb.vmID, CloudProvider: gcpt4.ProviderName, Created: s.clk.Now(), Finalized: true}
	sb.state = sbOwned
}

// stop is StopVM: the VM is deleted and the PeerPod released, or, when
// the delete fails (CAA down, an API error), the VM leaks.
func (s *sim) stop(sb *simSandbox) {
	if sb.state == sbDead {
		return
	}
	sb.state = sbDead
	if s.rng.IntN(3) == 0 {
		s.leaks++
		return
	}
	if err := s.caa.DeleteInstance(context.Background(), sb.vmID); err != nil {
		s.t.Fatalf("delete: %v", err)
	}
	for _, pp := range s.cluster.peerPods {
		if pp.InstanceID == sb.vmID {
			pp.Finalized = false
		}
	}
}

// step makes one random change, as the cluster changes while the reaper
// runs: pods come, finish and go; sandboxes are created, recorded,
// crashed mid-create and retried; the clock moves.
func (s *sim) step() {
	pods := s.pods()
	switch op := s.rng.IntN(8); {
	case op == 0 || len(pods) < 2:
		ns := []string{"ml", "research"}[s.rng.IntN(2)]
		name := []string{"train-0", "train-1", "job-0"}[s.rng.IntN(3)]
		for _, p := range pods {
			if p.Namespace == ns && p.Name == name {
				return
			}
		}
		s.clk.Advance(time.Second)
		p := Pod{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("pod-%d", s.nextUID)), Phase: corev1.PodRunning, Created: s.clk.Now()}
		s.nextUID++
		s.cluster.pods[p.UID] = p
		s.newSandbox(p)
	case op == 1:
		// CAA records a create that returned.
		for _, sb := range s.sbs {
			if sb.state == sbCreating {
				s.own(sb)
				return
			}
		}
	case op == 2:
		// CAA dies mid-create or after recording; the kubelet retries.
		p := pods[s.rng.IntN(len(pods))]
		if p.finished() {
			return
		}
		for _, sb := range s.sandboxesOf(p.UID, sbCreating, sbOwned) {
			sb.state = sbDead
			s.crashes++
		}
		s.newSandbox(p)
	case op == 3:
		// A pod finishes (a Job): the kubelet stops its sandbox.
		p := pods[s.rng.IntN(len(pods))]
		for _, sb := range s.sandboxesOf(p.UID, sbCreating, sbOwned) {
			s.stop(sb)
		}
		p.Phase = corev1.PodSucceeded
		s.cluster.pods[p.UID] = p
	case op == 4:
		// A pod is deleted: sandbox stopped, pod gone, its PeerPods
		// deleted by the garbage collector (held by a finalizer).
		p := pods[s.rng.IntN(len(pods))]
		for _, sb := range s.sandboxesOf(p.UID, sbCreating, sbOwned) {
			s.stop(sb)
		}
		delete(s.cluster.pods, p.UID)
		for uid, pp := range s.cluster.peerPods {
			if pp.OwnerUID == p.UID {
				if pp.Finalized {
					pp.Deleting = true
				} else {
					delete(s.cluster.peerPods, uid)
				}
			}
		}
	default:
		s.advance(time.Duration(s.rng.IntN(240)) * time.Second)
	}
}

// advance moves the clock, first ending every create that would outlive
// the provider's bound: it returns (and is recorded) or its adaptor dies.
func (s *sim) advance(d time.Duration) {
	for _, sb := range s.sbs {
		if sb.state == sbCreating && s.clk.Now().Add(d).Sub(sb.created) >= gcpt4.LongestCall {
			s.own(sb)
		}
	}
	s.clk.Advance(d)
}

// interleaved wraps the reaper's reads and deletes: before each the
// cluster changes a few times, and each delete is checked against the
// simulation's truth at that moment.
type interleaved struct {
	s           *sim
	vms         VMs
	liveDeleted int
	deleted     int
}

func (w *interleaved) churn() {
	for n := w.s.rng.IntN(4); n > 0; n-- {
		w.s.step()
	}
}

func (w *interleaved) ListManagedDetail(ctx context.Context) (managed.List, error) {
	w.churn()
	return w.vms.ListManagedDetail(ctx)
}

func (w *interleaved) DeleteInstance(ctx context.Context, id string) error {
	w.churn()
	if w.s.live()[id] {
		w.liveDeleted++
		w.s.t.Errorf("the reaper deleted %s, whose sandbox is live", id)
	}
	w.deleted++
	return w.vms.DeleteInstance(ctx, id)
}

func (w *interleaved) ListPods(ctx context.Context) ([]Pod, error) {
	w.churn()
	return w.s.cluster.ListPods(ctx)
}

func (w *interleaved) ListPeerPods(ctx context.Context) ([]peerpod.PeerPod, error) {
	w.churn()
	return w.s.cluster.ListPeerPods(ctx)
}

func (w *interleaved) ReleasePeerPod(ctx context.Context, ns, name string) error {
	w.churn()
	return w.s.cluster.ReleasePeerPod(ctx, ns, name)
}

// TestReaperRacesSandboxes runs the reaper while sandboxes are created,
// recorded, crashed, retried, stopped and leaked between each of its
// reads and before each of its deletes. Each seed is one deterministic
// schedule. No VM whose sandbox is live may be deleted; once the churn
// stops and the clock passes the grace period and the longest create,
// every VM left must be a live sandbox's.
func TestReaperRacesSandboxes(t *testing.T) {
	const seeds, passes = 40, 25
	var liveDeleted, deleted, orphansLeft, leaks, crashes int
	for seed := uint64(1); seed <= seeds; seed++ {
		clk := gcefake.NewClock(t0)
		fake := gcefake.New(gcefake.WithClock(clk.Now))
		roomy(fake)
		s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, 17)), clk: clk, caa: newProvider(t, fake, clusterA), cluster: newMemCluster()}
		w := &interleaved{s: s, vms: newProvider(t, fake, clusterA)}
		c := &Collector{VMs: w, Cluster: w, Policy: DefaultPolicy(), Delete: true, Now: clk.Now, Log: quiet()}
		for i := 0; i < passes; i++ {
			if _, err := c.Run(context.Background()); err != nil {
				t.Fatalf("seed %d pass %d: %v", seed, i, err)
			}
		}
		// Quiesce: every create returns, time passes, the reaper runs
		// undisturbed.
		s.advance(gcpt4.LongestCall + DefaultPolicy().Grace + time.Minute)
		settle := &Collector{VMs: w.vms, Cluster: s.cluster, Policy: DefaultPolicy(), Delete: true, Now: clk.Now, Log: quiet()}
		for i := 0; i < 2; i++ {
			if _, err := settle.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		live := s.live()
		for _, vm := range fake.Instances() {
			id := gcpt4.InstanceID("us-central1-a", vm.GetName())
			if !live[id] {
				orphansLeft++
				t.Errorf("seed %d: orphan %s left after the reaper settled", seed, id)
			}
		}
		for id := range live {
			if !hasInstance(fake, id) {
				t.Errorf("seed %d: live VM %s is gone", seed, id)
				liveDeleted++
			}
		}
		liveDeleted += w.liveDeleted
		deleted += w.deleted
		leaks += s.leaks
		crashes += s.crashes
		fake.Close()
	}
	t.Logf("reaper race: %d schedules x %d passes: %d sandboxes crashed, %d VMs leaked by failed stops; the reaper deleted %d; live VMs deleted %d; orphans left %d",
		seeds, passes, crashes, leaks, deleted, liveDeleted, orphansLeft)
	// The schedules must have made work for the reaper, or the test
	// proves nothing.
	if crashes == 0 || leaks == 0 || deleted == 0 {
		t.Fatalf("the schedules made no crashes (%d), leaks (%d) or deletions (%d)", crashes, leaks, deleted)
	}
}

// roomy lifts the fake project's quotas: the schedules leak on purpose.
func roomy(fake *gcefake.Server) {
	for _, m := range []string{"CPUS", "N1_CPUS", "NVIDIA_T4_GPUS", "INSTANCES", "SSD_TOTAL_GB", "DISKS_TOTAL_GB", "IN_USE_ADDRESSES"} {
		fake.SetQuota("us-central1", m, 1e6)
	}
	fake.SetQuota("", "GPUS_ALL_REGIONS", 1e6)
}

func hasInstance(fake *gcefake.Server, id string) bool {
	for _, vm := range fake.Instances() {
		if id == gcpt4.InstanceID("us-central1-a", vm.GetName()) {
			return true
		}
	}
	return false
}
