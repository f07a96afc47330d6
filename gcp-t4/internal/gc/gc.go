// Package gc is the podVM reaper: it finds this cluster's podVMs whose
// sandbox no longer exists and deletes them. `gcp-t4 gc` runs one pass
// (listing by default); the reaper Deployment runs it in a loop.
//
// Whether a sandbox lives is read from upstream CAA's own record of it,
// the PeerPod object (internal/peerpod): CAA v0.22.0 creates one, owned by
// the pod's UID, right after CreateInstance returns, and removes its
// finalizer after a successful DeleteInstance. CAA's per-node state cannot
// serve: its sandbox table lives in the adaptor's memory and dies with it,
// and the per-sandbox directory it leaves under PODS_DIR is never removed
// (cloud.go CreateVM makes it; nothing deletes it), so it says nothing
// about whether the sandbox still runs. The rules, per VM:
//
// A VM is deleted only on evidence that its sandbox is gone, one of: its
// pod is gone, its pod has finished, or its pod's sandbox ID changed (the
// pod owns a newer sandbox); and only once the VM is older than the grace
// period. A PeerPod's deletion is not such evidence: `kubectl delete
// peerpod` while the pod runs leaves the sandbox running on the VM.
//
//   - A PeerPod names the VM: the VM is in use while its owner pod (by UID)
//     exists, has not finished (Succeeded/Failed pods have their sandbox
//     stopped by the kubelet) and owns no newer PeerPod (a newer one is a
//     retried sandbox: peerpod-ctrl's isOldPeerPod rule,
//     src/peerpod-ctrl/controllers/peerpod_controller.go). A PeerPod being
//     deleted with its finalizer is judged the same way (its pod is gone
//     when Kubernetes' garbage collector deleted it); its finalizer is
//     removed once the VM is gone.
//   - No PeerPod names the VM (CAA died between insert and return, or has
//     not returned yet): it is an orphan when its pod (namespace and name
//     from the VM's labels) is gone, finished, or younger than the VM, or
//     — once the VM is older than the provider's longest create — when the
//     pod owns a PeerPod made after the VM: the pod's sandbox was retried.
//     Otherwise it is kept: "creating" while the create may still run,
//     "unowned" after (an Event on its pod, a metric, an alert; deleted
//     once its pod ends or its sandbox is retried, docs/reaper.md).
//   - Nothing younger than the grace period is deleted. VMs of other
//     clusters are never listed; VMs without a cluster label are listed
//     and never deleted.
//
// A podVM GCE shows TERMINATED is lost: GCE stopped it (a Spot
// preemption, host maintenance, which GPU VMs cannot live-migrate, a host
// error, its guest powering off) or someone did, and its sandbox can never
// run again: the provider creates podVMs with automaticRestart=false and
// never starts one, and a start would boot a fresh agent without the
// sandbox. So a TERMINATED VM of this cluster is deleted at once, whatever
// its PeerPod and pod say and whatever its age (the grace period guards a
// running VM against lagging reads; nothing a read says can revive a
// stopped one), which frees its boot disk and internal address. When its
// pod still used it, the VM is "lost" (Finding.Lost) and the pod is told
// why, with the cause GCE's operations give (gcpt4.Provider.Interruption).
// A VM still STOPPING is judged as before and is TERMINATED or gone by
// the next pass; a SUSPENDED one is judged as before too, since a resume
// restores its memory, sandbox included (the provider never suspends a
// podVM; whoever did may resume or delete it).
//
// A live pod's newest PeerPod naming a VM GCE no longer lists is a podVM
// gone while in use (deleted out of band, or a Spot VM GCE deleted on
// preemption): nothing is left to delete, and the pod is told why (Pass.Gone).
// Only a PeerPod recorded before the VM list began counts (CAA records it
// after the VM exists), and not while its pod is being deleted (the
// kubelet stopped the sandbox and CAA deleted the VM).
//
// The bound: a VM that turns TERMINATED is listed by the next pass, which
// starts at most one interval (REAPER_INTERVAL) after the pass then in
// progress ended, and deleted in that pass (docs/reaper.md, "A lost
// podVM").
package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// VMs is what the reaper needs of the provider.
type VMs interface {
	ListManagedDetail(ctx context.Context) (managed.List, error)
	DeleteInstance(ctx context.Context, instanceID string) error
}

