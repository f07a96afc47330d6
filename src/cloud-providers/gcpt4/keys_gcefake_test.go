// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// TestStartRefusesWhatUpstreamWouldDefault is the adaptor's own path:
// upstream's registrar (the fork behaves as upstream's util.go at v0.22.0)
// turns the bad value into the default; NewProvider refuses it.
func TestStartRefusesWhatUpstreamWouldDefault(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	for k, v := range map[string]string{"GCP_PROJECT_ID": fake.Project(), "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4", "GCP_NETWORK": "default", "GCP_ENDPOINT": fake.URL()} {
		t.Setenv(k, v)
	}
	t.Setenv("GCP_SPOT_FALLBACK", "ture")
	t.Setenv("ROOT_VOLUME_SIZE", "abc")
	var m Manager
	fs := flag.NewFlagSet("caa", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if m.cfg.SpotFallback || m.cfg.RootVolumeSize != 50 {
		t.Fatalf("upstream's registrar should have defaulted silently: %+v", m.cfg)
	}
	_, err := m.NewProvider()
	if err == nil || !strings.Contains(err.Error(), "GCP_SPOT_FALLBACK") || !strings.Contains(err.Error(), "ROOT_VOLUME_SIZE") {
		t.Fatalf("NewProvider = %v, want GCP_SPOT_FALLBACK and ROOT_VOLUME_SIZE refused", err)
	}
	// A flag on the command line wins over the environment and is
	// already parsed strictly by the flag package.
	t.Setenv("GCP_SPOT_FALLBACK", "false")
	m = Manager{}
	fs = flag.NewFlagSet("caa", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse([]string{"-root-volume-size", "60"}); err != nil {
		t.Fatal(err)
	}
	p, err := m.NewProvider()
	if err != nil {
		t.Fatalf("NewProvider with the bad env overridden by a flag: %v", err)
	}
	_ = p.Teardown()
}

// TestConfigVerifierLogsItsOwnFailure: CAA v0.22.0 logs nothing when the
// verifier fails, so the provider's log line is the only trace.
func TestConfigVerifierLogsItsOwnFailure(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	var logs bytes.Buffer
	cfg := validConfig()
	cfg.ImageName = "no-such-image"
	p, err := NewProvider(context.Background(), cfg, log.New(&logs, "[adaptor/cloud/gcp-t4] ", log.Lmsgprefix), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Teardown() }()
	if err := p.ConfigVerifier(); err == nil {
		t.Fatal("want a failure")
	}
	if !strings.HasPrefix(logs.String(), "[adaptor/cloud/gcp-t4] ConfigVerifier failed") || !strings.Contains(logs.String(), "no-such-image") {
		t.Errorf("log = %s", logs.String())
	}
}

// TestUnreachableIsOnlyNoAnswer: a refused token exchange is not "the
// network is not up yet"; only a failure to reach anything is skipped.
func TestUnreachableIsOnlyNoAnswer(t *testing.T) {
	_, dialErr := http.Get("http://127.0.0.1:1/") // nothing listens on port 1
	if dialErr == nil {
		t.Skip("something listens on 127.0.0.1:1")
	}
	if !unreachable(dialErr) || !unreachable(fmt.Errorf("wrapped: %w", context.DeadlineExceeded)) {
		t.Errorf("a refused connection or a timeout is unreachable: %v", dialErr)
	}
	// An answer from the API, or anything that is not a failure to
	// connect (a refused token exchange), is not skipped.
	fake := gcefake.New()
	defer fake.Close()
	p, _ := newTestProviderOn(t, fake, func(c *Config) { c.ImageName = "absent" })
	_, apiErr := p.lookupImage(context.Background(), p.cfg.ImageName)
	if apiErr == nil || unreachable(apiErr) {
		t.Errorf("a 404 from the API is an answer: %v", apiErr)
	}
	tokenErr := errors.New("credentials: status code 400: invalid_grant")
	if unreachable(tokenErr) {
		t.Error("an answer is not unreachable")
	}
}

// TestEmptyGCPCredentialsUsesTheKeyFile is CAA's start as
// install/components/service-account-key sets it up: GCP_CREDENTIALS set
// but empty (env overriding the Secret's envFrom) and
// GOOGLE_APPLICATION_CREDENTIALS naming the mounted key. Upstream's
// registrar reads an empty variable as unset (FlagRegistrar.StringWithEnv
// in src/cloud-providers/util.go at CAA v0.22.0,
// 38d0fcf7c7b787cc7fb9831410a910b37bb3be09), so the provider passes no
// credentials option and its clients use Application Default Credentials,
// which read that file, as upstream's gcp provider does without
// GCP_CREDENTIALS (src/cloud-providers/gcp/provider.go at that commit).
// The start checks the file: a missing one (the Secret gone) stops it.
func TestEmptyGCPCredentialsUsesTheKeyFile(t *testing.T) {
	fake := gcefake.New()
	defer fake.Close()
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "key.json")
	if err := os.WriteFile(keyPath, serviceAccountKey(t), 0o400); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GCP_CREDENTIALS", "")
	start := func(adc string) (*Manager, *Provider, error) {
		t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", adc)
		var m Manager
		fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
		m.ParseCmd(fs)
		if err := fs.Parse([]string{"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
			"-image-name", "podvm-t4", "-network", "default"}); err != nil {
			t.Fatal(err)
		}
		p, err := m.Start(t.Context(), func() (ClusterAPI, error) { return ClusterAPI{}, errors.New("no cluster ID set: not asked") })
		if p != nil {
			t.Cleanup(func() { _ = p.Teardown() })
		}
		return &m, p, err
	}
	m, _, err := start(keyPath)
	if err != nil {
		t.Fatalf("start with GCP_CREDENTIALS empty and the key file: %v", err)
	}
	if c := m.GetConfig(); c.Credentials != "" || c.CredentialsOption() != nil {
		t.Errorf("GCP_CREDENTIALS empty gave credentials %q: the clients must use Application Default Credentials", c.Credentials)
	}
	info, err := m.GetConfig().checkStartCredentials(osLookup)
	if err != nil || info.Type != credential.ServiceAccount || info.Identity != "caa@demo-project.iam.gserviceaccount.com" {
		t.Errorf("credentials at start: %+v, %v; want the key file's service account", info, err)
	}
	if _, _, err := start(filepath.Join(dir, "gone", "key.json")); err == nil || !strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS "+filepath.Join(dir, "gone", "key.json")) {
		t.Errorf("start with the key file missing: %v, want a refusal naming GOOGLE_APPLICATION_CREDENTIALS", err)
	}
}
