package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what kube-apiserver needs to serve TLS and authenticate: a CA, a
// serving certificate for 127.0.0.1, a ServiceAccount signing key and a
// static admin token.
type pki struct {
	caPEM                   []byte
	caFile                  string
	servingCert, servingKey string
	saKey                   string
	tokenFile, token        string
	// The CA's own certificate and key, kept in memory only, to sign
	// client certificates (ClientCertificate) for a kubelet and for the
	// API server's calls to kubelets.
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	// kube-apiserver's client certificate for kubelets (logs, exec).
	kubeletClientCert, kubeletClientKey string
}

// writePKI generates fresh keys each start: nothing is shared between
// control planes, so one test's credentials never work against another's.
func writePKI(dir string) (pki, error) {
	var p pki
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("control plane: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "controlplane-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("control plane: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, fmt.Errorf("control plane: CA certificate: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.caCert, p.caKey = caCert, caKey

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("control plane: serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("control plane: serving certificate: %w", err)
	}
	srvKeyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return p, fmt.Errorf("control plane: serving key: %w", err)
	}
	// kube-apiserver verifies ServiceAccount tokens with RSA or ECDSA
	// keys; RSA is what a real cluster usually has.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return p, fmt.Errorf("control plane: service account key: %w", err)
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return p, fmt.Errorf("control plane: service account key: %w", err)
	}
	if p.token, err = randomToken(); err != nil {
		return p, fmt.Errorf("control plane: token: %w", err)
	}
	p.caFile = filepath.Join(dir, "ca.crt")
	p.servingCert = filepath.Join(dir, "apiserver.crt")
	p.servingKey = filepath.Join(dir, "apiserver.key")
	p.saKey = filepath.Join(dir, "sa.key")
	p.tokenFile = filepath.Join(dir, "tokens.csv")
	p.kubeletClientCert = filepath.Join(dir, "apiserver-kubelet-client.crt")
	p.kubeletClientKey = filepath.Join(dir, "apiserver-kubelet-client.key")
	// As kubeadm names it: a kubelet that authorises by webhook asks the
	// API server, which allows system:masters everything.
	kcCert, kcKey, err := signClient(p.caCert, p.caKey, "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return p, err
	}
	files := []struct {
		path string
		data []byte
	}{
		{p.caFile, p.caPEM},
		{p.servingCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})},
		{p.servingKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: srvKeyDER})},
		{p.saKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER})},
		// token,user,uid,"group1,group2"
		{p.tokenFile, []byte(p.token + `,admin,admin,"system:masters"` + "\n")},
		{p.kubeletClientCert, kcCert},
		{p.kubeletClientKey, kcKey},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return p, fmt.Errorf("control plane: write %s: %w", f.path, err)
		}
	}
	return p, nil
}

// signClient issues a client certificate for user in groups (the
// certificate's CN and O, as kube-apiserver's x509 authenticator reads
// them), valid as long as the CA.
func signClient(ca *x509.Certificate, caKey *ecdsa.PrivateKey, user string, groups []string) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = issue(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("control plane: client certificate for %s: %w", user, err)
	}
	return certPEM, keyPEM, nil
}

// ServingCert issues a serving certificate for a server the API server
// calls (an admission webhook), signed by the control plane's CA, whose
// PEM is the file CAFile names: the caBundle to give the API server.
func (cp *ControlPlane) ServingCert(cn string, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = issue(cp.pki.caCert, cp.pki.caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("control plane: serving certificate for %s: %w", cn, err)
	}
	return certPEM, keyPEM, nil
}

// issue signs tmpl (its names and usage) with a fresh key, a random
// serial and the CA's validity.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)); err != nil {
		return nil, nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter, tmpl.KeyUsage = ca.NotBefore, ca.NotAfter, x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