// Pod is what the reaper needs to know of a pod.
type Pod struct {
	Namespace, Name string
	UID             types.UID
	Phase           corev1.PodPhase
	Created         time.Time
	// Deleting: the pod has a deletion timestamp; the kubelet is stopping
	// its sandbox, and CAA deletes its VM.
	Deleting bool
}

func (p Pod) finished() bool {
	return p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed
}

// Cluster is what the reaper reads and writes in Kubernetes.
type Cluster interface {
	ListPods(ctx context.Context) ([]Pod, error)
	// ListPeerPods fails with peerpod.ErrNoCRD where PeerPods are not
	// served; the reaper then decides by pods alone.
	ListPeerPods(ctx context.Context) ([]peerpod.PeerPod, error)
	ReleasePeerPod(ctx context.Context, namespace, name string) error
}

// Verdict is what the reaper decided for one VM.
type Verdict string

// Verdicts. Only Orphan is acted on.
const (
	InUse        Verdict = "in-use"
	Creating     Verdict = "creating"
	TooYoung     Verdict = "orphan-within-grace"
	Orphan       Verdict = "orphan"
	Unowned      Verdict = "unowned"
	Unidentified Verdict = "unidentified"
	Deleted      Verdict = "deleted"
	DeleteErr    Verdict = "delete-failed"
)

// Finding is one VM and the verdict on it.
type Finding struct {
	VM      managed.VM `json:"vm"`
	Verdict Verdict    `json:"verdict"`
	Reason  string     `json:"reason"`
	// Release are the PeerPods whose finalizer goes once the VM is gone.
	Release []peerpod.PeerPod `json:"-"`
	// Pod is the live pod an unowned VM was made for, or a lost VM's, told
	// by an Event.
	Pod *Pod `json:"-"`
	// Lost: GCE shows the VM TERMINATED while its live pod still used it
	// (its verdict is Orphan: nothing will use it again).
	Lost bool `json:"lost,omitempty"`
	// Interruption is what stopped a lost VM, from GCE's operations; nil
	// when the provider cannot say (VMs without Interrupter).
	Interruption *podevent.Interruption `json:"interruption,omitempty"`
}

// GoneVM is a podVM a live pod's newest PeerPod names that GCE no longer
// lists: deleted out of band, or a Spot VM GCE deleted on preemption.
type GoneVM struct {
	// ID is the VM's instance ID, as the PeerPod records it.
	ID string `json:"id"`
	// PeerPod is the record that names it (namespace/name).
	PeerPod string `json:"peerPod"`
	// Pod is the live pod whose sandbox ran on it.
	Pod Pod `json:"pod"`
	// Interruption is what ended it, when the provider can say.
	Interruption *podevent.Interruption `json:"interruption,omitempty"`
}

// Interrupter is what the reaper asks of a provider that can say what
// ended a VM (gcpt4.Provider); it is optional.
type Interrupter interface {
	Interruption(ctx context.Context, instanceID string) (podevent.Interruption, error)
}

// Policy is how cautious the reaper is.
type Policy struct {
	// Grace protects a VM created moments ago from lagging API reads and
	// bounds the cost of a mistake in either direction.
	Grace time.Duration
	// Skew allows for clock differences between GCE and the API server.
	Skew time.Duration
	// Creating is how long a VM without a PeerPod may still be inside its
	// create: the provider's gcpt4.LongestCall.
	Creating time.Duration
}

// DefaultPolicy is the reaper's default.
func DefaultPolicy() Policy {
	return Policy{Grace: 10 * time.Minute, Skew: 2 * time.Minute, Creating: gcpt4.LongestCall}
}

// Pass is the outcome of one pass.
type Pass struct {
	Findings []Finding
	// Released are PeerPods whose finalizer was removed.
	Released []string
	// OtherClusters counts VMs of other clusters, left alone.
	OtherClusters int
	// PeerPods is false where the PeerPod CRD is not installed.
	PeerPods bool
	// Gone are podVMs a live pod still uses that GCE no longer lists.
	Gone []GoneVM
}

