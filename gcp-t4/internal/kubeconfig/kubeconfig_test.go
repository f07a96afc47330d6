package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const twoContexts = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://127.0.0.1:6443"}
- name: b
  cluster: {server: "https://127.0.0.2:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`

func TestLoadFileAndContext(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(twoContexts), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, "", "gcp-t4-test")
	if err != nil || cfg.Host != "https://127.0.0.1:6443" || cfg.UserAgent != "gcp-t4-test" {
		t.Fatalf("current context: %+v, %v", cfg, err)
	}
	cfg, err = Load(path, "ctx-b", "x")
	if err != nil || cfg.Host != "https://127.0.0.2:6443" {
		t.Fatalf("ctx-b: %+v, %v", cfg, err)
	}
}

func TestLoadMissingFileSaysWhatToDo(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := Load(filepath.Join(t.TempDir(), "none"), "", "x")
	if err == nil || !strings.Contains(err.Error(), "pass -kubeconfig") {
		t.Fatalf("want an error naming the fix, got %v", err)
	}
}

// TestLoadNothingSaysWhatToDo: no file, no KUBECONFIG, no cluster: the
// message says what was looked for and the fix, not client-go's advice to
// set KUBERNETES_MASTER, which nothing of ours reads.
func TestLoadNothingSaysWhatToDo(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	_, err := Load("", "", "x")
	if err == nil || strings.Contains(err.Error(), "KUBERNETES_MASTER") || !strings.Contains(err.Error(), "pass -kubeconfig FILE or set KUBECONFIG") || !strings.Contains(err.Error(), "gcp-t4 emulator") {
		t.Fatalf("want an error naming what was looked for and the fix, got %v", err)
	}
}

// TestNamespaceIsTheContexts: a command without -n acts in the context's
// namespace, as kubectl does, and in "default" when the context names none.
func TestNamespaceIsTheContexts(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	path := filepath.Join(t.TempDir(), "config")
	withNS := strings.Replace(twoContexts, "context: {cluster: b, user: u}", "context: {cluster: b, user: u, namespace: ml}", 1)
	if err := os.WriteFile(path, []byte(withNS), 0o600); err != nil {
		t.Fatal(err)
	}
	if ns, err := Namespace(path, ""); err != nil || ns != "default" {
		t.Errorf("ctx-a: %q, %v; want default", ns, err)
	}
	if ns, err := Namespace(path, "ctx-b"); err != nil || ns != "ml" {
		t.Errorf("ctx-b: %q, %v; want ml", ns, err)
	}
}
