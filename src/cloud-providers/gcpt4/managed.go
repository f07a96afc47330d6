// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// ListManaged returns this cluster's podVMs and the unidentified ones (see
// managed.List); other clusters' are left out.
func (p *Provider) ListManaged(ctx context.Context) ([]managed.VM, error) {
	l, err := p.ListManagedDetail(ctx)
	return l.VMs, err
}

// ListManagedDetail is ListManaged with what it skipped and cost: one
// aggregated list call per page of 500 instances, whatever the number of
// zones. The filter selects the provider's managed-by label; clusters are
// told apart here, since GCE's filter cannot select a missing label.
func (p *Provider) ListManagedDetail(ctx context.Context) (managed.List, error) {
	var out managed.List
	if err := p.enter(); err != nil {
		return out, err
	}
	defer p.inflight.Done()
	it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project:    p.cfg.ProjectID,
		Filter:     stringPtr(fmt.Sprintf("labels.%s = %q", ManagedByLabel, ManagedByValue)),
		MaxResults: proto32(500),
	})
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return managed.List{}, fmt.Errorf("listing podVMs labelled %s=%s: %w", ManagedByLabel, ManagedByValue, err)
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		for _, inst := range pair.Value.GetInstances() {
			vm := managedVM(zone, inst)
			if vm.Cluster != "" && vm.Cluster != p.cfg.ClusterID {
				out.OtherClusters++
				continue
			}
			out.VMs = append(out.VMs, vm)
		}
	}
	sort.Slice(out.VMs, func(i, j int) bool { return out.VMs[i].ID < out.VMs[j].ID })
	return out, nil
}

// managedVM reads a podVM's identity from its labels, preferring the full
// values in its metadata where a label may be truncated.
func managedVM(zone string, inst *computepb.Instance) managed.VM {
	l := inst.GetLabels()
	vm := managed.VM{
		ID:          InstanceID(zone, inst.GetName()),
		Name:        inst.GetName(),
		Zone:        zone,
		Pod:         l[PodLabel],
		Namespace:   l[NamespaceLabel],
		Sandbox:     l[SandboxLabel],
		Cluster:     l[ClusterLabel],
		ClusterName: l[ClusterNameLabel],
		Node:        l[NodeLabel],
		Status:      inst.GetStatus(),
	}
	for _, it := range inst.GetMetadata().GetItems() {
		switch it.GetKey() {
		case SandboxMetadata:
			vm.Sandbox = it.GetValue()
		case NodeMetadata:
			vm.Node = it.GetValue()
		case NamespaceMetadata:
			vm.Namespace = it.GetValue()
		}
	}
	if t, err := time.Parse(time.RFC3339, inst.GetCreationTimestamp()); err == nil {
		vm.Created = t
	}
	return vm
}

func proto32(v uint32) *uint32 { return &v }

// interruptionOps maps the operation types that end a VM's run to a
// cause; types that start a run (insert, start, GCE's automatic restart)
// begin a new one.
var (
	interruptionOps = map[string]string{
		"compute.instances.preempted":                  podevent.CausePreempted,
		"compute.instances.terminateOnHostMaintenance": podevent.CauseHostMaintenance,
		"compute.instances.hostError":                  podevent.CauseHostError,
		"compute.instances.guestTerminate":             podevent.CauseGuestShutdown,
		"stop":                                         podevent.CauseStopped,
		"delete":                                       podevent.CauseDeleted,
	}
	runOps = map[string]bool{"insert": true, "start": true, "compute.instances.automaticRestart": true}
)

// maxInterruptionOps bounds how many operations one lookup reads: a podVM
// is created once and ended once, so a handful is normal.
const maxInterruptionOps = 500

// Interruption reads what ended a podVM, stopped or gone, from the
// operations GCE recorded on it (zoneOperations.list, filtered by the
// VM's link): the first operation that ends a run after its last start.
// It finds no cause (podevent.CauseUnknown, no error) when GCE kept no such
// operation. The link is built with the www.googleapis.com host, the one
// GCE writes in every targetLink whatever endpoint the client uses.
func (p *Provider) Interruption(ctx context.Context, instanceID string) (podevent.Interruption, error) {
	unknown := podevent.Interruption{Cause: podevent.CauseUnknown}
	if err := p.enter(); err != nil {
		return unknown, err
	}
	defer p.inflight.Done()
	zone, name := parseInstanceID(instanceID)
	if zone == "" || name == "" {
		return unknown, fmt.Errorf("podVM ID %q names no zone and instance", instanceID)
	}
	link := "https://www.googleapis.com/compute/v1/projects/" + p.cfg.ProjectID + "/zones/" + zone + "/instances/" + name
	it := p.operations.List(ctx, &computepb.ListZoneOperationsRequest{
		Project:    p.cfg.ProjectID,
		Zone:       zone,
		Filter:     stringPtr(fmt.Sprintf("targetLink = %q", link)),
		MaxResults: proto32(500),
	})
	var ops []*computepb.Operation
	for len(ops) < maxInterruptionOps {
		op, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return unknown, fmt.Errorf("listing the operations on podVM %s in %s (needs compute.zoneOperations.list): %w", name, zone, err)
		}
		if op.GetTargetLink() == link {
			ops = append(ops, op)
		}
	}
	at := func(op *computepb.Operation) time.Time {
		t, _ := time.Parse(time.RFC3339, op.GetInsertTime())
		return t
	}
	sort.SliceStable(ops, func(i, j int) bool { return at(ops[i]).Before(at(ops[j])) })
	from := 0
	for i, op := range ops {
		if runOps[op.GetOperationType()] {
			from = i + 1
		}
	}
	for _, op := range ops[from:] {
		if cause, ok := interruptionOps[op.GetOperationType()]; ok {
			return podevent.Interruption{Cause: cause, Operation: op.GetOperationType(), By: op.GetUser(), At: at(op)}, nil
		}
	}
	return unknown, nil
}