// Count returns how many findings have verdict v.
func (p Pass) Count(v Verdict) int {
	n := 0
	for _, f := range p.Findings {
		if f.Verdict == v {
			n++
		}
	}
	return n
}

// Collector runs passes.
type Collector struct {
	VMs     VMs
	Cluster Cluster
	Policy  Policy
	Delete  bool
	Now     func() time.Time
	Log     *slog.Logger
	// Observer, if set, learns every pass (metrics, Events).
	Observer Observer

	// interruptions caches what ended each gone VM, looked up once: a
	// pod may go without a sandbox for many passes.
	interruptions map[string]podevent.Interruption
}

// Observer is told about every pass and every action.
type Observer interface {
	Pass(ctx context.Context, p Pass, err error)
}

// Run makes one pass: VMs first, then PeerPods, then pods, so that
// everything read about the cluster is at least as new as the VM list; a
// VM made after the list is not judged. Nothing is deleted unless every
// list was read: uncertainty never deletes.
func (c *Collector) Run(ctx context.Context) (Pass, error) {
	p, err := c.run(ctx)
	if c.Observer != nil {
		c.Observer.Pass(ctx, p, err)
	}
	return p, err
}

func (c *Collector) run(ctx context.Context) (Pass, error) {
	listedAt := c.Now()
	list, err := c.VMs.ListManagedDetail(ctx)
	if err != nil {
		return Pass{}, fmt.Errorf("listing podVMs (nothing deleted): %w", err)
	}
	pass := Pass{OtherClusters: list.OtherClusters, PeerPods: true}
	pps, err := c.Cluster.ListPeerPods(ctx)
	if errors.Is(err, peerpod.ErrNoCRD) {
		pass.PeerPods = false
		c.Log.Warn("no PeerPod CRD: deciding by pods alone; VMs without a PeerPod whose pod is live are kept", "err", err)
	} else if err != nil {
		return pass, fmt.Errorf("listing PeerPods (nothing deleted): %w", err)
	}
	pods, err := c.Cluster.ListPods(ctx)
	if err != nil {
		return pass, fmt.Errorf("listing pods (nothing deleted): %w", err)
	}
	pass.Findings = Decide(c.Now(), c.Policy, list.VMs, pods, pps, pass.PeerPods)
	if pass.PeerPods {
		pass.Gone = Vanished(listedAt, c.Policy, list.VMs, pods, pps)
	}
	c.explain(ctx, &pass)
	if !c.Delete {
		return pass, nil
	}
	for i := range pass.Findings {
		f := &pass.Findings[i]
		if f.Verdict != Orphan {
			continue
		}
		if err := c.VMs.DeleteInstance(ctx, f.VM.ID); err != nil {
			f.Verdict, f.Reason = DeleteErr, fmt.Sprintf("%s; delete failed: %v", f.Reason, err)
			c.Log.Error("deleting orphan podVM failed", "vm", f.VM.ID, "err", err)
			continue
		}
		f.Verdict = Deleted
		if f.Lost {
			c.Log.Warn("deleted lost podVM: it stopped while its pod used it", "vm", f.VM.ID, "pod", f.VM.Namespace+"/"+f.VM.Pod, "reason", f.Reason)
		} else {
			c.Log.Info("deleted orphan podVM", "vm", f.VM.ID, "pod", f.VM.Namespace+"/"+f.VM.Pod, "reason", f.Reason)
		}
		pass.Released = append(pass.Released, c.release(ctx, f.Release)...)
	}
	pass.Released = append(pass.Released, c.release(ctx, strayFinalizers(list.VMs, pps))...)
	return pass, nil
}

// release removes the finalizer of each PeerPod; a failure is retried by
// the next pass.
func (c *Collector) release(ctx context.Context, pps []peerpod.PeerPod) []string {
	var out []string
	for _, pp := range pps {
		if err := c.Cluster.ReleasePeerPod(ctx, pp.Namespace, pp.Name); err != nil {
			c.Log.Error("releasing PeerPod failed", "peerpod", pp.Namespace+"/"+pp.Name, "err", err)
			continue
		}
		out = append(out, pp.Namespace+"/"+pp.Name)
	}
	return out
}

