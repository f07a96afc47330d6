package preflight

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"google.golang.org/api/option"
)

// TestPreflightChecksGCPEndpointAsTheProvider: preflight accepts and
// refuses GCP_ENDPOINT as the provider does (gcpt4.ParseEndpoint, through
// Config.Validate): a plain-HTTP emulator in upper case runs every check
// against it, ftp://x and a bare host name fail the config check naming
// GCP_ENDPOINT; -resourcemanager-endpoint is checked the same way.
func TestPreflightChecksGCPEndpointAsTheProvider(t *testing.T) {
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_ENDPOINT", "GCP_CREDENTIALS", "KUBECONFIG", "GCP_PROVISIONING_MODEL", "GCP_SERVICE_ACCOUNT"} {
		t.Setenv(v, "")
	}
	ready := readyProject(t)
	run := func(endpoint string, extra ...string) (int, string) {
		var out, errOut bytes.Buffer
		args := append([]string{"-gcp-project-id", ready.Project(), "-zone", "us-central1-a", "-image-name", "podvm-t4", "-network", "default", "-subnetwork", "default", "-gcp-endpoint", endpoint}, extra...)
		code := Main(context.Background(), args, &out, &errOut, quiet())
		return code, out.String() + errOut.String()
	}
	upper := "HTTP" + strings.TrimPrefix(ready.URL(), "http")
	if code, out := run(upper); code != 0 || !strings.Contains(out, "0 failed") {
		t.Errorf("GCP_ENDPOINT=%s: exit %d\n%s", upper, code, out)
	}
	for _, bad := range []string{"ftp://x", "evil.example.com"} {
		if code, out := run(bad); code != 1 || !strings.Contains(out, "GCP_ENDPOINT: ") {
			t.Errorf("GCP_ENDPOINT=%s: exit %d, want 1 with the config check naming GCP_ENDPOINT\n%s", bad, code, out)
		}
	}
	if code, out := run(ready.URL(), "-resourcemanager-endpoint", "ftp://x"); code != 2 || !strings.Contains(out, "-resourcemanager-endpoint: ") {
		t.Errorf("-resourcemanager-endpoint ftp://x: exit %d, want 2\n%s", code, out)
	}
}

// TestCRMOptionsFollowTheProvidersRule: Resource Manager gets credentials
// exactly where the provider's clients do: not on an emulator named in any
// letter case, nor on an https host that is not Google's.
func TestCRMOptionsFollowTheProvidersRule(t *testing.T) {
	key := `{"type":"service_account","client_email":"caa@p.iam.gserviceaccount.com"}`
	unauth := option.WithoutAuthentication()
	for _, c := range []struct {
		gcpEndpoint, crmEndpoint string
		auth                     bool
	}{
		{"", "", true},
		{"HTTP://127.0.0.1:1", "", false},
		{"", "HTTP://127.0.0.1:1", false},
		{"", "https://evil.example.com", false},
		{"https://compute-x.p.googleapis.com", "", true},
		{"", "https://cloudresourcemanager-x.p.googleapis.com", true},
	} {
		opts := crmOptions(gcpt4.Config{Endpoint: c.gcpEndpoint, Credentials: key}, c.crmEndpoint)
		without := false
		for _, o := range opts {
			without = without || o == unauth
		}
		if without == c.auth {
			t.Errorf("GCP_ENDPOINT=%q -resourcemanager-endpoint=%q: WithoutAuthentication %v, want credentials %v", c.gcpEndpoint, c.crmEndpoint, without, c.auth)
		}
	}
}
