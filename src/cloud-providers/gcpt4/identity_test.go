// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"
)

const (
	clusterA = "3f1c9d2e-6b7a-4e21-9c55-0a1b2c3d4e5f"
	clusterB = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
)

func TestIdentitySettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.ClusterID = "Not A UID" }, "GCP_CLUSTER_ID"},
		{func(c *Config) { c.ClusterName = "Prod EU" }, "GCP_CLUSTER_NAME"},
		{func(c *Config) { c.Labels = map[string]string{ClusterLabel: "x"} }, "set by the provider itself"},
		{func(c *Config) { c.Labels = map[string]string{NodeLabel: "x"} }, "set by the provider itself"},
	} {
		c := validConfig()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %s, got %v", tc.want, err)
		}
	}
}