// strayFinalizers are deleted PeerPods of this provider whose VM is not in
// the list: gone already, or not this cluster's to delete. Their finalizer
// would otherwise hold the PeerPod (and its namespace) forever.
func strayFinalizers(vms []managed.VM, pps []peerpod.PeerPod) []peerpod.PeerPod {
	listed := map[string]bool{}
	for _, vm := range vms {
		listed[vm.ID] = true
	}
	var out []peerpod.PeerPod
	for _, pp := range pps {
		if pp.Deleting && pp.Finalized && pp.CloudProvider == gcpt4.ProviderName && !listed[pp.InstanceID] {
			out = append(out, pp)
		}
	}
	return out
}

// Decide judges each VM (see the package comment); it calls nothing.
func Decide(now time.Time, pol Policy, vms []managed.VM, pods []Pod, pps []peerpod.PeerPod, havePeerPods bool) []Finding {
	byUID := map[types.UID]Pod{}
	for _, p := range pods {
		byUID[p.UID] = p
	}
	byInstance := map[string][]peerpod.PeerPod{}
	byOwner := map[types.UID][]peerpod.PeerPod{}
	for _, pp := range pps {
		if pp.CloudProvider != gcpt4.ProviderName {
			continue
		}
		byInstance[pp.InstanceID] = append(byInstance[pp.InstanceID], pp)
		byOwner[pp.OwnerUID] = append(byOwner[pp.OwnerUID], pp)
	}
	created := map[string]time.Time{}
	for _, vm := range vms {
		created[vm.ID] = vm.Created
	}
	j := judge{now: now, pol: pol, pods: pods, byUID: byUID, byOwner: byOwner, created: created, havePeerPods: havePeerPods}
	out := make([]Finding, 0, len(vms))
	for _, vm := range vms {
		out = append(out, j.vm(vm, byInstance[vm.ID]))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].VM.ID < out[b].VM.ID })
	return out
}

type judge struct {
	now     time.Time
	pol     Policy
	pods    []Pod
	byUID   map[types.UID]Pod
	byOwner map[types.UID][]peerpod.PeerPod
	// created is each listed VM's creation time, by ID (GCE's clock).
	created      map[string]time.Time
	havePeerPods bool
}

func (j judge) vm(vm managed.VM, refs []peerpod.PeerPod) Finding {
	f := Finding{VM: vm}
	if vm.Unidentified() {
		f.Verdict, f.Reason = Unidentified, "no "+gcpt4.ClusterLabel+" label (made before cluster labels, or by another tool): any cluster sharing the project may own it, so it is never deleted automatically"
		return f
	}
	for _, pp := range refs {
		if pp.Finalized {
			f.Release = append(f.Release, pp)
		}
	}
	var reason string
	if len(refs) > 0 {
		reason = j.owned(vm, newest(refs))
	} else {
		reason, f.Verdict, f.Pod = j.unrecorded(vm)
		if f.Verdict != "" {
			if stopped(vm) {
				return lost(f)
			}
			f.Reason = reason
			if f.Verdict != Unowned {
				f.Pod = nil
			}
			return f
		}
	}
	if reason == "" && stopped(vm) {
		if owner, ok := j.byUID[newest(refs).OwnerUID]; ok {
			f.Pod = &owner
		}
		return lost(f)
	}
	if reason != "" && stopped(vm) {
		f.Verdict, f.Reason = Orphan, reason+"; it is "+statusTerminated+" (stopped), so no grace period applies: nothing can revive it"
		return f
	}
	if reason == "" {
		n := newest(refs)
		f.Verdict, f.Reason = InUse, fmt.Sprintf("PeerPod %s/%s is its live pod's newest", n.Namespace, n.Name)
		if n.Deleting {
			// Deleted by hand while its pod runs: the sandbox lives on.
			f.Reason = fmt.Sprintf("PeerPod %s/%s is being deleted, but its pod %s lives and owns no newer sandbox: its sandbox runs on this VM; kept (the finalizer stays until the pod is gone)", n.Namespace, n.Name, n.OwnerName)
		}
		return f
	}
	if vm.Created.IsZero() || j.now.Sub(vm.Created) < j.pol.Grace {
		f.Verdict, f.Reason = TooYoung, fmt.Sprintf("%s, but the VM is younger than the %s grace period", reason, j.pol.Grace)
		return f
	}
	f.Verdict, f.Reason = Orphan, reason
	return f
}

