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
	"strings"
	"testing"

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
