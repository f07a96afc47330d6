// Package gc finds podVMs whose pod is gone and, when asked, deletes them:
// the last line of defence against a paid GPU VM that nobody owns (an
// adaptor killed between insert and return, a lost StopVM).
package gc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// VMs is what the collector needs of the provider.
type VMs interface {
	ListManaged(ctx context.Context) ([]gcpt4.ManagedVM, error)
	DeleteInstance(ctx context.Context, instanceID string) error
}

// Pod is what the collector needs to know of a pod.
type Pod struct {
	Name    string
	Created time.Time
}

// Pods lists the cluster's pods (all namespaces).
type Pods interface {
	ListPods(ctx context.Context) ([]Pod, error)
}

// Verdict is what the collector decided for one VM.
type Verdict string

// Verdicts.
const (
	InUse     Verdict = "in-use"
	TooYoung  Verdict = "orphan-within-grace"
	Orphan    Verdict = "orphan"
	Deleted   Verdict = "deleted"
	DeleteErr Verdict = "delete-failed"
)

// Finding is one VM and the verdict on it.
type Finding struct {
	VM      gcpt4.ManagedVM `json:"vm"`
	Verdict Verdict         `json:"verdict"`
	Reason  string          `json:"reason"`
}

// Collector decides which podVMs are orphans.
type Collector struct {
	VMs  VMs
	Pods Pods
	// Grace protects a VM created moments ago whose pod the API may not
	// show yet, and bounds the cost of a mistake in either direction.
	Grace time.Duration
	// Skew allows for clock differences between GCE and the API server
	// when comparing a pod's creation with its VM's.
	Skew   time.Duration
	Delete bool
	Now    func() time.Time
	Log    *slog.Logger
}

// Run lists VMs and pods once and returns a finding per VM. Nothing is
// deleted unless both lists were read: uncertainty never deletes.
func (c *Collector) Run(ctx context.Context) ([]Finding, error) {
	vms, err := c.VMs.ListManaged(ctx)
	if err != nil {
		return nil, err
	}
	pods, err := c.Pods.ListPods(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing pods (nothing deleted): %w", err)
	}
	// A VM is made after its pod; a pod of the same name created after
	// the VM is a later incarnation (a StatefulSet's llm-0 recreated) and
	// does not keep the old VM alive.
	oldest := map[string][]time.Time{}
	for _, p := range pods {
		key := gcpt4.LabelValue(p.Name)
		oldest[key] = append(oldest[key], p.Created)
	}
	now := c.Now()
	var out []Finding
	for _, vm := range vms {
		f := Finding{VM: vm}
		switch {
		case keeps(oldest[vm.Pod], vm.Created, c.Skew):
			f.Verdict, f.Reason = InUse, "pod "+vm.Pod+" exists and predates the VM"
		case vm.Created.IsZero() || now.Sub(vm.Created) < c.Grace:
			f.Verdict, f.Reason = TooYoung, fmt.Sprintf("no pod %s, but the VM is younger than the %s grace period", vm.Pod, c.Grace)
		default:
			f.Verdict, f.Reason = Orphan, fmt.Sprintf("no pod %s that predates the VM (created %s)", vm.Pod, vm.Created.UTC().Format(time.RFC3339))
		}
		if f.Verdict == Orphan && c.Delete {
			if err := c.VMs.DeleteInstance(ctx, vm.ID); err != nil {
				f.Verdict, f.Reason = DeleteErr, err.Error()
				c.Log.Error("deleting orphan podVM failed", "vm", vm.ID, "err", err)
			} else {
				f.Verdict = Deleted
				c.Log.Info("deleted orphan podVM", "vm", vm.ID, "pod", vm.Pod)
			}
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VM.ID < out[j].VM.ID })
	return out, nil
}

func keeps(podCreated []time.Time, vmCreated time.Time, skew time.Duration) bool {
	for _, t := range podCreated {
		if vmCreated.IsZero() || !t.After(vmCreated.Add(skew)) {
			return true
		}
	}
	return false
}
