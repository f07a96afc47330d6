// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// env is a lookup over a map, as install passes peer-pods-cm.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestKeysAreWhatParseCmdRegisters(t *testing.T) {
	var m Manager
	fs := flag.NewFlagSet("caa", flag.ContinueOnError)
	m.ParseCmd(fs)
	keys := Keys()
	if len(keys) == 0 {
		t.Fatal("no keys")
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n != len(keys) {
		t.Errorf("ParseCmd registers %d flags, Keys() lists %d", n, len(keys))
	}
	for _, k := range keys {
		f := fs.Lookup(k.Flag)
		if f == nil {
			t.Errorf("key %s: flag -%s not registered", k.Env, k.Flag)
			continue
		}
		if k.Kind != setting.KindCustom && f.DefValue != k.Default {
			t.Errorf("key %s: default %q, flag default %q", k.Env, k.Default, f.DefValue)
		}
		// NODE_NAME is the downward-API variable CAA itself reads
		// (pkg/adaptor/k8sops/node.go at v0.22.0, 38d0fcf7).
		if !strings.HasPrefix(k.Env, "GCP_") && k.Env != "PODVM_IMAGE_NAME" && k.Env != "ROOT_VOLUME_SIZE" && k.Env != "USE_PUBLIC_IP" && k.Env != "NODE_NAME" {
			t.Errorf("key %s: not a name CAA's other GCP settings use", k.Env)
		}
	}
}

func TestConfigFromEnvIsStrictAndNamesTheKey(t *testing.T) {
	base := []string{"GCP_PROJECT_ID", "demo-project", "GCP_ZONE", "us-central1-a", "PODVM_IMAGE_NAME", "podvm-t4", "GCP_NETWORK", "default"}
	bad := []struct{ key, val, want string }{
		{"ROOT_VOLUME_SIZE", "abc", `ROOT_VOLUME_SIZE (flag -root-volume-size): "abc" is not a whole number; give a whole number, e.g. ROOT_VOLUME_SIZE=50`},
		// Upstream's Sscanf("%d") would read 100; a unit is a mistake.
		{"ROOT_VOLUME_SIZE", "100Gi", `"100Gi" is not a whole number`},
		{"GCP_SPOT_FALLBACK", "ture", `GCP_SPOT_FALLBACK (flag -spot-fallback): "ture" is not a boolean; use true or false`},
		{"GCP_MUTATIONS_PER_SECOND", "fast", `GCP_MUTATIONS_PER_SECOND (flag -mutations-per-second): "fast" is not a number`},
		{"GCP_MUTATIONS_PER_SECOND", "NaN", `"NaN" is not a number`},
		{"GCP_UNAVAILABLE_OFFERING_TTL", "5", `GCP_UNAVAILABLE_OFFERING_TTL (flag -unavailable-offering-ttl): "5" is not a duration such as 90s, 3m or 1h; e.g. GCP_UNAVAILABLE_OFFERING_TTL=3m0s`},
		{"GCP_LABELS", "team=ml,oops", `GCP_LABELS (flag -labels): invalid key-value pair: oops`},
		{"USE_PUBLIC_IP", "yes", `USE_PUBLIC_IP (flag -use-public-ip): "yes" is not a boolean`},
	}
	for _, b := range bad {
		_, err := ConfigFromEnv(env(append(base, b.key, b.val)...))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s=%s: err = %v, want %q", b.key, b.val, err, b.want)
		}
	}
	good := append(base, "ROOT_VOLUME_SIZE", " 80 ", "GCP_SPOT_FALLBACK", "TRUE", "GCP_PROVISIONING_MODEL", "SPOT",
		"GCP_MUTATIONS_PER_SECOND", "2.5", "GCP_UNAVAILABLE_OFFERING_TTL", "90s", "GCP_LABELS", "team=ml", "GCP_ZONES", "auto")
	// The process environment must not leak into what install checks.
	t.Setenv("GCP_DISK_TYPE", "pd-ssd")
	c, err := ConfigFromEnv(env(good...))
	if err != nil {
		t.Fatal(err)
	}
	if c.RootVolumeSize != 80 || !c.SpotFallback || c.MutationsPerSecond != 2.5 || c.UnavailableTTL.Seconds() != 90 || c.Labels["team"] != "ml" || !c.autoZones() {
		t.Errorf("parsed %+v", c)
	}
	if c.DiskType != "pd-balanced" {
		t.Errorf("GCP_DISK_TYPE = %q: the process environment leaked into ConfigFromEnv", c.DiskType)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// An enum is the provider's Validate, on the parsed value.
	c, _ = ConfigFromEnv(env(append(base, "GCP_PROVISIONING_MODEL", "spot")...))
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `GCP_PROVISIONING_MODEL: "spot" is not STANDARD or SPOT`) {
		t.Errorf("Validate = %v", err)
	}
}

