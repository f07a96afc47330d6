package upstream_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// chartOutput is what upstream's peerpods chart renders for peer-pods-cm
// and CAA's DaemonSet (install/helm/post-render/testdata, the fixture
// gcp-t4/internal/install's post-render tests read too), with data as the
// ConfigMap's lines.
func chartOutput(t *testing.T, data string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "install", "helm", "post-render", "testdata", "chart-output.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return os.Expand(string(b), func(k string) string {
		return map[string]string{"NAMESPACE": "confidential-containers-system", "DATA": data}[k]
	})
}

// runPostRender feeds the chart's output to install/helm/post-render's
// script as Helm does (stdin), with KUSTOMIZE pointing at a stub that
// records whether the script got as far as rendering.
func runPostRender(t *testing.T, chart string) (code int, rendered bool, stderr string) {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(bin, "called")
	stub := filepath.Join(bin, "kustomize")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\necho \"kustomize $*\" >> "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(repoRoot(t), "install", "helm", "post-render", "post-render.sh"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "KUSTOMIZE=" + stub}
	cmd.Stdin = strings.NewReader(chart)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(log)
	return code, statErr == nil, errb.String()
}

// TestPostRendererRefusesWhatLiftsTheGuard: a Helm release for another
// provider, or with TLS_SKIP_VERIFY, is refused at render, before Helm
// applies anything (the image's entrypoint refuses both again at start,
// TestEntrypointRefusesWhatLiftsTheGuard). The first cases show the same
// input otherwise renders.
func TestPostRendererRefusesWhatLiftsTheGuard(t *testing.T) {
	const base = "  CLOUD_PROVIDER: \"gcp-t4\"\n  GCP_CLUSTER_ID: \"2f1c7c5e-0000-4000-8000-000000000001\"\n"
	for _, c := range []struct {
		name, data string
		refused    bool
		want       []string
	}{
		{"gcp-t4 values", base + "  CLOUD_CONFIG_VERIFY: \"true\"\n", false, nil},
		{"skip-verify false", base + "  TLS_SKIP_VERIFY: \"false\"\n", false, nil},
		{"skip-verify empty", base + "  TLS_SKIP_VERIFY: \"\"\n", false, nil},
		{"skip-verify true", base + "  TLS_SKIP_VERIFY: \"true\"\n", true, []string{"TLS_SKIP_VERIFY", "unset it"}},
		{"skip-verify True", base + "  TLS_SKIP_VERIFY: \"True\"\n", true, []string{"TLS_SKIP_VERIFY", "unset it"}},
		{"skip-verify 1", base + "  TLS_SKIP_VERIFY: \"1\"\n", true, []string{"TLS_SKIP_VERIFY", "unset it"}},
		{"provider gcp", "  CLOUD_PROVIDER: \"gcp\"\n  GCP_CLUSTER_ID: \"2f1c7c5e-0000-4000-8000-000000000001\"\n", true, []string{"CLOUD_PROVIDER", "--set provider=gcp-t4"}},
		{"custom CA", base + "  CACERT_FILE: \"/etc/certificates/ca.crt\"\n", true, []string{"CACERT_FILE", "unset them"}},
	} {
		code, rendered, stderr := runPostRender(t, chartOutput(t, c.data))
		if !c.refused {
			if code != 0 || !rendered {
				t.Errorf("%s: exit %d, rendered %v, stderr %q; want it rendered", c.name, code, rendered, stderr)
			}
			continue
		}
		if code == 0 || rendered {
			t.Errorf("%s: exit %d, rendered %v; want a refusal before kustomize", c.name, code, rendered)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q lacks %q", c.name, stderr, w)
			}
		}
	}
}
