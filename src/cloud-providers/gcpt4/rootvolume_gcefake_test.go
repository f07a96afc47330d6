// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"flag"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// TestRootVolumeSizeWithAUnitIsRefusedAtStart holds docs/provider.md:
// ROOT_VOLUME_SIZE is whole GiB. Upstream's registrar reads "100Gi" as 100
// (fmt's %d takes the leading integer; the fork reads it the same), but a
// unit is a mistake the provider refuses when CAA starts, naming the key,
// rather than guessing what was meant.
func TestRootVolumeSizeWithAUnitIsRefusedAtStart(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	for k, v := range map[string]string{"GCP_PROJECT_ID": fake.Project(), "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4", "GCP_NETWORK": "default", "GCP_ENDPOINT": fake.URL(), "GCP_CLUSTER_ID": "0b5e3c1a-7f42-4d7e-9a51-2c3d4e5f6a7b"} {
		t.Setenv(k, v)
	}
	t.Setenv("ROOT_VOLUME_SIZE", "100Gi")
	var m Manager
	fs := flag.NewFlagSet("caa", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if m.cfg.RootVolumeSize != 100 {
		t.Errorf("upstream's registrar reads ROOT_VOLUME_SIZE=100Gi as 100; the fork's gives %d", m.cfg.RootVolumeSize)
	}
	p, err := m.NewProvider()
	if err == nil {
		_ = p.Teardown()
		t.Fatal("NewProvider accepted ROOT_VOLUME_SIZE=100Gi; docs/provider.md says it is refused at start")
	}
	if !strings.Contains(err.Error(), `ROOT_VOLUME_SIZE (flag -root-volume-size): "100Gi" is not a whole number`) {
		t.Fatalf("NewProvider = %v, want the refusal naming ROOT_VOLUME_SIZE", err)
	}
}
