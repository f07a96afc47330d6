// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/api/option"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
)

// credentialType is the option type for GCP_CREDENTIALS's content.
func credentialType(data string) option.CredentialsType {
	var f struct {
		Type string `json:"type"`
	}
	if json.Unmarshal([]byte(data), &f) == nil && f.Type == credential.ExternalAccount {
		return option.ExternalAccount
	}
	return option.ServiceAccount
}

// checkStartCredentials is what NewProvider refuses to start with:
// GCP_CREDENTIALS that credential.Check rejects, or a
// GOOGLE_APPLICATION_CREDENTIALS file (Application Default Credentials)
// that is missing, of another type, or whose token file is missing.
func (c *Config) checkStartCredentials(lookup func(string) (string, bool)) (credential.Info, error) {
	if c.Credentials != "" {
		return credential.Check("GCP_CREDENTIALS", []byte(c.Credentials))
	}
	path, ok := lookup("GOOGLE_APPLICATION_CREDENTIALS")
	if !ok || path == "" {
		return credential.Info{Type: "application default credentials"}, nil
	}
	what := "GOOGLE_APPLICATION_CREDENTIALS " + path
	data, err := os.ReadFile(path)
	if err != nil {
		return credential.Info{}, fmt.Errorf("%s: %w; mount the credential configuration there, or unset the variable", what, err)
	}
	info, err := credential.Check(what, data)
	if err != nil {
		return credential.Info{}, err
	}
	if file, audience := credential.TokenFile(data); info.Type == credential.ExternalAccount && file != "" {
		if _, err := os.Stat(file); err != nil {
			return credential.Info{}, fmt.Errorf("%s: credential_source.file: %w; mount a projected ServiceAccount token for audience %s there", what, err, audience)
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
