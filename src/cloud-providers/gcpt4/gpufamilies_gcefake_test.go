// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"log"
	"strings"
	"testing"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// verifyLogged runs ConfigVerifier on the emulator's default project with
// cfg changed by mutate, and returns what it logged and its error.
func verifyLogged(t *testing.T, fake *gcefake.Server, mutate func(*Config)) (string, error) {
	t.Helper()
	cfg := validConfig()
	cfg.Subnetwork = "default"
	cfg.UnavailableTTL = time.Minute
	mutate(&cfg)
	var buf bytes.Buffer
	p, err := NewProvider(context.Background(), cfg, log.New(&buf, "", 0), fake.ClientOptions()...)
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	t.Cleanup(func() { _ = p.Teardown() })
	err = p.ConfigVerifier()
	return buf.String(), err
}

// ConfigVerifier checks the zones of every GPU the configuration may
// create, bundled ones included: an automatic family's missing zone
// fails it, a named-only family's is logged.
func TestConfigVerifierChecksBundledGPUZones(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	addTDXImage(fake, "podvm-tdx", "UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")
	// The emulator, like GCE, has no H100 in us-central1-b.
	logged, err := verifyLogged(t, fake, func(c *Config) {
		c.FallbackZones = commaList{"us-central1-b"}
		c.ProfileImages = provider.KeyValueFlag{"h100-cc": "podvm-tdx"}
	})
	if err != nil {
		t.Fatalf("an explicit profile's missing zone must not fail the verifier: %v", err)
	}
	if !strings.Contains(logged, "nvidia-h100-80gb (profile h100-cc)") || !strings.Contains(logged, "zone us-central1-b has no nvidia-h100-80gb") {
		t.Fatalf("the H100's missing zone is not reported:\n%s", logged)
	}
	if n := fake.CountCalls("acceleratorTypes.get"); n < 4 {
		t.Errorf("acceleratorTypes.get calls = %d, want the T4 and the H100 in both zones", n)
	}
	// A bundled GPU fit may choose (the admin listed it) is held to every zone.
	_, err = verifyLogged(t, fake, func(c *Config) {
		c.FallbackZones = commaList{"us-central1-f"}
		c.InstanceTypes = commaList{"auto", "nvidia-l4"}
		c.MaxGPUsPerPod = 1
	})
	if err == nil || !strings.Contains(err.Error(), "zone us-central1-f has no nvidia-l4") {
		t.Fatalf("automatic L4 in a zone without it: %v", err)
	}
}
