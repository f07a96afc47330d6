package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/caa-gcp-t4/gcp-t4/internal/testkey"
)

// EnvKustomize names the kustomize CLI `make controlplane` builds from
// sigs.k8s.io/kustomize/kustomize/v5 at the version matching our
// kustomize/api.
const EnvKustomize = "KUSTOMIZE_BIN"

func kustomizeCLI(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the kustomize CLI; skipped with -short")
	}
	bin := os.Getenv(EnvKustomize)
	if bin == "" {
		t.Fatalf("%s is not set; run `make controlplane` (builds the kustomize CLI once, cached by version) or the tests through `make test`", EnvKustomize)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v; run `make controlplane`", EnvKustomize, bin, err)
	}
	return bin
}

func cliBuild(t *testing.T, bin, dir string) []byte {
	t.Helper()
	cmd := exec.Command(bin, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// testWIFConfig is what `gcloud iam workload-identity-pools
// create-cred-config` writes for a Kubernetes OIDC provider.
var testWIFConfig = []byte(`{
  "universe_domain": "googleapis.com",
  "type": "external_account",
  "audience": "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/caa/providers/cluster",
  "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
  "token_url": "https://sts.googleapis.com/v1/token",
  "credential_source": {"file": "/var/run/gcp-wif/token", "format": {"type": "text"}}
}`)

// testKey is a service account key as `gcloud iam service-accounts keys
// create` writes one, with a key made for the test run.
var testKey = sync.OnceValue(func() []byte {
	b, err := testkey.ServiceAccount("caa@p.iam.gserviceaccount.com", "0123456789abcdef")
	if err != nil {
		panic(err)
	}
	return b
})

// combinations are every overlay and component the repository ships, with
// and without user settings.
func combinations() map[string]Settings {
	full := Settings{
		Image:       "registry.example/caa-gcp-t4:v1",
		Config:      map[string]string{"GCP_PROJECT_ID": "p", "GCP_ZONE": "us-central1-a", "GCP_ZONES": "auto", "PODVM_IMAGE_NAME": "podvm", "GCP_NETWORK": "global/networks/default"},
		Credentials: testKey(),
	}
	withGKE, withRC, withBoth, withWIF, withTLS, withGuard := full, full, full, full, full, full
	withGKE.GKERemediation = true
	withRC.RuntimeClass = true
	withBoth.GKERemediation, withBoth.RuntimeClass = true, true
	withWIF.Credentials, withWIF.WIFCredentialConfig, withWIF.GKERemediation = nil, testWIFConfig, true
	withTLS.TLS = testTLS()
	withGuard.CostGuard, withGuard.GuardMaxGPUsPerPod = true, "3"
	return map[string]Settings{
		"overlay":                    {},
		"overlay+settings":           full,
		"overlay+gke":                withGKE,
		"overlay+runtimeclass":       withRC,
		"overlay+gke+runtimeclass":   withBoth,
		"overlay+gke-default-image":  {GKERemediation: true},
		"overlay+gke+wif":            withWIF,
		"overlay+agent-tls":          withTLS,
		"overlay+cost-guard":         withGuard,
		"overlay+cost-guard-default": {CostGuard: true},
	}
}

// TestRendersIdenticallyWithKustomizeCLI: the in-process rendering equals
// `kustomize build` (the engine `kubectl apply -k` embeds) byte for byte,
// for the repository's own directories and for every generated top level.
func TestRendersIdenticallyWithKustomizeCLI(t *testing.T) {
	bin := kustomizeCLI(t)
	for _, dir := range []string{"base", "overlays/gcp-t4"} {
		t.Run(dir, func(t *testing.T) {
			path := filepath.Join(repoInstall, dir)
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			m, err := renderDir(filesys.MakeFsOnDisk(), abs)
			if err != nil {
				t.Fatal(err)
			}
			in, err := m.AsYaml()
			if err != nil {
				t.Fatal(err)
			}
			if cli := cliBuild(t, bin, path); !bytes.Equal(in, cli) {
				t.Errorf("in-process rendering of install/%s differs from the CLI's:\n--- in process\n%s\n--- CLI\n%s", dir, in, cli)
			}
		})
	}
	for name, s := range combinations() {
		t.Run(name, func(t *testing.T) {
			dir, err := s.WriteTree(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			in, err := RenderYAML(s)
			if err != nil {
				t.Fatal(err)
			}
			if cli := cliBuild(t, bin, dir); !bytes.Equal(in, cli) {
				t.Errorf("in-process rendering differs from the CLI's:\n--- in process\n%s\n--- CLI\n%s", in, cli)
			}
		})
	}
}
