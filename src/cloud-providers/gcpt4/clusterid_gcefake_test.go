// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

const kubeSystemUID = "9d0e8c4a-1b2f-4c3d-8e5f-6a7b8c9d0e1f"

// fakeKube serves what the identity check reads of a kube-apiserver: the
// kube-system namespace for the right token, 403 with a Status otherwise.
// The check itself is proved against a real kube-apiserver with real RBAC
// in gcp-t4/internal/gc (TestCopiedClusterIDRefusedAtStart).
func fakeKube(t *testing.T, uid string) ClusterAPI {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sa-token" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"namespaces \"kube-system\" is forbidden: User \"system:serviceaccount:x:y\" cannot get resource \"namespaces\"","reason":"Forbidden","code":403}`)
			return
		}
		if r.URL.Path != "/api/v1/namespaces/kube-system" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kube-system","uid":"`+uid+`"}}`)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return ClusterAPI{URL: srv.URL, Token: "sa-token", CAPEM: ca}
}

// otherCA is a CA that signed nothing the test servers present.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestCheckClusterID(t *testing.T) {
	api := fakeKube(t, kubeSystemUID)
	if err := checkClusterID(t.Context(), kubeSystemUID, api); err != nil {
		t.Fatalf("own ID refused: %v", err)
	}
	err := checkClusterID(t.Context(), "0a0a0a0a-copied", api)
	if !errors.Is(err, ErrForeignClusterID) {
		t.Fatalf("copied ID: %v, want ErrForeignClusterID", err)
	}
	for _, want := range []string{"GCP_CLUSTER_ID 0a0a0a0a-copied is not this cluster's", "set GCP_CLUSTER_ID=" + kubeSystemUID + " in peer-pods-cm", "restart the adaptor"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	bad := api
	bad.Token = "someone-else"
	if err := checkClusterID(t.Context(), kubeSystemUID, bad); err == nil || !strings.Contains(err.Error(), "needs RBAC get on namespaces/kube-system") || !strings.Contains(err.Error(), "is forbidden") {
		t.Errorf("forbidden: %v", err)
	}
	wrongCA := api
	wrongCA.CAPEM = otherCA(t)
	if err := checkClusterID(t.Context(), kubeSystemUID, wrongCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server the CA did not sign was trusted: %v", err)
	}
	if err := checkClusterID(t.Context(), "", ClusterAPI{}); err != nil {
		t.Errorf("empty ID (refused by ConfigVerifier and CreateInstance, not here): %v", err)
	}
}

func TestInClusterAPIReadsThePodsServiceAccount(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("ca"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	api, err := inClusterAPI(lookup, dir)
	if err != nil {
		t.Fatal(err)
	}
	if api.URL != "https://[fd00::1]:443" || api.Token != "tok" || string(api.CAPEM) != "ca" {
		t.Errorf("api = %+v", api)
	}
	if _, err := inClusterAPI(func(string) (string, bool) { return "", false }, dir); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("outside a pod: %v", err)
	}
	if _, err := inClusterAPI(lookup, t.TempDir()); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("no token mounted: %v", err)
	}
}

// startManager is CAA's start: ParseCmd on its flag set, then the
// Manager's NewProvider path with the cluster's API.
func startManager(t *testing.T, fake *gcefake.Server, clusterID string, api func() (ClusterAPI, error)) (*Provider, error) {
	t.Helper()
	var m Manager
	fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse([]string{"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-network", "default", "-cluster-id", clusterID}); err != nil {
		t.Fatal(err)
	}
	p, err := m.Start(t.Context(), api)
	if p != nil {
		t.Cleanup(func() { _ = p.Teardown() })
	}
	return p, err
}

func TestStartRefusesAForeignClusterID(t *testing.T) {
	fake := gcefake.New()
	defer fake.Close()
	api := fakeKube(t, kubeSystemUID)
	asked := 0
	cluster := func() (ClusterAPI, error) { asked++; return api, nil }
	if _, err := startManager(t, fake, "0a0a0a0a-copied", cluster); !errors.Is(err, ErrForeignClusterID) {
		t.Fatalf("start with a copied ID: %v, want ErrForeignClusterID", err)
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("the refused start made %d GCE calls", n)
	}
	p, err := startManager(t, fake, kubeSystemUID, cluster)
	if err != nil {
		t.Fatalf("start with the cluster's own ID: %v", err)
	}
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, caaCloudConfig("ml", "llm-0"), oneT4); err != nil {
		t.Fatalf("create after a verified start: %v", err)
	}
	if asked != 2 {
		t.Errorf("cluster API asked %d times, want once per start", asked)
	}
	// Outside a pod, with an ID: refused, not skipped.
	_, err = startManager(t, fake, kubeSystemUID, func() (ClusterAPI, error) {
		return inClusterAPI(func(string) (string, bool) { return "", false }, serviceAccountDir)
	})
	if err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST/PORT are not set") {
		t.Errorf("start outside a pod: %v", err)
	}
}

// TestNewProviderIsTheCheckedStart: the entry upstream CAA calls
// (cloud.NewProvider → Manager.NewProvider) runs the check; here, with no
// pod around it, it refuses.
func TestNewProviderIsTheCheckedStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	fake := gcefake.New()
	defer fake.Close()
	var m Manager
	fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse([]string{"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-cluster-id", kubeSystemUID}); err != nil {
		t.Fatal(err)
	}
	if p, err := m.NewProvider(); err == nil || p != nil || !strings.Contains(err.Error(), "cannot check GCP_CLUSTER_ID") {
		t.Fatalf("NewProvider outside a pod = %v, %v", p, err)
	}
}

func TestConfigVerifierRefusesAnEmptyClusterID(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.ClusterID = "" })
	err := p.ConfigVerifier()
	if err == nil || !strings.Contains(err.Error(), "GCP_CLUSTER_ID (-cluster-id) is not set") {
		t.Fatalf("ConfigVerifier with no cluster ID: %v", err)
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("%d GCE calls before refusing", n)
	}
}

// TestDeleteOfTheEmptyIDCallsNothing: CAA's StopVM after a failed StartVM
// deletes "" (its sandbox never got an instance ID).
func TestDeleteOfTheEmptyIDCallsNothing(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) {
		c.FallbackZones = commaList{"us-central1-b", "us-central1-c"}
		c.MutationsPerSecond = 0.001 // one token: a DELETE would use it
	})
	for _, id := range []string{"", "zones/us-central1-a/instances/"} {
		if err := p.DeleteInstance(t.Context(), id); err != nil {
			t.Fatalf("DeleteInstance(%q): %v", id, err)
		}
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("DeleteInstance(\"\") made %d GCE calls: %v", n, fake.Calls())
	}
	if tok := p.limiter.Tokens(); tok < 1 {
		t.Errorf("the rate limiter lost its token (%.2f left)", tok)
	}
}