// owned judges a VM a PeerPod names; "" means in use.
func (j judge) owned(vm managed.VM, pp peerpod.PeerPod) string {
	owner, ok := j.byUID[pp.OwnerUID]
	switch {
	case !ok:
		return fmt.Sprintf("the pod %s/%s that owns PeerPod %s is gone", pp.Namespace, pp.OwnerName, pp.Name)
	case owner.finished():
		return fmt.Sprintf("pod %s/%s has %s: the kubelet stopped its sandbox", owner.Namespace, owner.Name, owner.Phase)
	}
	for _, other := range j.byOwner[pp.OwnerUID] {
		if other.Created.After(pp.Created) {
			return fmt.Sprintf("pod %s/%s's sandbox was retried: its newer PeerPod %s names %s", owner.Namespace, owner.Name, other.Name, other.InstanceID)
		}
	}
	return ""
}

// unrecorded judges a VM no PeerPod names. It returns the orphan reason,
// or a final verdict (Creating, Unowned) with its reason and, for Unowned,
// the live pod it was made for.
func (j judge) unrecorded(vm managed.VM) (string, Verdict, *Pod) {
	where := vm.Namespace + "/"
	if vm.Namespace == "" {
		where = "(any namespace)/"
	}
	var live []Pod
	finished := 0
	for _, p := range j.pods {
		if gcpt4.LabelValue(p.Name) != vm.Pod || (vm.Namespace != "" && p.Namespace != vm.Namespace) {
			continue
		}
		if p.finished() {
			finished++
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		if finished > 0 {
			return fmt.Sprintf("no PeerPod names it and pod %s%s has finished: the kubelet stopped its sandbox", where, vm.Pod), "", nil
		}
		return fmt.Sprintf("no PeerPod names it and no pod %s%s exists", where, vm.Pod), "", nil
	}
	var older []Pod
	for _, p := range live {
		if !p.Created.After(vm.Created.Add(j.pol.Skew)) {
			older = append(older, p)
		}
	}
	if len(older) == 0 {
		return fmt.Sprintf("no PeerPod names it and pod %s%s was created after the VM: the VM was an earlier pod's", where, vm.Pod), "", nil
	}
	if j.now.Sub(vm.Created) < j.pol.Creating {
		var pod *Pod
		if len(older) == 1 {
			pod = &older[0]
		}
		return fmt.Sprintf("no PeerPod yet: its create may still be running (up to %s)", j.pol.Creating), Creating, pod
	}
	if j.havePeerPods && len(older) == 1 {
		for _, pp := range j.byOwner[older[0].UID] {
			// A later sandbox of the pod was handed to CAA. Compare on
			// GCE's clock when its VM is listed, else allow for skew.
			later := pp.Created.After(vm.Created.Add(j.pol.Skew))
			if t, ok := j.created[pp.InstanceID]; ok {
				later = t.After(vm.Created)
			}
			if later {
				return fmt.Sprintf("no PeerPod names it and pod %s/%s's sandbox was retried after it: PeerPod %s names %s", older[0].Namespace, older[0].Name, pp.Name, pp.InstanceID), "", nil
			}
		}
	}
	why := "no PeerPod names it"
	if !j.havePeerPods {
		why = "the PeerPod CRD is not installed"
	}
	var pod *Pod
	if len(older) == 1 {
		pod = &older[0]
	}
	return fmt.Sprintf("%s, its pod %s%s is live and it is older than the longest create: either CAA recorded no PeerPod for a sandbox that runs on it (its log says \"failed to create PeerPod\"), or CAA died inside the create and the pod's next sandbox, which the kubelet retries while the pod is Pending, has not reached CAA yet; kept until the pod ends or its sandbox is retried", why, where, vm.Pod), Unowned, pod
}

func newest(pps []peerpod.PeerPod) peerpod.PeerPod {
	n := pps[0]
	for _, pp := range pps[1:] {
		if pp.Created.After(n.Created) {
			n = pp
		}
	}
	return n
}

// statusTerminated is GCE's status of a stopped VM
// (compute/docs/instances/instance-life-cycle).
const statusTerminated = "TERMINATED"

// stopped: GCE shows the VM stopped, for good as far as its sandbox goes.
func stopped(vm managed.VM) bool { return vm.Status == statusTerminated }

// lost judges a stopped VM whose pod still used it: an orphan, deleted at
// once, and its pod (f.Pod, when one is known) told why.
func lost(f Finding) Finding {
	who := "its pod"
	if f.Pod != nil {
		who = "pod " + f.Pod.Namespace + "/" + f.Pod.Name
	}
	f.Verdict, f.Lost = Orphan, true
	f.Reason = fmt.Sprintf("lost: GCE shows it %s while %s still used it; a stopped podVM never runs its sandbox again (it has automaticRestart=false and nothing starts a podVM), so it is deleted at once, freeing its disk and address", statusTerminated, who)
	return f
}

// Vanished finds the podVMs live pods still use that GCE no longer lists
// (see the package comment): the newest PeerPod of a pod that exists, has
// not finished and is not being deleted names a VM missing from vms, and
// was recorded before the list began (listedAt, less the clock skew), so
// the VM existed before the list unless it was deleted. It calls nothing.
func Vanished(listedAt time.Time, pol Policy, vms []managed.VM, pods []Pod, pps []peerpod.PeerPod) []GoneVM {
	listed := map[string]bool{}
	for _, vm := range vms {
		listed[vm.ID] = true
	}
	byUID := map[types.UID]Pod{}
	for _, p := range pods {
		byUID[p.UID] = p
	}
	byOwner := map[types.UID][]peerpod.PeerPod{}
	for _, pp := range pps {
		if pp.CloudProvider == gcpt4.ProviderName && !pp.Deleting {
			byOwner[pp.OwnerUID] = append(byOwner[pp.OwnerUID], pp)
		}
	}
	var out []GoneVM
	for uid, owned := range byOwner {
		pod, ok := byUID[uid]
		if !ok || pod.finished() || pod.Deleting {
			continue
		}
		pp := newest(owned)
		if pp.InstanceID == "" || listed[pp.InstanceID] || !pp.Created.Before(listedAt.Add(-pol.Skew)) {
			continue
		}
		out = append(out, GoneVM{ID: pp.InstanceID, PeerPod: pp.Namespace + "/" + pp.Name, Pod: pod})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// explain asks the provider what ended each lost and gone VM, when it can
// say: once per lost VM (deleted in this pass), once per gone VM while it
// stays gone. A failed lookup leaves the cause unknown and is not retried
// for that VM: the pod is told either way.
func (c *Collector) explain(ctx context.Context, pass *Pass) {
	iv, ok := c.VMs.(Interrupter)
	if !ok {
		return
	}
	cached := c.interruptions
	c.interruptions = map[string]podevent.Interruption{}
	lookup := func(id string) *podevent.Interruption {
		in, ok := cached[id]
		if !ok {
			var err error
			if in, err = iv.Interruption(ctx, id); err != nil {
				c.Log.Warn("cannot tell what ended a lost podVM; its pod is told without a cause", "vm", id, "err", err)
			}
		}
		c.interruptions[id] = in
		return &in
	}
	for i := range pass.Findings {
		if f := &pass.Findings[i]; f.Lost {
			f.Interruption = lookup(f.VM.ID)
			f.Reason += "; " + f.Interruption.Text()
		}
	}
	for i := range pass.Gone {
		g := &pass.Gone[i]
		if _, seen := cached[g.ID]; !seen {
			c.Log.Warn("a podVM its pod still uses is gone from GCE", "vm", g.ID, "pod", g.Pod.Namespace+"/"+g.Pod.Name, "peerpod", g.PeerPod)
		}
		g.Interruption = lookup(g.ID)
	}
}
