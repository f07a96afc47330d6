// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"flag"
	"strings"
	"testing"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

func validConfig() Config {
	return Config{
		ProjectID:         "demo-project",
		Zone:              "us-central1-a",
		ImageName:         "podvm-t4",
		Network:           "default",
		DiskType:          "pd-balanced",
		RootVolumeSize:    50,
		ProvisioningModel: setting.ProvisioningStandard,
		ClusterID:         "3f1c9d2e-6b7a-4e21-9c55-0a1b2c3d4e5f",
	}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.ProjectID = "" }, "GCP_PROJECT_ID (-gcp-project-id) is required"},
		{func(c *Config) { c.ProjectID = "My Project" }, "GCP_PROJECT_ID: \"My Project\" is not a project ID"},
		{func(c *Config) { c.Zone = "" }, "GCP_ZONE (-zone) is required"},
		{func(c *Config) { c.Zone = "us-central1" }, "GCP_ZONE: \"us-central1\" is not a zone"},
		{func(c *Config) {
			c.Subnetwork = "projects/demo-project/regions/us-central1/subnetworks/podvms"
			c.FallbackZones = commaList{"europe-west4-b"}
		}, "GCP_ZONES: europe-west4-b is in region europe-west4 but GCP_SUBNETWORK"},
		{func(c *Config) { c.UnavailableTTL = -time.Second }, "GCP_UNAVAILABLE_OFFERING_TTL"},
		{func(c *Config) { c.MutationsPerSecond = -1 }, "GCP_MUTATIONS_PER_SECOND"},
		{func(c *Config) { c.SpotFallback = true }, "GCP_SPOT_FALLBACK: only meaningful with GCP_PROVISIONING_MODEL=SPOT"},
		{func(c *Config) { c.ImageName = "" }, "PODVM_IMAGE_NAME (-image-name) is required"},
		{func(c *Config) { c.ImageName = "projects/p/zones/z/disks/d" }, "PODVM_IMAGE_NAME: \"projects/p/zones/z/disks/d\" is not an image"},
		{func(c *Config) { c.Network = "" }, "GCP_NETWORK (-network) is required"},
		{func(c *Config) { c.RootVolumeSize = 5 }, "ROOT_VOLUME_SIZE"},
		{func(c *Config) { c.ProvisioningModel = "spot" }, "GCP_PROVISIONING_MODEL: \"spot\""},
		{func(c *Config) { c.UsePublicIP = true }, "USE_PUBLIC_IP: gcp-t4 never gives a podVM an external IP"},
		{func(c *Config) { c.Labels = provider.KeyValueFlag{"Team": "x"} }, "GCP_LABELS: Team=x is not a GCE label"},
		{func(c *Config) { c.Labels = provider.KeyValueFlag{ManagedByLabel: "me"} }, "set by the provider itself"},
		{func(c *Config) { c.InstanceTemplate = "zones/x/instances/y" }, "GCP_INSTANCE_TEMPLATE"},
	}
	for _, tc := range cases {
		c := validConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, tc.want)
		}
	}
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	// A bare subnetwork name may span regions (an auto-mode network).
	c.FallbackZones = commaList{"us-east1-c"}
	if err := c.Validate(); err != nil {
		t.Fatalf("multi-region zones with a bare subnetwork rejected: %v", err)
	}
	// A template replaces image and network.
	c.ImageName, c.Network, c.InstanceTemplate = "", "", "projects/demo-project/regions/us-central1/instanceTemplates/t4"
	if err := c.Validate(); err != nil {
		t.Fatalf("template config rejected: %v", err)
	}
}

func TestParseTemplateURL(t *testing.T) {
	cases := map[string]string{
		"https://www.googleapis.com/compute/v1/projects/p1/global/instanceTemplates/t": "projects/p1/global/instanceTemplates/t",
		"projects/p1/global/instanceTemplates/t":                                       "projects/p1/global/instanceTemplates/t",
		"global/instanceTemplates/t":                                                   "projects/demo-project/global/instanceTemplates/t",
		"t":                                                                            "projects/demo-project/global/instanceTemplates/t",
		"projects/p1/regions/us-central1/instanceTemplates/t":                          "projects/p1/regions/us-central1/instanceTemplates/t",
		"regions/us-east1/instanceTemplates/t":                                         "projects/demo-project/regions/us-east1/instanceTemplates/t",
	}
	for in, want := range cases {
		ref, err := parseTemplateURL(in, "demo-project")
		if err != nil || ref.url() != want {
			t.Errorf("parseTemplateURL(%q) = %q, %v; want %q", in, ref.url(), err, want)
		}
	}
}

func TestParseImage(t *testing.T) {
	c := validConfig()
	cases := map[string]imageRef{
		"podvm-t4":                           {project: "demo-project", name: "podvm-t4"},
		"projects/img-proj/global/images/x":  {project: "img-proj", name: "x"},
		"/projects/img-proj/global/images/x": {project: "img-proj", name: "x"},
		"https://www.googleapis.com/compute/v1/projects/img-proj/global/images/family/podvm": {project: "img-proj", family: "podvm"},
		"global/images/family/podvm": {project: "demo-project", family: "podvm"},
	}
	for in, want := range cases {
		got, err := c.parseImage(in)
		if err != nil || got != want {
			t.Errorf("parseImage(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}

func TestFlagsFromEnvAndCommandLine(t *testing.T) {
	t.Setenv("GCP_PROJECT_ID", "env-project")
	t.Setenv("GCP_ZONE", "us-central1-a")
	t.Setenv("GCP_ZONES", "us-central1-b, us-central1-f")
	t.Setenv("GCP_LABELS", "team=ml,env=prod")
	t.Setenv("GCP_PROVISIONING_MODEL", "SPOT")
	var m Manager
	fs := flag.NewFlagSet("caa", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse([]string{"-zone", "us-central1-f", "-image-name", "podvm-t4"}); err != nil {
		t.Fatal(err)
	}
	c := m.GetConfig()
	if c.ProjectID != "env-project" || c.Zone != "us-central1-f" || c.ImageName != "podvm-t4" {
		t.Fatalf("env or flag lost: %+v", c)
	}
	if got := strings.Join(c.Zones(), ","); got != "us-central1-f,us-central1-b" {
		t.Fatalf("Zones() = %s, want the primary first and no duplicates", got)
	}
	if c.Labels["team"] != "ml" || c.Labels["env"] != "prod" || c.ProvisioningModel != setting.ProvisioningSpot {
		t.Fatalf("labels/model from env: %+v", c)
	}
	if c.DiskType != "pd-balanced" || c.RootVolumeSize != 50 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestRegisteredUnderProviderName(t *testing.T) {
	if _, ok := provider.Get(ProviderName).(*Manager); !ok {
		t.Fatalf("provider.Get(%q) is not the gcpt4 Manager", ProviderName)
	}
}
