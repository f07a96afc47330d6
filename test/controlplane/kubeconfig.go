package controlplane

import (
	"encoding/base64"
	"fmt"
	"os"
)

// writeKubeconfig writes a one-context kubeconfig; written by hand so this
// module needs nothing beyond client-go's rest package.
func writeKubeconfig(path, url string, caPEM []byte, token string) error {
	return writeKubeconfigUser(path, url, caPEM, "    token: "+token+"\n")
}

func writeKubeconfigUser(path, url string, caPEM []byte, user string) error {
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
%scontexts:
- name: controlplane
  context:
    cluster: controlplane
    user: admin
current-context: controlplane
`, url, base64.StdEncoding.EncodeToString(caPEM), user)
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

// WriteCertKubeconfig writes a kubeconfig for this API server that logs in
// with a client certificate signed by its CA for user in groups: a kubelet's
// (user system:node:NAME, group system:nodes), which the Node authorizer and
// NodeRestriction judge as they would a real node's.
func (cp *ControlPlane) WriteCertKubeconfig(path, user string, groups ...string) error {
	certPEM, keyPEM, err := signClient(cp.pki.caCert, cp.pki.caKey, user, groups)
	if err != nil {
		return err
	}
	enc := base64.StdEncoding.EncodeToString
	return writeKubeconfigUser(path, cp.URL, cp.caPEM,
		"    client-certificate-data: "+enc(certPEM)+"\n    client-key-data: "+enc(keyPEM)+"\n")
}

// CAFile is the path of the CA certificate that signed the API server's
// serving certificate and verifies client certificates (a kubelet's
// authentication.x509.clientCAFile).
func (cp *ControlPlane) CAFile() string { return cp.caFile }
