// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"errors"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// This file is the drop-in's surface for the operator tools in gcp-t4/
// (install, plan, preflight, the reaper, the adaptor binary's shutdown):
// entry points CAA never calls, kept out of the files CAA's interfaces
// live in (manager.go, provider.go, create.go, verify.go, config.go) so
// that what CAA depends on reads apart from what our tools reuse
// (docs/upstream.md, "What gcpt4 exports, and for whom").

// Catalog returns the profiles the provider selects from.
func (p *Provider) Catalog() *catalog.Catalog { return p.catalog }

// ErrNoCapacity marks a create that failed because no tried offering had
// capacity or quota; errors.Is finds it in CreateInstance's error.
var ErrNoCapacity = errors.New("no GPU capacity")

// LongestCall is the longest any provider call can run: a create walk cut
// off at createTimeout, then one clean-up delete bounded by cleanupTimeout
// (a create abandons at most one VM: only a non-capacity failure after an
// accepted insert does, and it ends the walk). Teardown waits at most this
// long, so the adaptor's termination grace must cover it, and a podVM
// without a PeerPod is only taken for leaked once it is older than this.
const LongestCall = createTimeout + cleanupTimeout

// Zones returns the configured zones to try, the primary first, without
// duplicates (with GCP_ZONES=auto, only the primary).
func (c *Config) Zones() []string {
	zones := []string{c.Zone}
	if c.autoZones() {
		return zones
	}
	for _, z := range c.FallbackZones {
		dup := false
		for _, seen := range zones {
			dup = dup || seen == z
		}
		if !dup {
			zones = append(zones, z)
		}
	}
	return zones
}

// TemplateRef parses GCP_INSTANCE_TEMPLATE as the provider does: its
// project, region ("" for a global template) and name.
func TemplateRef(s, project string) (proj, region, name string, err error) {
	t, err := parseTemplateURL(s, project)
	return t.project, t.region, t.name, err
}
