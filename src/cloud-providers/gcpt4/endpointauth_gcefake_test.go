// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// authRecorder is a server on 127.0.0.1 in front of the emulator that
// records the Authorization header of every request the provider sends.
type authRecorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	// seen is each request's method, path and Authorization header.
	seen []string
}

func newAuthRecorder(t *testing.T, fake *gcefake.Server) *authRecorder {
	t.Helper()
	target, err := url.Parse(fake.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	a := &authRecorder{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path+" Authorization="+r.Header.Get("Authorization"))
		a.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *authRecorder) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// keyWithLocalTokenURI is a service account key whose token_uri is a
// local TLS server, so no test depends on the network: wherever the Google
// client uses the key it first dials token_uri to exchange it for a token
// (the handshake then fails, as the server's certificate is not trusted,
// but the connection was made). dials counts those connections.
func keyWithLocalTokenURI(t *testing.T) (key []byte, dials func() int) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"local-token","token_type":"Bearer","expires_in":3600}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var k map[string]string
	if err := json.Unmarshal(serviceAccountKey(t), &k); err != nil {
		t.Fatal(err)
	}
	k["token_uri"] = srv.URL + "/token"
	key, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	return key, func() int { return int(n.Load()) }
}

// TestPlainHTTPEndpointGetsNoCredentialsInAnyCase: with a service account
// key in GCP_CREDENTIALS, a plain-HTTP GCP_ENDPOINT written in any letter
// case (HTTP://127.0.0.1:PORT reached the old case-sensitive check as
// "not http" and got a Bearer token signed with the key) receives
// requests without an Authorization header, through the real Google
// client, from start to ConfigVerifier's calls.
func TestPlainHTTPEndpointGetsNoCredentialsInAnyCase(t *testing.T) {
	fake := gcefake.New()
	defer fake.Close()
	key, dials := keyWithLocalTokenURI(t)
	t.Setenv("GCP_CREDENTIALS", string(key))
	for _, scheme := range []string{"HTTP", "Http", "http"} {
		rec := newAuthRecorder(t, fake)
		endpoint := scheme + strings.TrimPrefix(rec.srv.URL, "http")
		var m Manager
		fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
		m.ParseCmd(fs)
		if err := fs.Parse([]string{"-gcp-endpoint", endpoint, "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
			"-image-name", "podvm-t4", "-network", "default", "-cluster-id", kubeSystemUID}); err != nil {
			t.Fatal(err)
		}
		p, err := m.Start(t.Context(), func() (ClusterAPI, error) { return fakeKube(t, kubeSystemUID), nil })
		if err != nil {
			t.Fatalf("start on %s with a key: %v", endpoint, err)
		}
		if err := p.ConfigVerifier(); err != nil {
			t.Errorf("%s: ConfigVerifier on the emulator: %v", endpoint, err)
		}
		_ = p.Teardown()
		seen := rec.requests()
		if len(seen) == 0 {
			t.Errorf("%s: the provider sent no request; the check proves nothing", endpoint)
		}
		for _, r := range seen {
			if !strings.HasSuffix(r, " Authorization=") {
				t.Errorf("%s: credentials sent to a plain-HTTP endpoint: %s", endpoint, r)
			}
		}
	}
	if n := dials(); n != 0 {
		t.Errorf("the client dialled the key's token_uri %d times to get a token for a plain-HTTP endpoint; it must not use the key at all", n)
	}
}
