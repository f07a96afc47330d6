package upstream_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// runEntrypoint runs the image's entrypoint.sh from a bin directory like the
// image's: stubs for cloud-api-adaptor (on PATH) and upstream's script
// (beside it) record how they were called.
func runEntrypoint(t *testing.T, env []string, args ...string) (code int, calls, stderr string) {
	t.Helper()
	bin := t.TempDir()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "image", "entrypoint.sh"))
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(bin, "calls")
	for name, data := range map[string]string{
		"entrypoint.sh":          string(src),
		"cloud-api-adaptor":      "#!/bin/sh\necho \"cloud-api-adaptor $*\" >> " + log + "\n",
		"entrypoint-upstream.sh": "#!/bin/sh\necho \"upstream $*\" >> " + log + "\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(bin, "entrypoint.sh"), args...)
	cmd.Env = append([]string{"PATH=" + bin + ":/usr/bin:/bin"}, env...)
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

// TestEntrypointStartsGcpT4: what upstream's peerpods chart and
// install/base run (/usr/local/bin/entrypoint.sh with CLOUD_PROVIDER from
// peer-pods-cm) starts gcp-t4's CAA, where upstream's v0.22.0 script prints
// its usage and exits 0 for a provider it has no branch for. No other
// provider starts: upstream's gcp, which has none of gcp-t4's allow-lists
// and caps, is refused with the fix, and upstream's script is never run.
func TestEntrypointStartsGcpT4(t *testing.T) {
	for _, c := range []struct {
		env   []string
		args  []string
		code  int
		calls string
		err   string
	}{
		{[]string{"CLOUD_PROVIDER=gcp-t4"}, nil, 0, "cloud-api-adaptor gcp-t4", ""},
		{nil, []string{"gcp-t4", "-zone", "us-central1-b"}, 0, "cloud-api-adaptor gcp-t4 -zone us-central1-b", ""},
		{[]string{"CLOUD_PROVIDER=gcp-t4"}, []string{"-zone", "us-central1-b"}, 0, "cloud-api-adaptor gcp-t4 -zone us-central1-b", ""},
		{[]string{"CLOUD_PROVIDER=gcp-t4", "TLS_SKIP_VERIFY=false", "CACERT_FILE="}, nil, 0, "cloud-api-adaptor gcp-t4", ""},
		{[]string{"CLOUD_PROVIDER=gcp"}, nil, 1, "", "CLOUD_PROVIDER=gcp: upstream's gcp provider is not in this image"},
		{[]string{"CLOUD_PROVIDER=gcp"}, []string{"gcp-t4"}, 1, "", "set CLOUD_PROVIDER=gcp-t4"},
		{[]string{"CLOUD_PROVIDER=gcp-t4"}, []string{"gcp"}, 1, "", "set CLOUD_PROVIDER=gcp-t4"},
		{nil, nil, 1, "", "CLOUD_PROVIDER is not set: set CLOUD_PROVIDER=gcp-t4"},
		{[]string{"CLOUD_PROVIDER=aws"}, nil, 1, "", "CLOUD_PROVIDER=aws: this image holds the gcp-t4 provider only"},
		// A value is quoted, so a line break cannot forge a log line.
		{[]string{"CLOUD_PROVIDER=aws\nentrypoint.sh: ok"}, nil, 1, "", `CLOUD_PROVIDER=$'aws\nentrypoint.sh: ok': this image`},
	} {
		code, calls, stderr := runEntrypoint(t, c.env, c.args...)
		if code != c.code || calls != c.calls || !strings.Contains(stderr, c.err) || strings.Count(stderr, "\n") > 1 {
			t.Errorf("env %q args %q: exit %d, calls %q, stderr %q; want exit %d, calls %q, stderr with %q", c.env, c.args, code, calls, stderr, c.code, c.calls, c.err)
		}
	}
}

// TestEntrypointRefusesWhatLiftsTheGuard: CAA-to-podVM TLS stays as CAA
// issues it. Upstream CAA v0.22.0 (cmd/cloud-api-adaptor/main.go at
// 38d0fcf7) takes TLS_SKIP_VERIFY, CACERT_FILE, CERT_FILE and CERT_KEY from
// the environment or as -tls-skip-verify, -ca-cert-file, -cert-file,
// -cert-key after the provider's name (a flag wins), and -disable-tls as a
// flag only; Go's flag package takes one or two dashes and -name=value.
// Every form is refused before cloud-api-adaptor starts, with the fix.
func TestEntrypointRefusesWhatLiftsTheGuard(t *testing.T) {
	gcpT4 := "CLOUD_PROVIDER=gcp-t4"
	for _, c := range []struct {
		env  []string
		args []string
		err  string
	}{
		{[]string{gcpT4, "TLS_SKIP_VERIFY=true"}, nil, "TLS_SKIP_VERIFY=true: CAA would accept any certificate"},
		{[]string{gcpT4, "TLS_SKIP_VERIFY=TRUE"}, nil, "unset it in peer-pods-cm"},
		{[]string{gcpT4, "TLS_SKIP_VERIFY=1"}, nil, "unset it in peer-pods-cm"},
		// CAA reads "yes" as false; refused all the same (fail closed).
		{[]string{gcpT4, "TLS_SKIP_VERIFY=yes"}, nil, "TLS_SKIP_VERIFY=yes"},
		{[]string{gcpT4, "CACERT_FILE=/etc/certificates/ca.crt"}, nil, "CACERT_FILE=/etc/certificates/ca.crt: custom CAA-to-podVM certificates are not supported"},
		{[]string{gcpT4, "CERT_FILE=/c"}, nil, "unset CACERT_FILE, CERT_FILE and CERT_KEY"},
		{[]string{gcpT4, "CERT_KEY=/k"}, nil, "unset CACERT_FILE, CERT_FILE and CERT_KEY"},
		{[]string{gcpT4}, []string{"-tls-skip-verify"}, "flag -tls-skip-verify"},
		{[]string{gcpT4}, []string{"-zone", "z", "--tls-skip-verify=true"}, "remove the flag"},
		{nil, []string{"gcp-t4", "-disable-tls"}, "flag -disable-tls"},
		{[]string{gcpT4}, []string{"-ca-cert-file", "/ca"}, "flag -ca-cert-file"},
		{[]string{gcpT4}, []string{"--cert-file=/c"}, "flag --cert-file=/c"},
		{[]string{gcpT4}, []string{"-cert-key=/k"}, "flag -cert-key=/k"},
	} {
		code, calls, stderr := runEntrypoint(t, c.env, c.args...)
		if code == 0 || calls != "" || !strings.Contains(stderr, c.err) {
			t.Errorf("env %q args %q: exit %d, calls %q, stderr %q; want a refusal with %q and nothing started", c.env, c.args, code, calls, stderr, c.err)
		}
	}
}

// TestInstallSetsEveryUser: every container of ours in install/ states its
// user, so none runs as whatever the image's USER is (root, for the chart).
func TestInstallSetsEveryUser(t *testing.T) {
	root := filepath.Join(repoRoot(t), "install")
	checked := 0
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, ".yaml") || strings.Contains(p, string(filepath.Separator)+"examples"+string(filepath.Separator)) || strings.Contains(p, string(filepath.Separator)+"helm"+string(filepath.Separator)) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				break
			}
			// A container inherits runAsUser and runAsNonRoot from the
			// pod's securityContext (PodSecurityContext, k8s.io/api
			// core/v1: "the value specified in SecurityContext takes
			// precedence" only where the container sets it).
			podSC, _ := podSpecOf(doc)["securityContext"].(map[string]any)
			_, podUser := podSC["runAsUser"]
			podNonRoot := podSC["runAsNonRoot"] == true
			for _, c := range containersOf(doc) {
				if _, full := c["image"]; !full {
					continue // a patch of a container defined elsewhere
				}
				checked++
				sc, _ := c["securityContext"].(map[string]any)
				if _, ok := sc["runAsUser"]; !ok && sc["runAsNonRoot"] != true && !podUser && !podNonRoot {
					t.Errorf("%s: container %v sets neither runAsUser nor runAsNonRoot", p, c["name"])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no container found under install/")
	}
}

// podSpecOf returns a workload's pod spec (or a Pod's spec).
func podSpecOf(doc map[string]any) map[string]any {
	spec, _ := doc["spec"].(map[string]any)
	if tmpl, ok := spec["template"].(map[string]any); ok {
		spec, _ = tmpl["spec"].(map[string]any)
	}
	return spec
}

func containersOf(doc map[string]any) []map[string]any {
	spec := podSpecOf(doc)
	var out []map[string]any
	for _, field := range []string{"containers", "initContainers"} {
		list, _ := spec[field].([]any)
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}
