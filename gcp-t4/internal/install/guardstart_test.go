package install

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// renderUserOverlay renders what `kubectl apply -k DIR` applies for a user's
// own overlay of install/overlays/gcp-t4 (docs/install.md): the repository's
// install/ tree as it is on disk, plus DIR/kustomization.yaml = kustomization.
func renderUserOverlay(t *testing.T, kustomization string) (configMaps map[string]map[string]string, caa *containerSpec) {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(repoInstall, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(repoInstall, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/install", filepath.ToSlash(rel)), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.WriteFile("/mine/kustomization.yaml", []byte(kustomization)); err != nil {
		t.Fatal(err)
	}
	m, err := renderDir(mem, "/mine")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	secrets, configMaps := renderedData(t, m)
	c := container(daemonSetOf(t, m), "cloud-api-adaptor-con")
	if c == nil {
		t.Fatal("no cloud-api-adaptor-con container rendered")
	}
	return configMaps, &containerSpec{argv: append(append([]string{}, c.Command...), c.Args...), env: effectiveEnv(c, secrets, configMaps)}
}

// containerSpec is what the kubelet starts: the command with its args, and
// the environment.
type containerSpec struct {
	argv []string
	env  map[string]string
}

// start runs the container's command in a stand-in for the image's
// /usr/local/bin: the repository's scripts/image/entrypoint.sh as
// entrypoint.sh, and a cloud-api-adaptor stub that records its arguments.
// calls is empty when cloud-api-adaptor never started.
func (c *containerSpec) start(t *testing.T) (code int, calls, stderr string) {
	t.Helper()
	bin := t.TempDir()
	script, err := os.ReadFile(filepath.Join(repoInstall, "..", "scripts", "image", "entrypoint.sh"))
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(bin, "calls")
	for name, data := range map[string]string{
		"entrypoint.sh":     string(script),
		"cloud-api-adaptor": "#!/bin/sh\necho \"cloud-api-adaptor $*\" >> " + log + "\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.argv) == 0 || !strings.HasPrefix(c.argv[0], "/usr/local/bin/") {
		t.Fatalf("command %q: not a program of the image's /usr/local/bin", c.argv)
	}
	cmd := exec.Command(filepath.Join(bin, strings.TrimPrefix(c.argv[0], "/usr/local/bin/")), c.argv[1:]...)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	keys := make([]string, 0, len(c.env))
	for k := range c.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+c.env[k])
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(log)
	return code, strings.TrimSpace(string(out)), errb.String()
}

