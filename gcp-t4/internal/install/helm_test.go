package install

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite generated files (install/helm/gcp-t4.yaml)")

const helmValuesPath = repoInstall + "/helm/gcp-t4.yaml"

// TestHelmValues: the committed values file is what HelmValues generates,
// and, read as the chart reads it, names only keys CAA v0.22.0 or gcp-t4
// reads (each with its real default), all of them, and nothing the chart
// writes itself.
func TestHelmValues(t *testing.T) {
	want := HelmValues()
	if *update {
		if err := os.MkdirAll(filepath.Dir(helmValuesPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(helmValuesPath, append(want, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(helmValuesPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimRight(got, "\n"), want) {
		t.Errorf("%s is stale; run go test ./gcp-t4/internal/install -run TestHelmValues -update", helmValuesPath)
	}
	var v struct {
		Provider string `json:"provider"`
		Image    struct {
			Name, Tag string
		} `json:"image"`
		Secrets struct {
			Mode               string `json:"mode"`
			ExistingSecretName string `json:"existingSecretName"`
		} `json:"secrets"`
		ProviderConfigs map[string]map[string]string `json:"providerConfigs"`
	}
	if err := yaml.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	if v.Provider != "gcp-t4" || v.Image.Name == "" || v.Secrets.Mode != "reference" || v.Secrets.ExistingSecretName != SecretName {
		t.Errorf("values %+v", v)
	}
	set := v.ProviderConfigs["gcp-t4"]
	if len(v.ProviderConfigs) != 1 || set == nil {
		t.Fatalf("providerConfigs %v: want exactly providerConfigs.gcp-t4, what the chart indexes by provider", v.ProviderConfigs)
	}
	table := map[string]KeyInfo{}
	for _, k := range ConfigKeys() {
		table[k.Env] = k
	}
	named := map[string]bool{}
	for k := range set {
		named[k] = true
		if _, ok := table[k]; !ok {
			t.Errorf("providerConfigs.gcp-t4.%s: neither CAA %s nor gcp-t4 reads it", k, UpstreamRelease)
		}
	}
	commented := regexp.MustCompile(`(?m)^    # ([A-Z][A-Z0-9_]*): "(.*)"$`)
	for _, m := range commented.FindAllStringSubmatch(string(got), -1) {
		k, def := m[1], m[2]
		named[k] = true
		info, ok := table[k]
		switch {
		case !ok:
			t.Errorf("commented key %s: neither CAA nor gcp-t4 reads it", k)
		case installerKeys[k] == "" && def != info.Default:
			t.Errorf("commented key %s shows default %q; the flag's default is %q", k, def, info.Default)
		}
	}
	var missing []string
	for k := range table {
		if !named[k] && k != "CLOUD_PROVIDER" {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("keys CAA or gcp-t4 read that the values file does not show: %v", missing)
	}
	if named["CLOUD_PROVIDER"] {
		t.Error("CLOUD_PROVIDER in providerConfigs: the chart writes it from provider")
	}
	for _, k := range helmRequired {
		if _, ok := set[k]; !ok {
			t.Errorf("required %s is not set in the values file", k)
		}
	}
	// Filled in, the values make a peer-pods-cm the provider accepts.
	cm := map[string]string{"CLOUD_PROVIDER": v.Provider}
	for k, val := range set {
		cm[k] = val
	}
	for k, val := range required {
		if slices.Contains(helmRequired, k) {
			cm[k] = val
		}
	}
	if err := ValidateConfig(cm, false); err != nil {
		t.Errorf("the values file filled in: %v", err)
	}
}
