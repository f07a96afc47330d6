// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// Through the provider, as CAA calls it: the refusal is CreateInstance's
// error (which CAA returns to the shim, so it becomes the pod's event), and
// no VM is inserted.
func TestProviderRefusesWhatTheAdminDidNotAllow(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	for _, tc := range []struct {
		spec provider.InstanceTypeSpec
		want string
	}{
		{provider.InstanceTypeSpec{GPUs: 1, Image: "projects/attacker-proj/global/images/evil"}, "GCP_ALLOWED_IMAGES"},
		{provider.InstanceTypeSpec{InstanceType: "n1-standard-96", GPUs: 4}, "GCP_INSTANCE_TYPES"},
		{provider.InstanceTypeSpec{InstanceType: "t4-4"}, "the pod requests 0"},
		{provider.InstanceTypeSpec{GPUs: 4, VCPUs: 96}, "GCP_MAX_VCPUS_PER_POD"},
	} {
		_, err := p.CreateInstance(context.Background(), "tenant", sandbox, cloudConfig("tenant"), tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.spec, err, tc.want)
		}
	}
	if n := len(fake.Instances()); n != 0 {
		t.Errorf("%d instances inserted for refused pods", n)
	}
}