// TestKubectlApplyKRefusesWhatLiftsTheGuard: a user's overlay of
// install/overlays/gcp-t4, applied with `kubectl apply -k` (which checks
// nothing), that sets CLOUD_PROVIDER=gcp, TLS_SKIP_VERIFY=true or custom
// certificate files in peer-pods-cm, or TLS flags in the container's args,
// gives a CAA container that refuses to start, with the fix, before
// cloud-api-adaptor (and so any podVM) exists. The container is started
// as the kubelet would: its command and args, and the environment from
// envFrom (peer-pods-secret, then peer-pods-cm) and env.
func TestKubectlApplyKRefusesWhatLiftsTheGuard(t *testing.T) {
	overlay := func(literals ...string) string {
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../install/overlays/gcp-t4\n"
		if len(literals) > 0 {
			k += "configMapGenerator:\n  - name: peer-pods-cm\n    behavior: merge\n    literals:\n"
			for _, l := range literals {
				k += "      - " + l + "\n"
			}
		}
		return k
	}
	argsPatch := overlay() + `patches:
  - target: {kind: DaemonSet, name: cloud-api-adaptor-daemonset}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args
        value: ["-tls-skip-verify"]
`

	// As committed, the overlay starts gcp-t4's CAA through the entrypoint.
	cms, caa := renderUserOverlay(t, overlay("GCP_PROJECT_ID=p", "GCP_ZONE=us-central1-a"))
	if code, calls, stderr := caa.start(t); code != 0 || calls != "cloud-api-adaptor gcp-t4" {
		t.Fatalf("the overlay as committed: exit %d, calls %q, stderr %q; want cloud-api-adaptor gcp-t4 started", code, calls, stderr)
	}
	var cm map[string]string
	for name, data := range cms {
		if strings.HasPrefix(name, ConfigMapName) {
			cm = data
		}
	}
	if cm["CLOUD_PROVIDER"] != "gcp-t4" || cm["GCP_ZONE"] != "us-central1-a" {
		t.Fatalf("rendered peer-pods-cm %v: the user's literals did not merge", cm)
	}

	for _, c := range []struct {
		name, kustomization string
		want                []string
	}{
		{"CLOUD_PROVIDER=gcp", overlay("CLOUD_PROVIDER=gcp"), []string{"CLOUD_PROVIDER=gcp", "set CLOUD_PROVIDER=gcp-t4"}},
		{"CLOUD_PROVIDER=aws", overlay("CLOUD_PROVIDER=aws"), []string{"CLOUD_PROVIDER=aws", "set CLOUD_PROVIDER=gcp-t4"}},
		{"TLS_SKIP_VERIFY=true", overlay("TLS_SKIP_VERIFY=true"), []string{"TLS_SKIP_VERIFY=true", "unset it in peer-pods-cm"}},
		{"TLS_SKIP_VERIFY=True", overlay("TLS_SKIP_VERIFY=True"), []string{"TLS_SKIP_VERIFY=True", "unset it in peer-pods-cm"}},
		{"CACERT_FILE", overlay("CACERT_FILE=/etc/certificates/ca.crt", "CERT_FILE=/etc/certificates/client.crt", "CERT_KEY=/etc/certificates/client.key"), []string{"custom CAA-to-podVM certificates are not supported", "unset CACERT_FILE, CERT_FILE and CERT_KEY"}},
		{"args -tls-skip-verify", argsPatch, []string{"flag -tls-skip-verify", "remove the flag"}},
	} {
		_, caa := renderUserOverlay(t, c.kustomization)
		code, calls, stderr := caa.start(t)
		if code == 0 || calls != "" {
			t.Errorf("%s: exit %d, cloud-api-adaptor started as %q; want a refusal before it starts", c.name, code, calls)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q lacks %q", c.name, stderr, w)
			}
		}
	}
}

// TestInstallValidatesGCPEndpoint: gcp-t4 install (here --render, which
// runs install's own checks without a cluster) refuses a GCP_ENDPOINT the
// provider would refuse at start, naming it and the fix, and accepts a
// local emulator's plain-HTTP URL in any letter case (which gets no
// credentials) and a Private Service Connect endpoint.
func TestInstallValidatesGCPEndpoint(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	id := "--set=GCP_CLUSTER_ID=5e2f3c1a-0000-4000-8000-000000000001"
	for _, c := range []struct {
		endpoint string
		ok       bool
	}{
		{"ftp://x", false}, {"evil.example.com", false}, {"https://user:pw@compute.googleapis.com", false},
		{"https://compute.googleapis.com?alt=json", false},
		{"HTTP://127.0.0.1:8080", true}, {"https://compute-vialink1.p.googleapis.com", true},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), append(append([]string{"--render"}, requiredFlags...), id, "--set=GCP_ENDPOINT="+c.endpoint), &stdout, &stderr, nil)
		if c.ok {
			if code != 0 || !strings.Contains(stdout.String(), "GCP_ENDPOINT: "+c.endpoint) {
				t.Errorf("GCP_ENDPOINT=%s: exit %d, stderr %q; want it rendered as given", c.endpoint, code, stderr.String())
			}
			continue
		}
		if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "GCP_ENDPOINT: ") || !strings.Contains(stderr.String(), "googleapis.com") {
			t.Errorf("GCP_ENDPOINT=%s: exit %d, stdout %d bytes, stderr %q; want a refusal naming GCP_ENDPOINT and the fix", c.endpoint, code, stdout.Len(), stderr.String())
		}
	}
}
