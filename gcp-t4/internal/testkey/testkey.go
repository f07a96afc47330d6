// Package testkey makes service account keys for tests, shaped as
// `gcloud iam service-accounts keys create` writes them, with an RSA key
// made on the spot. Only tests import it; no binary links it.
package testkey

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
)

// ServiceAccount is a key for email (NAME@PROJECT.iam.gserviceaccount.com,
// whose PROJECT becomes project_id) with private_key_id keyID.
func ServiceAccount(email, keyID string) ([]byte, error) {
	_, domain, ok := strings.Cut(email, "@")
	project, isSA := strings.CutSuffix(domain, ".iam.gserviceaccount.com")
	if !ok || !isSA || project == "" {
		return nil, fmt.Errorf("testkey: %q is not NAME@PROJECT.iam.gserviceaccount.com", email)
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("testkey: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("testkey: %w", err)
	}
	return json.Marshal(map[string]string{
		"type": "service_account", "project_id": project, "private_key_id": keyID,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "client_id": "1",
		"auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": "https://oauth2.googleapis.com/token",
	})
}
