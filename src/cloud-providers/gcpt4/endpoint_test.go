// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"

	"google.golang.org/api/option"
)

// TestParseEndpoint: GCP_ENDPOINT is a URL with scheme http or https (any
// case), a host, and nothing that could carry or redirect credentials;
// credentials go only to https hosts under googleapis.com.
func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct {
		raw, canonical string
		credentials    bool
	}{
		{"", "", true},
		{"https://compute.googleapis.com", "https://compute.googleapis.com", true},
		{"https://compute.googleapis.com/", "https://compute.googleapis.com", true},
		{"HTTPS://Compute.GoogleAPIs.com", "https://compute.googleapis.com", true},
		{"https://compute-vialink1.p.googleapis.com", "https://compute-vialink1.p.googleapis.com", true},
		{"https://compute.us-central1.rep.googleapis.com", "https://compute.us-central1.rep.googleapis.com", true},
		{"https://restricted.googleapis.com:443", "https://restricted.googleapis.com:443", true},
		{"https://compute.googleapis.com./", "https://compute.googleapis.com.", true},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", false},
		{"HTTP://127.0.0.1:8080/", "http://127.0.0.1:8080", false},
		{"http://compute.googleapis.com", "http://compute.googleapis.com", false},
		{"https://evil.example.com", "https://evil.example.com", false},
		{"https://evilgoogleapis.com", "https://evilgoogleapis.com", false},
		{"https://compute.googleapis.com.evil.example.com", "https://compute.googleapis.com.evil.example.com", false},
		{"https://10.0.0.5", "https://10.0.0.5", false},
	} {
		got, creds, err := ParseEndpoint("GCP_ENDPOINT", c.raw)
		if err != nil || got != c.canonical || creds != c.credentials {
			t.Errorf("ParseEndpoint(%q) = %q, %v, %v; want %q, %v", c.raw, got, creds, err, c.canonical, c.credentials)
		}
	}
	for _, raw := range []string{
		"ftp://x", "evil.example.com", "evil.example.com:443", "//compute.googleapis.com", "https://",
		"https:compute.googleapis.com", "https://user:pw@compute.googleapis.com", "https://compute.googleapis.com?x=1",
		"https://compute.googleapis.com?", "https://compute.googleapis.com#frag", "https://compute.googleapis.com#",
		"http://[::1", "file:///etc/passwd",
	} {
		_, creds, err := ParseEndpoint("GCP_ENDPOINT", raw)
		if err == nil || creds || !strings.HasPrefix(err.Error(), "GCP_ENDPOINT: ") || !strings.Contains(err.Error(), "googleapis.com") {
			t.Errorf("ParseEndpoint(%q) = creds %v, err %v; want a refusal naming GCP_ENDPOINT and the fix", raw, creds, err)
		}
	}
}

// TestValidateRefusesABadEndpoint: Config.Validate, which CAA's start,
// gcp-t4 install, plan and preflight all run, refuses what ParseEndpoint
// refuses.
func TestValidateRefusesABadEndpoint(t *testing.T) {
	for _, raw := range []string{"ftp://x", "evil.example.com", "HTTP://127.0.0.1:1", "https://compute.googleapis.com"} {
		c := validConfig()
		c.Endpoint = raw
		err := c.Validate()
		_, _, want := ParseEndpoint("GCP_ENDPOINT", raw)
		if (err == nil) != (want == nil) || (err != nil && !strings.Contains(err.Error(), "GCP_ENDPOINT")) {
			t.Errorf("Validate with GCP_ENDPOINT=%q: %v; want %v", raw, err, want)
		}
	}
}

// TestClientOptionsSendCredentialsOnlyToGoogle: the options the clients
// are made with carry WithoutAuthentication, and no credentials option,
// exactly where the endpoint is not Google's (or is refused).
func TestClientOptionsSendCredentialsOnlyToGoogle(t *testing.T) {
	key := string(serviceAccountKey(t))
	unauth := option.WithoutAuthentication()
	for _, c := range []struct {
		endpoint string
		auth     bool
	}{
		{"", true}, {"https://compute.googleapis.com", true}, {"https://compute-x.p.googleapis.com", true},
		{"http://127.0.0.1:1", false}, {"HTTP://127.0.0.1:1", false}, {"https://evil.example.com", false}, {"ftp://x", false},
	} {
		cfg := Config{Endpoint: c.endpoint, Credentials: key}
		opts := cfg.clientOptions()
		without := false
		for _, o := range opts {
			without = without || o == unauth
		}
		wantLen := 1 // the credentials option
		if c.endpoint != "" {
			wantLen = 2 // and the endpoint
		}
		if without == c.auth || len(opts) != wantLen {
			t.Errorf("GCP_ENDPOINT=%q: %d options, WithoutAuthentication %v; want credentials %v", c.endpoint, len(opts), without, c.auth)
		}
	}
}
