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
	ID      string
	Name    string
	Zone    string
	Pod     string
	Sandbox string
	Status  string
	Created time.Time
}

// ListManaged returns every VM in the project labelled as ours, in one
// aggregated list call whatever the number of zones. After an adaptor
// restart this is how its VMs are found again; clean-up decides which
// are orphans.
func (p *Provider) ListManaged(ctx context.Context) ([]ManagedVM, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.inflight.Done()
	it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: p.cfg.ProjectID,
		Filter:  stringPtr(fmt.Sprintf("labels.%s = %q", ManagedByLabel, ManagedByValue)),
	})
	var out []ManagedVM
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("listing podVMs labelled %s=%s: %w", ManagedByLabel, ManagedByValue, err)
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		for _, inst := range pair.Value.GetInstances() {
			vm := ManagedVM{
				ID:      InstanceID(zone, inst.GetName()),
				Name:    inst.GetName(),
				Zone:    zone,
				Pod:     inst.GetLabels()[PodLabel],
				Sandbox: inst.GetLabels()[SandboxLabel],
				Status:  inst.GetStatus(),
			}
			for _, it := range inst.GetMetadata().GetItems() {
				if it.GetKey() == SandboxMetadata {
					vm.Sandbox = it.GetValue()
				}
			}
			if t, err := time.Parse(time.RFC3339, inst.GetCreationTimestamp()); err == nil {
				vm.Created = t
			}
			out = append(out, vm)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
