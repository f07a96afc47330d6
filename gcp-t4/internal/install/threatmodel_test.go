package install

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// threatRepoRoot is the repository, from this package.
const threatRepoRoot = "../../.."

// docs/threat-model.md's checkable claims hold: every setting it names is
// one the provider or CAA reads, every repository path exists, the
// podVM defaults it states are the image's, and the README's first
// paragraph says what the T4 path does not protect against.
func TestThreatModelClaims(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(threatRepoRoot, "docs/threat-model.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	known := map[string]bool{}
	for _, k := range gcpt4.Keys() {
		known[k.Env] = true
	}
	for _, k := range ConfigKeys() {
		known[k.Env] = true
	}
	for _, m := range regexp.MustCompile("`((?:GCP|TLS|PODVM)_[A-Z_]+)`").FindAllStringSubmatch(text, -1) {
		if !known[m[1]] {
			t.Errorf("threat model names setting %s, which nothing reads", m[1])
		}
	}
	for _, m := range regexp.MustCompile("`((?:podvm|install|src|gcp-t4)/[^`]+)`").FindAllStringSubmatch(text, -1) {
		if strings.HasPrefix(m[1], "src/cloud-providers/gcp/") || strings.HasPrefix(m[1], "src/cloud-api-adaptor/") {
			continue // upstream's, cited at v0.22.0
		}
		if _, err := os.Stat(filepath.Join(threatRepoRoot, m[1])); err != nil {
			t.Errorf("threat model names %s: %v", m[1], err)
		}
	}
	for _, c := range []struct{ file, want string }{
		{"podvm/mkosi.extra/etc/containers/policy.json", "insecureAcceptAnything"},
		{"podvm/mkosi.extra/usr/lib/tmpfiles.d/caa-gcp-t4-guest.conf", "/etc/kata-opa/allow-all.rego"},
		{"podvm/guest-artefacts.pins", "-none_x86_64"},
		{"install/components/cost-guard/policy.yaml", "io.katacontainers.config.hypervisor.default_gpus"},
		{"gcp-t4/internal/preflight/exposure.go", "caa-podvms-deny-podvms"},
		{"podvm/mkosi.extra/usr/lib/systemd/system/caa-gcp-t4-notice.socket", "ListenStream=127.0.0.1:8007"},
		{"podvm/mkosi.extra/usr/lib/systemd/system/caa-gcp-t4-notice.service", "CapabilityBoundingSet=\n"},
		{"podvm/mkosi.extra/usr/lib/systemd/system/caa-gcp-t4-notice.service", "DynamicUser=yes"},
	} {
		data, err := os.ReadFile(filepath.Join(threatRepoRoot, c.file))
		if err != nil || !strings.Contains(string(data), c.want) {
			t.Errorf("%s does not hold %q (%v): the threat model's default changed", c.file, c.want, err)
		}
	}
	// A peer pod reaches no metadata server of its podVM: the image has no
	// route from the pod's namespace to it, as upstream adds on Azure and
	// AWS (setup-nat-for-imds).
	if err := filepath.WalkDir(filepath.Join(threatRepoRoot, "podvm"), func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err // links (the guest's policy link dangles here) carry no unit
		}
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), "nat-for-imds") {
			t.Errorf("%s routes peer pods to the podVM's metadata server; the threat model says none does", p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// TLS_SKIP_VERIFY=true and custom certificates are refused, as stated.
	if err := ValidateConfig(map[string]string{"TLS_SKIP_VERIFY": "true"}, false); err == nil {
		t.Error("TLS_SKIP_VERIFY=true accepted")
	}
	readme, err := os.ReadFile(filepath.Join(threatRepoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(string(readme), "\n\n", 3)[1]
	for _, want := range []string{"not from the host or Google", "not\na Confidential VM", "h100-cc", "docs/threat-model.md"} {
		if !strings.Contains(first, want) {
			t.Errorf("README's first paragraph lacks %q:\n%s", want, first)
		}
	}
}
