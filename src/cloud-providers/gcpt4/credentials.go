// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"strings"

	"google.golang.org/api/option"
)

// Credential file types the provider accepts: a service account key, or a
// Workload Identity Federation credential configuration. Anything else
// (an authorized_user file from `gcloud auth application-default login`, an
// impersonated_service_account file) is a person's login or needs a second
// identity, and is refused.
const (
	CredentialServiceAccount  = "service_account"
	CredentialExternalAccount = "external_account"
)

// CredentialInfo says who a credential file authenticates as, for logs
// and install's settings diff; it never holds key material.
type CredentialInfo struct {
	Type string
	// Identity is the service account's client_email, or the federated
	// configuration's audience (and the account it impersonates).
	Identity string
	// KeyID is a service account key's private_key_id.
	KeyID string
}

func (i CredentialInfo) String() string {
	switch i.Type {
	case CredentialServiceAccount:
		return fmt.Sprintf("service account key for %s (key id %s)", i.Identity, i.KeyID)
	case CredentialExternalAccount:
		return "Workload Identity Federation, " + i.Identity
	}
	return i.Type
}

type credentialFile struct {
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

// CheckCredentials checks a credential file as the provider will use it:
// a service account key whose private key parses, or an external_account
// configuration with its token exchange and token source. what names the
// setting in errors (GCP_CREDENTIALS, GOOGLE_APPLICATION_CREDENTIALS, a
// file). The shapes are Google's: service account keys
// (https://cloud.google.com/iam/docs/keys-create-delete) and credential
// configurations (https://google.aip.dev/auth/4117).
func CheckCredentials(what string, data []byte) (CredentialInfo, error) {
	var f credentialFile
	if err := json.Unmarshal(data, &f); err != nil {
		return CredentialInfo{}, fmt.Errorf("%s: not a JSON credential file (%v); give a service account key or a Workload Identity Federation configuration", what, err)
	}
	switch f.Type {
	case CredentialServiceAccount:
		if f.ClientEmail == "" {
			return CredentialInfo{}, fmt.Errorf("%s: service account key without client_email; download a new key with gcloud iam service-accounts keys create", what)
		}
		if err := checkPrivateKey(f.PrivateKey); err != nil {
			return CredentialInfo{}, fmt.Errorf("%s: service account key for %s: %w; download a new key with gcloud iam service-accounts keys create", what, f.ClientEmail, err)
		}
		if f.TokenURI != "" {
			if u, err := url.Parse(f.TokenURI); err != nil || u.Scheme != "https" {
				return CredentialInfo{}, fmt.Errorf("%s: token_uri %q is not an https URL", what, f.TokenURI)
			}
		}
		return CredentialInfo{Type: f.Type, Identity: f.ClientEmail, KeyID: f.PrivateKeyID}, nil
	case CredentialExternalAccount:
		if !strings.HasPrefix(f.Audience, "//iam.googleapis.com/") {
			return CredentialInfo{}, fmt.Errorf("%s: external_account audience %q, want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER", what, f.Audience)
		}
		if f.SubjectTokenType == "" || f.TokenURL == "" {
			return CredentialInfo{}, fmt.Errorf("%s: external_account without subject_token_type or token_url; recreate it with gcloud iam workload-identity-pools create-cred-config", what)
		}
		if u, err := url.Parse(f.TokenURL); err != nil || u.Scheme != "https" {
			return CredentialInfo{}, fmt.Errorf("%s: token_url %q is not an https URL", what, f.TokenURL)
		}
		cs := f.CredentialSource
		if cs == nil || (cs.File == "" && cs.URL == "" && len(cs.Executable) == 0 && cs.EnvironmentID == "") {
			return CredentialInfo{}, fmt.Errorf("%s: external_account without a credential_source; recreate it with --credential-source-file", what)
		}
		id := "audience " + f.Audience
		if f.Impersonation != "" {
			id += ", impersonating " + lastSegment(strings.TrimSuffix(f.Impersonation, ":generateAccessToken"))
		}
		return CredentialInfo{Type: f.Type, Identity: id}, nil
	case "":
		return CredentialInfo{}, fmt.Errorf("%s: no \"type\" field; give a service account key (type service_account) or a Workload Identity Federation configuration (type external_account)", what)
	}
	return CredentialInfo{}, fmt.Errorf("%s: type %q is not allowed; give a service account key (type service_account) or a Workload Identity Federation configuration (type external_account)", what, f.Type)
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

// credentialType is the option type for GCP_CREDENTIALS's content.
func credentialType(data string) option.CredentialsType {
	var f struct {
		Type string `json:"type"`
	}
	if json.Unmarshal([]byte(data), &f) == nil && f.Type == CredentialExternalAccount {
		return option.ExternalAccount
	}
	return option.ServiceAccount
}

// checkStartCredentials is what NewProvider refuses to start with:
// GCP_CREDENTIALS that CheckCredentials rejects, or a
// GOOGLE_APPLICATION_CREDENTIALS file (Application Default Credentials)
// that is missing, of another type, or whose token file is missing.
func (c *Config) checkStartCredentials(lookup func(string) (string, bool)) (CredentialInfo, error) {
	if c.Credentials != "" {
		return CheckCredentials("GCP_CREDENTIALS", []byte(c.Credentials))
	}
	path, ok := lookup("GOOGLE_APPLICATION_CREDENTIALS")
	if !ok || path == "" {
		return CredentialInfo{Type: "application default credentials"}, nil
	}
	what := "GOOGLE_APPLICATION_CREDENTIALS " + path
	data, err := os.ReadFile(path)
	if err != nil {
		return CredentialInfo{}, fmt.Errorf("%s: %w; mount the credential configuration there, or unset the variable", what, err)
	}
	info, err := CheckCredentials(what, data)
	if err != nil {
		return CredentialInfo{}, err
	}
	var f credentialFile
	_ = json.Unmarshal(data, &f)
	if cs := f.CredentialSource; info.Type == CredentialExternalAccount && cs != nil && cs.File != "" {
		if _, err := os.Stat(cs.File); err != nil {
			return CredentialInfo{}, fmt.Errorf("%s: credential_source.file: %w; mount a projected ServiceAccount token for audience %s there", what, err, f.Audience)
		}
	}
	return info, nil
}

// CredentialsOption is the client option GCP_CREDENTIALS makes, of the
// type its JSON says; nil without GCP_CREDENTIALS (Application Default
// Credentials). Other Google API clients (preflight's) use it too.
func (c *Config) CredentialsOption() option.ClientOption {
	if c.Credentials == "" {
		return nil
	}
	return option.WithAuthCredentialsJSON(credentialType(c.Credentials), []byte(c.Credentials))
}
