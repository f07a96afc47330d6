package install

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// testTLS is a CA and a client certificate signed by it, as an operator
// would make with openssl.
var testTLS = sync.OnceValue(func() *TLSFiles {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "caa-ca"}, NotBefore: time.Now(), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		panic(err)
	}
	cliKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cli := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "cloud-api-adaptor"}, NotBefore: time.Now(), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	cliDER, err := x509.CreateCertificate(rand.Reader, cli, ca, &cliKey.PublicKey, caKey)
	if err != nil {
		panic(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(cliKey)
	return &TLSFiles{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cliDER}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
})

// required are the four settings every install needs.
var required = map[string]string{"GCP_PROJECT_ID": "demo-project", "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4", "GCP_NETWORK": "global/networks/default"}

func withRequired(kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range required {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// caaSharedFlags are the flags CAA v0.22.0 itself registers, as upstream's
// own config-extractor lists them (testdata/caa-v0.22.0-shared-flags.json:
// its output on the release's main.go, not a hand list). The extractor
// reads a default only when it is a literal there, so "" means unknown.
func caaSharedFlags(t *testing.T) []struct {
	Flag    string `json:"flag_name"`
	Type    string `json:"type"`
	Default string `json:"default"`
	Env     string `json:"env_var"`
} {
	t.Helper()
	data, err := os.ReadFile("testdata/caa-v0.22.0-shared-flags.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Flags []struct {
			Flag    string `json:"flag_name"`
			Type    string `json:"type"`
			Default string `json:"default"`
			Env     string `json:"env_var"`
		} `json:"flags"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Flags) == 0 {
		t.Fatal("no flags in testdata/caa-v0.22.0-shared-flags.json")
	}
	return doc.Flags
}

// TestCAAKeysAreUpstreams: caaKeys is CAA's flag table as upstream's
// config-extractor reads it at v0.22.0, key for key: the same env names,
// flags and kinds, the same defaults wherever the extractor can read
// one, plus CLOUD_PROVIDER (entrypoint.sh's).
func TestCAAKeysAreUpstreams(t *testing.T) {
	up := map[string]int{}
	flags := caaSharedFlags(t)
	for i, f := range flags {
		up[f.Env] = i
	}
	for _, k := range caaKeys {
		if k.Env == "CLOUD_PROVIDER" {
			continue
		}
		i, ok := up[k.Env]
		if !ok {
			t.Errorf("caaKeys has %s, which CAA %s does not read", k.Env, UpstreamRelease)
			continue
		}
		delete(up, k.Env)
		f := flags[i]
		if k.Flag != f.Flag || k.Kind != f.Type {
			t.Errorf("%s: flag -%s (%s) here, -%s (%s) upstream", k.Env, k.Flag, k.Kind, f.Flag, f.Type)
		}
		if f.Default != "" && k.Default != f.Default {
			t.Errorf("%s: default %q here, %q upstream", k.Env, k.Default, f.Default)
		}
	}
	for env := range up {
		t.Errorf("CAA %s reads %s; caaKeys lacks it", UpstreamRelease, env)
	}
}

// TestEveryKeyCAAReadsIsAccepted: --set takes every key CAA v0.22.0 and
// the provider read, and the manifests set none that is not among them.
func TestEveryKeyCAAReadsIsAccepted(t *testing.T) {
	upstream := []string{"CLOUD_PROVIDER"} // entrypoint.sh dispatches on it
	for _, f := range caaSharedFlags(t) {
		upstream = append(upstream, f.Env)
	}
	for _, k := range append(upstream, gcpt4.KeyNames()...) {
		if k == credentialsFile || k == "NODE_NAME" {
			continue // the Secret's; the downward API's (ConfigKeys)
		}
		if !isKey(k) {
			t.Errorf("%s is read by CAA %s or gcp-t4 but --set refuses it", k, UpstreamRelease)
		}
	}
	if len(caaKeys) != len(upstream) {
		t.Errorf("caaKeys has %d keys, upstream's main.go and entrypoint.sh read %d", len(caaKeys), len(upstream))
	}
	mk, err := manifestKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range mk {
		if !isKey(k) {
			t.Errorf("the manifests set %s, which neither CAA nor gcp-t4 reads", k)
		}
	}
	if !slices.Contains(mk, "CLOUD_CONFIG_VERIFY") || configOfDefaults(t)["CLOUD_CONFIG_VERIFY"] != "true" {
		t.Error("the overlay must set CLOUD_CONFIG_VERIFY=true: CAA runs the provider's ConfigVerifier only then")
	}
}

func configOfDefaults(t *testing.T) map[string]string {
	t.Helper()
	d, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func gzipBase64(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// TestValidateConfigUsesTheProvidersRules: what the provider would quietly
// default or refuse at start is refused before anything is applied.
func TestValidateConfigUsesTheProvidersRules(t *testing.T) {
	goodInitdata := gzipBase64("algorithm = \"sha256\"\nversion = \"0.1.0\"\n[data]\n\"aa.toml\" = '''\n[token_configs]\n'''\n")
	if err := ValidateConfig(withRequired("INITDATA", goodInitdata, "TLS_MIN_VERSION", "VersionTLS13", "GCP_ZONES", "auto", "PAUSE_IMAGE", "registry.k8s.io/pause:3.10"), false); err != nil {
		t.Fatalf("valid: %v", err)
	}
	for _, c := range []struct {
		cfg  map[string]string
		want string
	}{
		{withRequired("GCP_ZONE", "us-central1"), `GCP_ZONE: "us-central1" is not a zone name`},
		{withRequired("ROOT_VOLUME_SIZE", "abc"), `ROOT_VOLUME_SIZE (flag -root-volume-size): "abc" is not a whole number`},
		{withRequired("GCP_SPOT_FALLBACK", "ture"), `GCP_SPOT_FALLBACK (flag -spot-fallback): "ture" is not a boolean`},
		{withRequired("GCP_MUTATIONS_PER_SECOND", "fast"), `GCP_MUTATIONS_PER_SECOND (flag -mutations-per-second): "fast" is not a number`},
		{withRequired("GCP_PROVISIONING_MODEL", "spot"), `GCP_PROVISIONING_MODEL: "spot" is not STANDARD or SPOT`},
		{withRequired("CLOUD_CONFIG_VERIFY", "yes"), `CLOUD_CONFIG_VERIFY: "yes" is not a boolean`},
		{withRequired("PROXY_TIMEOUT", "5"), `PROXY_TIMEOUT: "5" is not a positive duration`},
		{withRequired("VXLAN_PORT", "70000"), `VXLAN_PORT: "70000" is not a port`},
		{withRequired("TLS_MIN_VERSION", "VersionTLS11"), "TLS_MIN_VERSION"},
		{withRequired("TLS_MIN_VERSION", "VersionTLS13", "TLS_CIPHER_SUITES", "TLS_AES_128_GCM_SHA256"), "TLS_CIPHER_SUITES: Go's crypto/tls does not configure TLS 1.3 suites"},
		{withRequired("TLS_CIPHER_SUITES", "TLS_RSA_WITH_NOPE"), `"TLS_RSA_WITH_NOPE" is not a cipher suite name`},
		{withRequired("INITDATA", "algorithm = \"sha256\""), "INITDATA: not base64 of gzip data"},
		{withRequired("INITDATA", gzipBase64("algorithm = \"md5\"\nversion = \"0.1.0\"\n")), `initdata algorithm "md5"`},
		{withRequired("TUNNEL_TYPE", "routing"), "TUNNEL_TYPE"},
		{withRequired("CACERT_FILE", "/etc/certificates/ca.crt"), "no certificate Secret is mounted"},
		{withRequired("POD_SUBNET_CIDRS", "10.0.0.0"), `POD_SUBNET_CIDRS: "10.0.0.0" is not a CIDR`},
		{withRequired("GCP_PROFILES", "- nope"), "GCP_PROFILES"},
		{withRequired("ENABLE_SCRATCH_SPACE", "true"), "ENABLE_SCRATCH_SPACE: true is not supported by the caa-gcp-t4 podVM"},
		{withRequired("ENABLE_SCRATCH_SPACE", "maybe"), `ENABLE_SCRATCH_SPACE: "maybe" is not a boolean`},
	} {
		err := ValidateConfig(c.cfg, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestMergeKeepsWhatWasSet is the upgrade from the issue: image, key and
// every setting survive `install --set GCP_ZONES=auto`.
func TestMergeKeepsWhatWasSet(t *testing.T) {
	defaults := configOfDefaults(t)
	liveCfg := map[string]string{}
	for k, v := range defaults {
		liveCfg[k] = v
	}
	for k, v := range withRequired("GCP_LABELS", "team=ml", "CACERT_FILE", "/etc/certificates/ca.crt", "LEGACY_KEY", "x") {
		liveCfg[k] = v
	}
	live := Live{Found: true, Inventory: true, Namespace: "caa", Image: "ghcr.io/you/caa-gcp-t4:v1", Config: liveCfg, Credentials: testKey(), TLS: testTLS()}
	// Custom certificates an earlier version installed break every peer
	// pod (tls.go): an upgrade refuses to keep them and says how to drop
	// them.
	if _, _, err := Merge(live, Request{Set: map[string]string{"GCP_ZONES": "auto"}}); err == nil || !strings.Contains(err.Error(), "--no-tls-certs") || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("upgrade keeping custom certificates: %v", err)
	}
	s, notes, err := Merge(live, Request{Set: map[string]string{"GCP_ZONES": "auto"}, Unset: []string{"GCP_LABELS"}, NoTLS: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Image != live.Image || s.Namespace != "caa" || !bytes.Equal(s.Credentials, testKey()) || s.TLS != nil {
		t.Errorf("lost image, namespace, key or certificates: %+v", s)
	}
	if s.Config["GCP_ZONES"] != "auto" || s.Config["GCP_PROJECT_ID"] != "demo-project" || s.Config["GCP_ZONE"] != "us-central1-a" {
		t.Errorf("config %v", s.Config)
	}
	if _, ok := s.Config["GCP_LABELS"]; ok {
		t.Error("--unset GCP_LABELS kept it")
	}
	if _, ok := s.Config["CACERT_FILE"]; ok {
		t.Error("an installer-derived key was carried as a user setting")
	}
	if _, ok := s.Config["PROXY_TIMEOUT"]; ok {
		t.Error("a value equal to the default must follow the default, not be pinned")
	}
	if s.Config["LEGACY_KEY"] != "x" || !strings.Contains(strings.Join(notes, "\n"), "LEGACY_KEY is kept") {
		t.Errorf("unknown live key: %v, notes %q", s.Config, notes)
	}
	objs, err := Build(s)
	if err != nil {
		t.Fatalf("build the merged settings: %v", err)
	}
	if err := ValidateConfig(configOf(objs), s.TLS != nil); err != nil {
		t.Errorf("merged settings invalid: %v", err)
	}
	// Removing takes an explicit flag.
	s, _, err = Merge(live, Request{UseADC: true, NoTLS: true})
	if err != nil || s.Credentials != nil || s.TLS != nil {
		t.Errorf("--use-adc --no-tls-certs: %+v, %v", s, err)
	}
	if _, _, err := Merge(live, Request{UseADC: true, Credentials: testKey()}); err == nil {
		t.Error("--use-adc with --credentials-file accepted")
	}
	if _, _, err := Merge(live, Request{Unset: []string{"NOPE"}}); err == nil || !strings.Contains(err.Error(), "--unset NOPE") {
		t.Errorf("--unset of an unknown key: %v", err)
	}
	s, _, err = Merge(Live{Found: true, Image: ImageName + ":latest", Config: defaults, WIF: testWIFConfig}, Request{Image: "ghcr.io/you/caa-gcp-t4:v2"})
	if err != nil || s.Image != "ghcr.io/you/caa-gcp-t4:v2" || !bytes.Equal(s.WIFCredentialConfig, testWIFConfig) {
		t.Errorf("WIF kept, image replaced: %+v, %v", s, err)
	}
}

// TestDiffNeverShowsTheKey: the diff names the credentials, never their
// content, and shows each changed key.
func TestDiffNeverShowsTheKey(t *testing.T) {
	before := viewOf("ghcr.io/you/caa-gcp-t4:v1", "", withRequired(), nil, nil, nil)
	after := viewOf("ghcr.io/you/caa-gcp-t4:v1", "", withRequired("GCP_ZONES", "auto", "GCP_ZONE", "us-central1-b"), testKey(), nil, testTLS())
	var b bytes.Buffer
	PrintDiff(&b, before, after)
	out := b.String()
	for _, want := range []string{
		`~ GCP_ZONE: "us-central1-a" → "us-central1-b"`, `+ GCP_ZONES: "auto"`,
		"~ credentials: Application Default Credentials", "→ service account key for caa@p.iam.gserviceaccount.com (key id 0123456789abcdef)",
		`custom client certificate "cloud-api-adaptor"`, "other settings unchanged",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PRIVATE") || strings.Contains(out, "BEGIN") {
		t.Errorf("diff shows key material:\n%s", out)
	}
	b.Reset()
	PrintDiff(&b, after, after)
	if !strings.Contains(b.String(), "settings: no change") {
		t.Errorf("no-op diff: %s", b.String())
	}
}

// TestRelocateMovesSubjects: --namespace moves every object and the
// ServiceAccount subjects with it, and leaves "default" where it is.
func TestRelocateMovesSubjects(t *testing.T) {
	objs, err := Build(Settings{Namespace: "peer-pods", GKERemediation: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetNamespace() == Namespace || (o.GetKind() == "Namespace" && o.GetName() == Namespace) {
			t.Errorf("%s %s/%s left in %s", o.GetKind(), o.GetNamespace(), o.GetName(), Namespace)
		}
		switch o.GetKind() {
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Namespace != "peer-pods" {
					t.Errorf("%s %s: subject %s in %s", o.GetKind(), o.GetName(), s.Name, s.Namespace)
				}
			}
		}
	}
}

// TestConfigHashRollsTheDaemonSet: a settings change changes the pod
// template (names are fixed, so nothing else would).
func TestConfigHashRollsTheDaemonSet(t *testing.T) {
	hash := func(s Settings) string {
		t.Helper()
		objs, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		// CAA's DaemonSet and the reaper's Deployment read the same
		// ConfigMap and Secret: both roll on a change.
		var got []string
		for _, o := range objs {
			if (o.GetKind() == "DaemonSet" && o.GetName() == DaemonSetName) || (o.GetKind() == "Deployment" && o.GetName() == ReaperName) {
				v, _, _ := unstructured.NestedString(o.Object, "spec", "template", "metadata", "annotations", ConfigHashAnnotation)
				got = append(got, v)
			}
		}
		if len(got) != 2 || got[0] != got[1] {
			t.Fatalf("config hashes %v: want CAA's DaemonSet's and the reaper's, equal", got)
		}
		return got[0]
	}
	a := hash(Settings{Config: withRequired()})
	if a == "" || a != hash(Settings{Config: withRequired()}) {
		t.Fatalf("hash %q not stable", a)
	}
	for name, s := range map[string]Settings{
		"a key":        {Config: withRequired("GCP_ZONES", "auto")},
		"reaper grace": {Config: withRequired("REAPER_GRACE", "20m")},
		"credentials":  {Config: withRequired(), Credentials: testKey()},
		"certificates": {Config: withRequired(), TLS: testTLS()},
	} {
		if hash(s) == a {
			t.Errorf("changing %s leaves the pod template as it was", name)
		}
	}
}

func TestAgentTLSComponent(t *testing.T) {
	objs, err := Build(Settings{Config: withRequired(), TLS: testTLS()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := configOf(objs)
	if cfg["CACERT_FILE"] != "/etc/certificates/ca.crt" || cfg["CERT_FILE"] != "/etc/certificates/client.crt" || cfg["CERT_KEY"] != "/etc/certificates/client.key" {
		t.Errorf("peer-pods-cm %v", cfg)
	}
	if err := ValidateConfig(cfg, true); err != nil {
		t.Errorf("ValidateConfig: %v", err)
	}
	found := false
	for _, o := range objs {
		if o.GetKind() == "Secret" && o.GetName() == tlsSecret {
			d, _, _ := unstructured.NestedStringMap(o.Object, "data")
			found = d[tlsCAKey] != "" && d[tlsCertKey] != "" && d[tlsKeyKey] != ""
		}
	}
	if !found {
		t.Error("no certs-for-tls Secret with ca.crt, client.crt, client.key")
	}
	if err := (Settings{TLS: &TLSFiles{CA: testTLS().CA, Cert: testTLS().CA, Key: testTLS().Key}}).Validate(); err == nil {
		t.Error("a certificate that does not match its key accepted")
	}
}

// The reaper keys' defaults are what `gcp-t4 reaper` itself registers:
// read from its own -h output (the flag package prints each default), so a
// default changed in internal/gc's flags and not here fails.
func TestReaperKeysMatchTheReaper(t *testing.T) {
	for _, k := range reaperKeys {
		t.Setenv(k.Env, "")
	}
	var stdout, stderr bytes.Buffer
	if code := gc.MainReaper(context.Background(), []string{"-h"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("gcp-t4 reaper -h: exit %d\n%s", code, stderr.String())
	}
	usage := stdout.String() // -h is the usage, on stdout
	for _, k := range reaperKeys {
		m := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(k.Flag) + `( \w+)?\n(?:\s+.*\n)*?\s+.*\(default "?([^")]*)"?\)`).FindStringSubmatch(usage)
		if m == nil {
			t.Errorf("%s: the reaper has no -%s flag with a default:\n%s", k.Env, k.Flag, usage)
			continue
		}
		if m[2] != k.Default {
			t.Errorf("%s: default %q here, %q in the reaper (-%s)", k.Env, k.Default, m[2], k.Flag)
		}
	}
	if err := ValidateConfig(map[string]string{"REAPER_INTERVAL": "0s"}, false); err == nil || !strings.Contains(err.Error(), "REAPER_INTERVAL") {
		t.Errorf("REAPER_INTERVAL=0s: %v, want a refusal naming the key", err)
	}
}
