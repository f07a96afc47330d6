// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"flag"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// A plain-HTTP endpoint (a local emulator) with a key in GCP_CREDENTIALS
// must start and create: the Google client refuses WithoutAuthentication
// next to any credentials option, so the key is not sent there at all.
func TestPlainHTTPEndpointWithAKeyStarts(t *testing.T) {
	fake := gcefake.New()
	defer fake.Close()
	t.Setenv("GCP_CREDENTIALS", string(serviceAccountKey(t)))
	var m Manager
	fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse([]string{"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-network", "default", "-cluster-id", kubeSystemUID}); err != nil {
		t.Fatal(err)
	}
	p, err := m.Start(t.Context(), func() (ClusterAPI, error) { return fakeKube(t, kubeSystemUID), nil })
	if err != nil {
		t.Fatalf("start on %s with a key: %v", fake.URL(), err)
	}
	defer func() { _ = p.Teardown() }()
	if err := p.ConfigVerifier(); err != nil {
		t.Errorf("ConfigVerifier on the emulator with a key: %v", err)
	}
}
