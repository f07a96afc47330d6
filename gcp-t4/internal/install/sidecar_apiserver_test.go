package install

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// runSidecarAs runs one `gcp-t4-node remediate --once` pass for node, logged in
// to the real API server with a token of the ServiceAccount sa (namespace
// ns), against a GKE-like containerd config under a scratch host root. The
// Node read and the Event go through the API server's authentication, RBAC
// (what install applied) and Event validation, none of which a fake client
// has. It returns the sidecar's stderr.
func (e *env) runSidecarAs(t *testing.T, ns, sa, node string) string {
	t.Helper()
	ctx := t.Context()
	exp := int64(600)
	tok, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := e.cp.WriteKubeconfig(kubeconfig, tok.Status.Token); err != nil {
		t.Fatal(err)
	}

	main, err := os.ReadFile(filepath.Join("..", "remediate", "testdata", "gke-v2.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "etc", "containerd", "config.toml")
	host := filepath.Join(dir, "host")
	h := remediate.DefaultHandler()
	for path, data := range map[string][]byte{
		conf:                               bytes.ReplaceAll(main, []byte("@TMP@"), []byte(dir)),
		filepath.Join(host, h.RuntimePath): []byte("#!/bin/sh\n"),
		filepath.Join(host, h.ConfigPath):  []byte("[runtime]\n"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	// The containerd version comes from the Node (no CRI socket), so a
	// refused Node read shows as a missing drop-in, not only in the log.
	remediate.Main(ctx, []string{
		"--once", "--kubeconfig=" + kubeconfig, "--node-name=" + node,
		"--config=" + conf, "--host-root=" + host, "--lock=", "--cri-socket=", "--restart=none", "--listen=",
	}, &stdout, &stderr, nil)
	t.Logf("sidecar as %s/%s:\n%s%s", ns, sa, stdout.String(), stderr.String())
	return stderr.String()
}

// nodeEvents lists the Events `kubectl describe node` shows for node.
func (e *env) nodeEvents(t *testing.T, node string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node}.AsSelector().String()
	l, err := e.cs.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// testSidecarIdentity: with the RBAC install applied, the sidecar's own
// ServiceAccount reads its Node and records its Event; a ServiceAccount
// without those grants does neither (so the first half is owed to the
// manifests, not to a permissive server).
func (e *env) testSidecarIdentity(t *testing.T, node string) {
	stderr := e.runSidecarAs(t, Namespace, "cloud-api-adaptor", node)
	for _, bad := range []string{"reading the node failed", "recording node event failed"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("sidecar with CAA's ServiceAccount logged %q", bad)
		}
	}
	var restored *corev1.Event
	for _, ev := range e.nodeEvents(t, node) {
		if ev.Reason == "KataRemoteConfigRestored" {
			restored = &ev
		}
	}
	if restored == nil {
		t.Fatalf("no KataRemoteConfigRestored Event for node %s on the API server", node)
	}
	if restored.Source.Component != "gcp-t4-remediate" || restored.Type != corev1.EventTypeNormal ||
		!strings.Contains(restored.Message, "config version 2") {
		t.Errorf("event: component %q, type %q, message %q", restored.Source.Component, restored.Type, restored.Message)
	}

	other := "gke-c-peer-2"
	if _, err := e.cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-grants"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Delete(context.Background(), "no-grants", metav1.DeleteOptions{})
	})
	stderr = e.runSidecarAs(t, metav1.NamespaceDefault, "no-grants", other)
	for _, want := range []string{"reading the node failed", "recording node event failed", "forbidden"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("sidecar without grants: stderr lacks %q", want)
		}
	}
	if evs := e.nodeEvents(t, other); len(evs) != 0 {
		t.Errorf("a ServiceAccount without grants recorded %d Events", len(evs))
	}
}
