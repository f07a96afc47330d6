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
)

// ManagedVM is a podVM this provider created, as found by its labels.
type ManagedVM struct {
	ID        string
	Name      string
	Zone      string
	Pod       string
	Namespace string
	Sandbox   string
	// Cluster is the caa-cluster label: this cluster's ID, or "" on a VM
	// made before the provider labelled clusters (Unidentified).
	Cluster     string
	ClusterName string
	// Node is the node whose adaptor created the VM, "" if unknown.
	Node    string
	Status  string
	Created time.Time
}

// Unidentified reports a VM without a cluster label: an older install's,
// or another tool's. It is listed and never deleted automatically, since
// it may belong to any cluster that shares the project.
func (vm ManagedVM) Unidentified() bool { return vm.Cluster == "" }

// ManagedList is what one listing found.
type ManagedList struct {
	// VMs are this cluster's podVMs and the unidentified ones, by ID.
	VMs []ManagedVM
	// OtherClusters counts podVMs labelled with another cluster's ID,
	// which this cluster never touches.
	OtherClusters int
}

// ListManaged returns this cluster's podVMs and the unidentified ones (see
// ManagedList); other clusters' are left out.
func (p *Provider) ListManaged(ctx context.Context) ([]ManagedVM, error) {
	l, err := p.ListManagedDetail(ctx)
	return l.VMs, err
}

// ListManagedDetail is ListManaged with what it skipped and cost: one
// aggregated list call per page of 500 instances, whatever the number of
// zones. The filter selects the provider's managed-by label; clusters are
// told apart here, since GCE's filter cannot select a missing label.
func (p *Provider) ListManagedDetail(ctx context.Context) (ManagedList, error) {
	var out ManagedList
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
			return ManagedList{}, fmt.Errorf("listing podVMs labelled %s=%s: %w", ManagedByLabel, ManagedByValue, err)
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
func managedVM(zone string, inst *computepb.Instance) ManagedVM {
	l := inst.GetLabels()
	vm := ManagedVM{
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
