// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// TestPodVMsCarryTheNetworkTag: firewall rules can target podVMs by tag,
// on profile and template creates alike; a template's own tags survive
// (the insert body's list replaces the template's).
func TestPodVMsCarryTheNetworkTag(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.NetworkTags = commaList{DefaultNetworkTag} })
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	if tags := fake.Instances()[0].GetTags().GetItems(); !slices.Equal(tags, []string{DefaultNetworkTag}) {
		t.Errorf("tags %v", tags)
	}
	fake.AddInstanceTemplate("", &computepb.InstanceTemplate{Name: proto.String("t4"), Properties: &computepb.InstanceProperties{
		MachineType:       proto.String("n1-standard-4"),
		Tags:              &computepb.Tags{Items: []string{"allow-egress"}},
		Disks:             []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/demo-project/global/images/podvm-t4")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default")}},
	}})
	tp, _ := newTestProviderOn(t, fake, func(c *Config) {
		c.InstanceTemplate, c.ImageName, c.Network, c.Subnetwork = "t4", "", "", ""
		c.NetworkTags = commaList{DefaultNetworkTag}
	})
	if _, err := tp.CreateInstance(context.Background(), "cpu-0", sandbox[1:]+"0", cloudConfig("cpu-0"), provider.InstanceTypeSpec{}); err != nil {
		t.Fatal(err)
	}
	for _, inst := range fake.Instances() {
		if strings.HasPrefix(inst.GetName(), "podvm-cpu-0") {
			if tags := inst.GetTags().GetItems(); !slices.Equal(tags, []string{"allow-egress", DefaultNetworkTag}) {
				t.Errorf("template podVM tags %v", tags)
			}
		}
	}
	c := validConfig()
	c.NetworkTags = commaList{"Not_A_Tag"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "GCP_NETWORK_TAGS") {
		t.Errorf("Validate = %v", err)
	}
}