func serviceAccountKey(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "demo-project", "private_key_id": "abc123",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "caa@demo-project.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token",
	})
	return b
}

func wifConfig(tokenFile string) []byte {
	b, _ := json.Marshal(map[string]any{
		"type":               "external_account",
		"audience":           "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/gke",
		"subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
		"token_url":          "https://sts.googleapis.com/v1/token",
		"credential_source":  map[string]string{"file": tokenFile},
	})
	return b
}

func TestCheckCredentials(t *testing.T) {
	info, err := credential.Check("GCP_CREDENTIALS", serviceAccountKey(t))
	if err != nil || info.Identity != "caa@demo-project.iam.gserviceaccount.com" || info.KeyID != "abc123" {
		t.Fatalf("service account key: %+v, %v", info, err)
	}
	if s := info.String(); strings.Contains(s, "PRIVATE") || !strings.Contains(s, "abc123") {
		t.Errorf("String() = %q", s)
	}
	if info, err := credential.Check("f", wifConfig("/var/run/gcp-wif/token")); err != nil || info.Type != credential.ExternalAccount {
		t.Fatalf("external_account: %+v, %v", info, err)
	}
	var broken map[string]string
	_ = json.Unmarshal(serviceAccountKey(t), &broken)
	broken["private_key"] = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
	brokenKey, _ := json.Marshal(broken)
	for name, tc := range map[string]struct {
		data, want string
	}{
		// What `gcloud auth application-default login` writes.
		"authorized_user": {`{"type":"authorized_user","client_id":"x.apps.googleusercontent.com","client_secret":"s","refresh_token":"r"}`, `type "authorized_user" is not allowed`},
		"impersonated":    {`{"type":"impersonated_service_account","service_account_impersonation_url":"u","source_credentials":{}}`, `type "impersonated_service_account" is not allowed`},
		"no type":         {`{"client_email":"a@b"}`, `no "type" field`},
		"not json":        {`client_email: a@b`, `not a JSON credential file`},
		"bad key":         {string(brokenKey), "private_key does not parse as an RSA key"},
		"no wif source":   {`{"type":"external_account","audience":"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/q","subject_token_type":"t","token_url":"https://sts.googleapis.com/v1/token"}`, "without a credential_source"},
	} {
		if _, err := credential.Check("GCP_CREDENTIALS", []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "GCP_CREDENTIALS: ") {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestStartChecksApplicationDefaultCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "credential-configuration.json")
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(cfgPath, wifConfig(token), 0o600); err != nil {
		t.Fatal(err)
	}
	c := validConfig()
	if _, err := c.checkStartCredentials(env("GOOGLE_APPLICATION_CREDENTIALS", cfgPath)); err == nil || !strings.Contains(err.Error(), "credential_source.file") {
		t.Fatalf("missing projected token: %v", err)
	}
	if err := os.WriteFile(token, []byte("jwt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.checkStartCredentials(env("GOOGLE_APPLICATION_CREDENTIALS", cfgPath)); err != nil {
		t.Fatalf("complete WIF mount: %v", err)
	}
	if _, err := c.checkStartCredentials(env("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(dir, "absent.json"))); err == nil {
		t.Fatal("a missing GOOGLE_APPLICATION_CREDENTIALS file must stop the start")
	}
	c.Credentials = `{"type":"authorized_user"}`
	if _, err := c.checkStartCredentials(env()); err == nil || !strings.Contains(err.Error(), "GCP_CREDENTIALS") {
		t.Fatalf("authorized_user in GCP_CREDENTIALS: %v", err)
	}
}
