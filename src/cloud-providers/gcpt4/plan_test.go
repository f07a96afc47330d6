// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

func TestPlanInsertModelsAndRefusals(t *testing.T) {
	cfg := validConfig()
	cfg.ProvisioningModel = setting.ProvisioningSpot
	cfg.SpotFallback = true
	plan, err := cfg.PlanInsert(nil, provider.InstanceTypeSpec{GPUs: 2}, "p", sandbox, "")
	if err != nil {
		t.Fatal(err)
	}
	if plan.Profile.Name != "t4-2" || strings.Join(plan.Models, ",") != "SPOT,STANDARD" {
		t.Errorf("profile %s models %v", plan.Profile.Name, plan.Models)
	}
	s := plan.Request("us-central1-a", setting.ProvisioningSpot).GetInstanceResource().GetScheduling()
	if s.GetProvisioningModel() != setting.ProvisioningSpot || s.GetInstanceTerminationAction() != "DELETE" {
		t.Errorf("spot scheduling = %v", s)
	}

	cfg = validConfig()
	cfg.InstanceTypes = commaList{"t4-1"}
	if _, err := cfg.PlanInsert(nil, provider.InstanceTypeSpec{InstanceType: "t4-4"}, "p", sandbox, ""); err == nil || !strings.Contains(err.Error(), "GCP_INSTANCE_TYPES") {
		t.Errorf("allow-list: err = %v", err)
	}
	cfg = validConfig()
	cfg.InstanceTemplate = "global/instanceTemplates/t"
	if _, err := cfg.PlanInsert(nil, oneT4, "p", sandbox, ""); err == nil || !strings.Contains(err.Error(), "GCP_INSTANCE_TEMPLATE") {
		t.Errorf("template: err = %v", err)
	}
	cfg = validConfig()
	cfg.ProjectID = ""
	if _, err := cfg.PlanInsert(nil, oneT4, "p", sandbox, ""); err == nil || !strings.Contains(err.Error(), "GCP_PROJECT_ID") {
		t.Errorf("invalid config: err = %v", err)
	}
	cfg = validConfig()
	if _, err := cfg.PlanInsert(nil, provider.InstanceTypeSpec{GPUs: 8}, "p", sandbox, ""); err == nil {
		t.Error("8 GPUs: want no profile to fit")
	}
}
