// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// The plan must be what the provider sends: every insert the provider makes
// against the fake (primary zone stocked out, so also the fallback zone)
// equals the plan's request for that zone, body and requestId alike.
func TestPlanInsertIsWhatTheProviderSends(t *testing.T) {
	mutate := func(c *Config) {
		c.FallbackZones = commaList{"us-central1-b"}
		c.Labels = provider.KeyValueFlag{"team": "ml"}
	}
	p, fake := newTestProvider(t, mutate)
	fake.SetStockout("us-central1-a", true)
	cc := cloudConfig("llm-0")
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cc, oneT4); err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	text, err := cc.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := validConfig()
	cfg.Subnetwork = "default"
	mutate(&cfg)
	plan, err := cfg.PlanInsert(nil, oneT4, "llm-0", sandbox, text)
	if err != nil {
		t.Fatalf("PlanInsert: %v", err)
	}
	if plan.Profile.Name != "t4-1" || strings.Join(plan.Zones, ",") != "us-central1-a,us-central1-b" || strings.Join(plan.Models, ",") != setting.ProvisioningStandard {
		t.Errorf("plan = profile %s zones %v models %v", plan.Profile.Name, plan.Zones, plan.Models)
	}
	var inserts int
	for _, call := range fake.Calls() {
		if call.Kind != "instances.insert" {
			continue
		}
		inserts++
		zone := strings.Split(strings.TrimPrefix(call.Path, "/compute/v1/projects/demo-project/zones/"), "/")[0]
		want := plan.Request(zone, setting.ProvisioningStandard)
		var got computepb.Instance
		if err := protojson.Unmarshal(call.Body, &got); err != nil {
			t.Fatalf("insert body: %v", err)
		}
		if !proto.Equal(&got, want.GetInstanceResource()) {
			t.Errorf("zone %s: provider sent\n%s\nplan says\n%s", zone, call.Body, protojson.Format(want.GetInstanceResource()))
		}
		q, _ := url.ParseQuery(call.RawQuery)
		if q.Get("requestId") != want.GetRequestId() || want.GetProject() != "demo-project" || want.GetZone() != zone {
			t.Errorf("zone %s: requestId %s, plan %s (project %s zone %s)", zone, q.Get("requestId"), want.GetRequestId(), want.GetProject(), want.GetZone())
		}
	}
	if inserts != 2 {
		t.Errorf("provider made %d inserts, want 2 (stockout, then fallback)", inserts)
	}
}
