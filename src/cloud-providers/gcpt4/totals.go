// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"sync"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// GPU totals, the provider-side half of the cost guard: the admission
// policy (install/components/cost-guard) caps GPUs per pod per namespace;
// GCP_MAX_GPUS_PER_NAMESPACE and GCP_MAX_GPUS_TOTAL cap the GPUs of all
// of this cluster's podVMs, counted from GCE itself (what is billed), so
// a VM leaked or made by another node counts too.
//
// The count is per adaptor: creates on one node are serialized through
// the check and their GPUs held until the insert ends, but two nodes'
// adaptors may each pass the check for the last GPU at the same moment.
// The limit can so be exceeded by at most one pod per node; GCE's
// NVIDIA_T4_GPUS quota is the hard ceiling.

// gpuTotals serializes the check and remembers this adaptor's creates in
// flight, which GCE may not list yet.
type gpuTotals struct {
	mu       sync.Mutex
	inflight map[string]int64 // namespace -> GPUs being created
}

// planGPUs is the number of GPUs the plan's shapes attach (every step of
// a plan has the same GPUs).
func (cp createPlan) planGPUs() int64 {
	var n int64
	for _, st := range cp.steps {
		n = max(n, st.count)
	}
	return n
}

// instanceGPUs counts an instance's attached and bundled GPUs.
func instanceGPUs(inst *computepb.Instance) int64 {
	var n int64
	for _, a := range inst.GetGuestAccelerators() {
		n += int64(a.GetAcceleratorCount())
	}
	if s, ok := catalog.LookupShape(lastSegment(inst.GetMachineType())); ok {
		n += int64(s.BundledCount)
	}
	return n
}

// reserveGPUs refuses a create that would take this cluster over
// GCP_MAX_GPUS_TOTAL, or the pod's namespace over
// GCP_MAX_GPUS_PER_NAMESPACE, and otherwise holds its GPUs until release.
func (p *Provider) reserveGPUs(ctx context.Context, vm podVM, plan createPlan) (release func(), err error) {
	none := func() {}
	want := plan.planGPUs()
	if want == 0 || (p.cfg.MaxGPUsTotal == 0 && p.cfg.MaxGPUsPerNamespace == 0) {
		return none, nil
	}
	t := &p.gpuTotals
	t.mu.Lock()
	defer t.mu.Unlock()
	total, inNS := int64(0), int64(0)
	it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: p.cfg.ProjectID,
		Filter:  stringPtr(fmt.Sprintf("labels.%s = %q AND labels.%s = %q", ManagedByLabel, ManagedByValue, ClusterLabel, p.cfg.ClusterID)),
	})
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return none, fmt.Errorf("counting this cluster's podVM GPUs for GCP_MAX_GPUS_TOTAL / GCP_MAX_GPUS_PER_NAMESPACE: %w", err)
		}
		for _, inst := range pair.Value.GetInstances() {
			// A retried create of this very pod finds its own VM.
			if inst.GetName() == vm.name {
				continue
			}
			n := instanceGPUs(inst)
			total += n
			if managedVM("", inst).Namespace == vm.namespace {
				inNS += n
			}
		}
	}
	for ns, n := range t.inflight {
		total += n
		if ns == vm.namespace {
			inNS += n
		}
	}
	if lim := int64(p.cfg.MaxGPUsPerNamespace); lim > 0 && inNS+want > lim {
		return none, notAllowed(fmt.Errorf("namespace %s: %d GPU(s) in use + %d > GCP_MAX_GPUS_PER_NAMESPACE=%d; delete a GPU pod, or ask the admin to raise it", vm.namespace, inNS, want, lim))
	}
	if lim := int64(p.cfg.MaxGPUsTotal); lim > 0 && total+want > lim {
		return none, notAllowed(fmt.Errorf("cluster: %d GPU(s) in use + %d > GCP_MAX_GPUS_TOTAL=%d; wait for GPU pods to end, or ask the admin to raise it", total, want, lim))
	}
	if t.inflight == nil {
		t.inflight = map[string]int64{}
	}
	t.inflight[vm.namespace] += want
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.inflight[vm.namespace] -= want; t.inflight[vm.namespace] <= 0 {
			delete(t.inflight, vm.namespace)
		}
	}, nil
}
