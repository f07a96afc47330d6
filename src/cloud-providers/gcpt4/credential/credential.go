// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package credential checks a Google credential file as the gcpt4 provider
// will use it, and says whom it authenticates as without holding key
// material. It is a leaf beside the provider: install, preflight and the
// reaper check a file before it reaches a Secret, and the provider before
// it starts, with the same rules. Standard library only; it does not
// import gcpt4.
package credential

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"
)

// Credential file types the provider accepts: a service account key, or a
// Workload Identity Federation credential configuration. Anything else
// (an authorized_user file from `gcloud auth application-default login`, an
// impersonated_service_account file) is a person's login or needs a second
// identity, and is refused.
const (
	ServiceAccount  = "service_account"
	ExternalAccount = "external_account"
)

// Info says who a credential file authenticates as, for logs
// and install's settings diff; it never holds key material.
type Info struct {
	Type string
	// Identity is the service account's client_email, or the federated
	// configuration's audience (and the account it impersonates).
	Identity string
	// KeyID is a service account key's private_key_id.
	KeyID string
}

// String says who the file authenticates as, in words for a log line.
func (i Info) String() string {
	switch i.Type {
	case ServiceAccount:
		return fmt.Sprintf("service account key for %s (key id %s)", i.Identity, i.KeyID)
	case ExternalAccount:
		return "Workload Identity Federation, " + i.Identity
	}
	return i.Type
}

type file struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKey   string `json:"private_key"`
	PrivateKeyID string `json:"private_key_id"`
	TokenURI     string `json:"token_uri"`

	Audience         string `json:"audience"`
	SubjectTokenType string `json:"subject_token_type"`
	TokenURL         string `json:"token_url"`
	Impersonation    string `json:"service_account_impersonation_url"`
	CredentialSource *struct {
		File          string          `json:"file"`
		URL           string          `json:"url"`
		Executable    json.RawMessage `json:"executable"`
		EnvironmentID string          `json:"environment_id"`
	} `json:"credential_source"`
}

// Check checks a credential file as the provider will use it:
// a service account key whose private key parses, or an external_account
// configuration with its token exchange and token source. what names the
// setting in errors (GCP_CREDENTIALS, GOOGLE_APPLICATION_CREDENTIALS, a
// file). The shapes are Google's: service account keys
// (https://cloud.google.com/iam/docs/keys-create-delete) and credential
// configurations (https://google.aip.dev/auth/4117).
func Check(what string, data []byte) (Info, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return Info{}, fmt.Errorf("%s: not a JSON credential file (%v); give a service account key or a Workload Identity Federation configuration", what, err)
	}
	switch f.Type {
	case ServiceAccount:
		if f.ClientEmail == "" {
			return Info{}, fmt.Errorf("%s: service account key without client_email; download a new key with gcloud iam service-accounts keys create", what)
		}
		if err := checkPrivateKey(f.PrivateKey); err != nil {
			return Info{}, fmt.Errorf("%s: service account key for %s: %w; download a new key with gcloud iam service-accounts keys create", what, f.ClientEmail, err)
		}
		if f.TokenURI != "" {
			if u, err := url.Parse(f.TokenURI); err != nil || u.Scheme != "https" {
				return Info{}, fmt.Errorf("%s: token_uri %q is not an https URL", what, f.TokenURI)
			}
		}
		return Info{Type: f.Type, Identity: f.ClientEmail, KeyID: f.PrivateKeyID}, nil
	case ExternalAccount:
		if !strings.HasPrefix(f.Audience, "//iam.googleapis.com/") {
			return Info{}, fmt.Errorf("%s: external_account audience %q, want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER", what, f.Audience)
		}
		if f.SubjectTokenType == "" || f.TokenURL == "" {
			return Info{}, fmt.Errorf("%s: external_account without subject_token_type or token_url; recreate it with gcloud iam workload-identity-pools create-cred-config", what)
		}
		if u, err := url.Parse(f.TokenURL); err != nil || u.Scheme != "https" {
			return Info{}, fmt.Errorf("%s: token_url %q is not an https URL", what, f.TokenURL)
		}
		cs := f.CredentialSource
		if cs == nil || (cs.File == "" && cs.URL == "" && len(cs.Executable) == 0 && cs.EnvironmentID == "") {
			return Info{}, fmt.Errorf("%s: external_account without a credential_source; recreate it with --credential-source-file", what)
		}
		id := "audience " + f.Audience
		if f.Impersonation != "" {
			id += ", impersonating " + lastSegment(strings.TrimSuffix(f.Impersonation, ":generateAccessToken"))
		}
		return Info{Type: f.Type, Identity: id}, nil
	case "":
		return Info{}, fmt.Errorf("%s: no \"type\" field; give a service account key (type service_account) or a Workload Identity Federation configuration (type external_account)", what)
	}
	return Info{}, fmt.Errorf("%s: type %q is not allowed; give a service account key (type service_account) or a Workload Identity Federation configuration (type external_account)", what, f.Type)
}

// checkPrivateKey parses the PEM key as Google's libraries do (PKCS #8,
// or PKCS #1 RSA).
func checkPrivateKey(s string) error {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return fmt.Errorf("private_key is not a PEM block")
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return nil
	}
	return fmt.Errorf("private_key does not parse as an RSA key")
}

// TokenFile is the file an external_account configuration reads its
// subject token from, and the audience that token must carry; empty for
// any other file, or one whose token comes from elsewhere.
func TokenFile(data []byte) (path, audience string) {
	var f file
	if json.Unmarshal(data, &f) != nil || f.Type != ExternalAccount || f.CredentialSource == nil {
		return "", ""
	}
	return f.CredentialSource.File, f.Audience
}

// lastSegment is what follows a resource path's last slash.
func lastSegment(s string) string {
	return s[strings.LastIndex(s, "/")+1:]
}
