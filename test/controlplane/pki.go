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
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return p, fmt.Errorf("control plane: write %s: %w", f.path, err)
		}
	}
	return p, nil
}
