package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
)

// TestDeadEndpointSaysUnreachable: with GCP_ENDPOINT on a port where
// nothing listens, the credentials check says the Compute API at that
// endpoint did not answer and how to start the offline emulator, not
// gcloud's login (nothing about the credentials is known then).
func TestDeadEndpointSaysUnreachable(t *testing.T) {
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_ENDPOINT", "GCP_CREDENTIALS", "KUBECONFIG", "GOOGLE_APPLICATION_CREDENTIALS"} {
		t.Setenv(v, "")
	}
	// A port that was free a moment ago: nothing listens there now.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"-gcp-endpoint", dead, "-gcp-project-id", "demo-project", "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-network", "default", "-subnetwork", "default", "-o", "json"}, &out, &errOut, quiet())
	text := out.String() + errOut.String()
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, text)
	}
	var got struct{ Results []Result }
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	r, ok := find(got.Results, "credentials")
	if !ok {
		t.Fatalf("no credentials check:\n%s", text)
	}
	for _, want := range []string{"unreachable", dead} {
		if !strings.Contains(r.Detail, want) {
			t.Errorf("credentials detail %q lacks %q", r.Detail, want)
		}
	}
	for _, want := range []string{"gcp-t4 emulator", dead, "-gcp-endpoint"} {
		if !strings.Contains(r.Fix, want) {
			t.Errorf("credentials fix %q lacks %q", r.Fix, want)
		}
	}
	if strings.Contains(text, "gcloud auth") {
		t.Errorf("a dead endpoint got gcloud's credentials advice:\n%s", text)
	}
}

// TestUnreachableGoogleSaysCheckTheNetwork: Google's own endpoint not
// answering is this machine's network, named with the endpoint; the
// emulator is only the offline alternative.
func TestUnreachableGoogleSaysCheckTheNetwork(t *testing.T) {
	fix := unreachableFix("")
	if !strings.Contains(fix, "https://compute.googleapis.com") || !strings.Contains(fix, "HTTPS_PROXY") || strings.Contains(fix, "gcloud auth") {
		t.Errorf("fix for Google's endpoint: %q", fix)
	}
}
