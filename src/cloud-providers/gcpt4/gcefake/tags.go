// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"regexp"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// networkTagRE is GCE's rule for network tags: RFC 1035, 1-63 characters,
// lowercase; at most 64 per instance ("Add network tags",
// https://cloud.google.com/vpc/docs/add-remove-network-tags).
var networkTagRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// validateTags rejects what instances.insert rejects in tags.items.
func validateTags(t *computepb.Tags) error {
	items := t.GetItems()
	if len(items) > 64 {
		return invalidField("resource.tags.items", fmt.Sprint(len(items)), "An instance can have at most 64 tags.")
	}
	for i, tag := range items {
		if !networkTagRE.MatchString(tag) {
			return invalidField(fmt.Sprintf("resource.tags.items[%d]", i), tag, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
		}
	}
	return nil
}
