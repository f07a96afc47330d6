// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
)

// zonesFor returns the zones to try for an accelerator, primary first.
// With GCP_ZONES=auto they are discovered with one aggregated list per
// accelerator and kept for the provider's life: GCE adds GPU zones rarely.
func (p *Provider) zonesFor(ctx context.Context, accelerator string) ([]string, error) {
	if !p.cfg.autoZones() || accelerator == "" {
		return p.cfg.Zones(), nil
	}
	p.mu.Lock()
	cached, ok := p.discovered[accelerator]
	p.mu.Unlock()
	if ok {
		return cached, nil
	}
	region := regionOf(p.cfg.Zone)
	zones := []string{p.cfg.Zone}
	it := p.accelerators.AggregatedList(ctx, &computepb.AggregatedListAcceleratorTypesRequest{
		Project: p.cfg.ProjectID,
		Filter:  stringPtr(fmt.Sprintf("name = %q", accelerator)),
	})
	var found []string
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("GCP_ZONES=auto: listing the zones that offer %s: %w", accelerator, err)
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		if regionOf(zone) != region || zone == p.cfg.Zone {
			continue
		}
		for _, a := range pair.Value.GetAcceleratorTypes() {
			if a.GetName() == accelerator {
				found = append(found, zone)
				break
			}
		}
	}
	sort.Strings(found)
	zones = append(zones, found...)
	p.mu.Lock()
	p.discovered[accelerator] = zones
	p.mu.Unlock()
	p.log.Printf("zones with %s: %v", accelerator, zones)
	return zones, nil
}

func stringPtr(s string) *string { return &s }
