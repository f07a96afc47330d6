package controlplane

import (
	"encoding/base64"
	"fmt"
	"os"
)

// writeKubeconfig writes a one-context kubeconfig; written by hand so this
// module needs nothing beyond client-go's rest package.
func writeKubeconfig(path, url string, caPEM []byte, token string) error {
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: controlplane
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: controlplane
  context:
    cluster: controlplane
    user: admin
current-context: controlplane
`, url, base64.StdEncoding.EncodeToString(caPEM), token)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		return fmt.Errorf("control plane: write kubeconfig: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("control plane: write kubeconfig: %w", err)
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for this API server that logs in with
// token instead of the admin's: a ServiceAccount's token from a
// TokenRequest, so a tool under test meets RBAC as it would in a pod.
func (cp *ControlPlane) WriteKubeconfig(path, token string) error {
	return writeKubeconfig(path, cp.URL, cp.caPEM, token)
}
