// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"flag"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// parseEnv parses the provider's flags with only these variables set, as
// CAA does from peer-pods-cm.
func parseEnv(t *testing.T, env map[string]string) *Config {
	t.Helper()
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_DISK_TYPE",
		"ROOT_VOLUME_SIZE", "GCP_INSTANCE_TYPES", "GCP_PROVISIONING_MODEL", "GCP_NIC_TYPE", "GCP_PROFILE_IMAGES", "GCP_MACHINE_TYPE", "DISABLECVM"} {
		t.Setenv(v, env[v])
	}
	var m Manager
	fs := flag.NewFlagSet("caa", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return m.GetConfig()
}

// The accepted forms of each key whose parsing differs from upstream's
// gcp provider at v0.22.0 (src/cloud-providers/gcp/manager.go and
// provider.go at commit 38d0fcf7c7b787cc7fb9831410a910b37bb3be09), each as
// docs/provider.md's "Settings compared with upstream's gcp" states it.
func TestEnvFormsAgainstUpstream(t *testing.T) {
	base := map[string]string{"GCP_PROJECT_ID": "svc-project", "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4", "GCP_NETWORK": "default"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	// GCP_INSTANCE_TYPES: upstream splits on "," and keeps spaces; here
	// each entry is trimmed, so "t4-1, t4-2" allows t4-2.
	c := parseEnv(t, with("GCP_INSTANCE_TYPES", "t4-1, t4-2"))
	if strings.Join(c.InstanceTypes, "|") != "t4-1|t4-2" {
		t.Errorf("GCP_INSTANCE_TYPES = %q", c.InstanceTypes)
	}

	// ROOT_VOLUME_SIZE: GiB as a plain integer (upstream's IntWithEnv reads
	// a leading integer, so "100Gi" is 100 to the registrar, and refused at
	// start: rootvolume_test.go). The
	// default is 50 (upstream 10), and below 10 is refused (GCE's minimum
	// boot disk).
	c = parseEnv(t, with("ROOT_VOLUME_SIZE", "100"))
	if c.RootVolumeSize != 100 {
		t.Errorf("ROOT_VOLUME_SIZE 100 = %d", c.RootVolumeSize)
	}
	if c = parseEnv(t, base); c.RootVolumeSize != 50 || c.DiskType != "pd-balanced" {
		t.Errorf("defaults: ROOT_VOLUME_SIZE %d GCP_DISK_TYPE %s", c.RootVolumeSize, c.DiskType)
	}

	// GCP_NETWORK: upstream sends it as given; a bare name is expanded.
	if got := parseEnv(t, base).NetworkURL(); got != "global/networks/default" {
		t.Errorf("bare GCP_NETWORK = %s", got)
	}

	// GCP_SUBNETWORK: upstream expands a bare name into GCP_PROJECT_ID and
	// GCP_ZONE's region; here into each zone's region, and into the Shared
	// VPC host project when GCP_NETWORK names one.
	c = parseEnv(t, with("GCP_SUBNETWORK", "podvms", "GCP_NETWORK", "projects/host-project/global/networks/shared", "GCP_ZONES", "us-east1-c"))
	if got := c.subnetworkURL("us-east1-c"); got != "projects/host-project/regions/us-east1/subnetworks/podvms" {
		t.Errorf("Shared VPC bare subnetwork = %s", got)
	}
	if got := c.subnetworkURL("us-central1-a"); got != "projects/host-project/regions/us-central1/subnetworks/podvms" {
		t.Errorf("Shared VPC bare subnetwork, primary zone = %s", got)
	}
	c = parseEnv(t, with("GCP_SUBNETWORK", "regions/us-central1/subnetworks/podvms"))
	if got := c.subnetworkURL("us-central1-a"); got != "regions/us-central1/subnetworks/podvms" {
		t.Errorf("partial-path subnetwork = %s", got)
	}

	// PODVM_IMAGE_NAME: upstream takes projects/…, /projects/… and https
	// URLs as given and makes anything else projects/P/global/images/NAME
	// (so global/images/x and image families break there); here all of
	// those and families resolve.
	for in, want := range map[string][3]string{
		"podvm-t4":                            {"svc-project", "podvm-t4", ""},
		"global/images/podvm-t4":              {"svc-project", "podvm-t4", ""},
		"/projects/img/global/images/podvm":   {"img", "podvm", ""},
		"projects/img/global/images/family/f": {"img", "", "f"},
	} {
		c = parseEnv(t, with("PODVM_IMAGE_NAME", in))
		p, n, f, err := c.ImageRef()
		if err != nil || [3]string{p, n, f} != want {
			t.Errorf("PODVM_IMAGE_NAME %q = %s %s %s %v, want %v", in, p, n, f, err, want)
		}
	}

	// Refused where upstream would send GCE something it rejects (or do
	// something other than asked), each naming the key.
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{with("GCP_DISK_TYPE", "zones/us-central1-a/diskTypes/pd-ssd"), "GCP_DISK_TYPE"},
		{with("GCP_PROVISIONING_MODEL", "spot"), "GCP_PROVISIONING_MODEL"},
		{with("GCP_NIC_TYPE", "gvnic"), "GCP_NIC_TYPE"},
		{with("GCP_PROFILE_IMAGES", "h100-cc=projects/p/zones/z/disks/d"), "GCP_PROFILE_IMAGES: profile h100-cc"},
		{with("ROOT_VOLUME_SIZE", "5"), "ROOT_VOLUME_SIZE"},
		{with("GCP_ZONE", "us-central1"), "GCP_ZONE"},
	} {
		bad := parseEnv(t, tc.env)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: Validate() = %v, want %q", tc.env, err, tc.want)
		}
	}

	// GCP_PROFILE_IMAGES and GCP_NIC_TYPE (keys upstream does not have).
	c = parseEnv(t, with("GCP_PROFILE_IMAGES", "h100-cc=projects/img/global/images/podvm-tdx", "GCP_NIC_TYPE", "GVNIC"))
	if c.ProfileImages["h100-cc"] != "projects/img/global/images/podvm-tdx" || c.NICType != setting.NICTypeGVNIC || c.Validate() != nil {
		t.Errorf("GCP_PROFILE_IMAGES/GCP_NIC_TYPE: %v %s %v", c.ProfileImages, c.NICType, c.Validate())
	}

	// Upstream's GCP_MACHINE_TYPE and DISABLECVM are not this provider's
	// keys: shapes come from profiles, confidential computing from a
	// profile's confidentialType.
	c = parseEnv(t, with("GCP_MACHINE_TYPE", "n2-standard-8", "DISABLECVM", "false"))
	sel, err := c.selectShape(mustCatalog(t, "", ""), oneT4)
	if err != nil || sel.FirstChoice().Profile.MachineType != "n1-standard-4" || sel.FirstChoice().Profile.ConfidentialType != "" {
		t.Errorf("upstream-only keys changed the selection: %v %v", sel, err)
	}
}
