// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The start-time identity check. GCP_CLUSTER_ID is labelled on every podVM
// and is how each cluster's reaper tells its own VMs from another
// cluster's in the same project. A peer-pods-cm copied from cluster A into
// cluster B (a shared values file, a copied overlay) would make B's podVMs
// A's: A's reaper then finds VMs with its ID that none of its pods owns and
// deletes them while B's pods run on them. So the process that creates
// podVMs refuses to start unless the ID is its own cluster's: the UID of
// its kube-system namespace, read with the pod's own service account.
//
// It is a plain HTTPS GET and not client-go: client-go is pinned in
// upstream's src/cloud-providers/go.mod at v0.22.0 (k8s.io/client-go
// v0.35.2, for byom and ibmcloud), but this fork's module carries only the
// API-compatible subset, and one GET of one object needs no informers,
// codecs or kubeconfig loading. It reads what client-go's InClusterConfig
// reads (rest/config.go): KUBERNETES_SERVICE_HOST and _PORT, and the
// token and CA the kubelet mounts for the pod's ServiceAccount.

// serviceAccountDir is where the kubelet mounts a pod's ServiceAccount
// token and the cluster's CA (client-go's rest.InClusterConfig reads the
// same files).
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// clusterIDTimeout bounds the check: CAA calls NewProvider at start and
// must not hang there.
const clusterIDTimeout = 30 * time.Second

// ClusterAPI is the Kubernetes API the identity check asks: its URL, a
// bearer token and the CA that signed the server's certificate.
type ClusterAPI struct {
	// URL is https://HOST:PORT.
	URL string
	// Token is a bearer token (the pod's ServiceAccount token).
	Token string
	// CAPEM is the API server's CA bundle (PEM).
	CAPEM []byte
	// Namespace is the adaptor's own (the ServiceAccount mount's
	// namespace file), where the Event signing key lives; "" leaves the
	// provider's Events unsigned.
	Namespace string
}

// inClusterAPI is the API of the pod this process runs in, read from the
// environment and from the ServiceAccount files under dir (normally
// serviceAccountDir).
func inClusterAPI(lookup func(string) (string, bool), dir string) (ClusterAPI, error) {
	host, _ := lookup("KUBERNETES_SERVICE_HOST")
	port, _ := lookup("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ClusterAPI{}, fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT are not set: GCP_CLUSTER_ID is checked from inside its cluster; run in the cloud-api-adaptor DaemonSet")
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		return ClusterAPI{}, fmt.Errorf("reading the pod's ServiceAccount token (automountServiceAccountToken must not be false for cloud-api-adaptor): %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return ClusterAPI{}, fmt.Errorf("reading the cluster's CA from the pod's ServiceAccount mount: %w", err)
	}
	// The namespace file is in every ServiceAccount mount since
	// Kubernetes 1.x; without it the Events go unsigned, which the reaper
	// and status report, so its absence is not fatal here.
	ns, _ := os.ReadFile(filepath.Join(dir, "namespace"))
	return ClusterAPI{URL: "https://" + net.JoinHostPort(host, port), Token: strings.TrimSpace(string(token)), CAPEM: ca,
		Namespace: strings.TrimSpace(string(ns))}, nil
}

// kubeSystemNamespaceUID reads the UID of the kube-system namespace.
func (a ClusterAPI) kubeSystemNamespaceUID(ctx context.Context) (string, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.CAPEM) {
		return "", errors.New("the cluster's CA bundle holds no PEM certificate")
	}
	client := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(a.URL, "/")+"/api/v1/namespaces/kube-system", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("reading namespace kube-system: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading namespace kube-system: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return "", fmt.Errorf("reading namespace kube-system: %s: the adaptor's ServiceAccount needs RBAC get on namespaces/kube-system (install/base/rbac.yaml grants it): %s", resp.Status, apiMessage(body))
	default:
		return "", fmt.Errorf("reading namespace kube-system: %s: %s", resp.Status, apiMessage(body))
	}
	var ns struct {
		Metadata struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &ns); err != nil {
		return "", fmt.Errorf("reading namespace kube-system: %w", err)
	}
	if ns.Metadata.Name != "kube-system" || ns.Metadata.UID == "" {
		return "", fmt.Errorf("reading namespace kube-system: the answer names %q with UID %q", ns.Metadata.Name, ns.Metadata.UID)
	}
	return ns.Metadata.UID, nil
}

// apiMessage is the message of a Kubernetes Status body, or the body.
func apiMessage(body []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	return strings.TrimSpace(string(body))
}

// ErrForeignClusterID is checkClusterID's refusal of another cluster's ID.
var ErrForeignClusterID = errors.New("GCP_CLUSTER_ID is another cluster's")

// checkClusterID refuses an ID that is not the kube-system namespace's UID
// of the cluster api belongs to. An empty ID is not checked here: CAA and
// ConfigVerifier refuse it for creates, and peerpod-ctrl (which only
// deletes what its PeerPods name) needs none.
//
// Clusters restored from one etcd backup share kube-system's UID and
// cannot be told apart by it: each such clone must use its own GCE project
// for podVMs (docs/reaper.md, "Which cluster").
func checkClusterID(ctx context.Context, id string, api ClusterAPI) error {
	if id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, clusterIDTimeout)
	defer cancel()
	uid, err := api.kubeSystemNamespaceUID(ctx)
	if err != nil {
		return fmt.Errorf("cannot check GCP_CLUSTER_ID %s against this cluster, refusing to start: %w", id, err)
	}
	if uid != id {
		// Most likely peer-pods-cm was copied from another cluster, whose
		// reaper would delete this cluster's podVMs.
		return fmt.Errorf("%w: GCP_CLUSTER_ID %s is not this cluster's (kube-system UID %s); set GCP_CLUSTER_ID=%s in peer-pods-cm and restart the adaptor, or rerun gcp-t4 install",
			ErrForeignClusterID, id, uid, uid)
	}
	return nil
}
