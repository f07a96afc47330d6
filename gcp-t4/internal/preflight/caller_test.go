package preflight

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/testkey"
)

const caaAccount = "caa@demo-project.iam.gserviceaccount.com"

// caaKey is CAA's service account key, as `gcloud iam service-accounts
// keys create` writes one, with a key made for the test run.
var caaKey = sync.OnceValue(func() string {
	b, err := testkey.ServiceAccount(caaAccount, "0123456789abcdef")
	if err != nil {
		panic(err)
	}
	return string(b)
})

// TestGrantForTheAccountCAARunsAs: testIamPermissions answers for the
// caller only, so a caller who is not CAA's account (here one holding
// none of the provider's permissions, as a project viewer) is never told
// "pass"; preflight prints CAA's least-privilege grant instead. With CAA's
// own key it tests CAA's permissions.
func TestGrantForTheAccountCAARunsAs(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	viewer := []string{"compute.firewalls.list", "compute.networks.get", "compute.projects.get", "compute.regions.get", "compute.routers.list", "compute.subnetworks.get", "compute.images.get", "resourcemanager.projects.get"}
	member := "serviceAccount:" + caaAccount

	t.Run("-member, someone else's credentials", func(t *testing.T) {
		fake := readyProject(t)
		fake.SetPermissions(viewer...)
		rs := Run(ctx(t), Options{Cfg: baseConfig(fake), Member: member}, quiet())
		r, ok := find(rs, "permissions "+member)
		if !ok || r.Status != Warn || !strings.Contains(r.Detail, "not checked: testIamPermissions answers only for the caller") {
			t.Fatalf("permissions result %+v", r)
		}
		want := ProviderPermissions(baseConfig(fake), nil)
		for _, s := range []string{"gcloud iam roles create caaGcpT4 --project=demo-project", "--permissions=" + strings.Join(want, ",") + " ",
			"gcloud projects add-iam-policy-binding demo-project --member=" + member + " --role=projects/demo-project/roles/caaGcpT4 --condition='expression=" + PodVMCondition} {
			if !strings.Contains(r.Fix, s) {
				t.Errorf("grant lacks %q:\n%s", s, r.Fix)
			}
		}
		if n := fake.CountCalls("projects.testIamPermissions"); n != 0 {
			t.Errorf("testIamPermissions called %d times: it would test the caller, not %s", n, member)
		}
		if Failed(rs) {
			for _, r := range rs {
				if r.Status == Fail && !strings.HasPrefix(r.Check, "mtu") {
					t.Errorf("%s: %s", r.Check, r.Detail)
				}
			}
		}
	})
	t.Run("no member", func(t *testing.T) {
		fake := readyProject(t)
		rs := Run(ctx(t), Options{Cfg: baseConfig(fake)}, quiet())
		expect(t, rs, "permissions", Warn, "the account CAA runs as is unknown", "--member=serviceAccount:CAA_SERVICE_ACCOUNT_EMAIL")
	})
	t.Run("CAA's own key", func(t *testing.T) {
		fake := readyProject(t)
		fake.RevokePermissions("compute.instances.delete")
		cfg := baseConfig(fake)
		cfg.Credentials = caaKey()
		rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
		expect(t, rs, "permissions "+member, Fail, "missing compute.instances.delete", "--member="+member)
		fake.SetPermissions(ProviderPermissions(cfg, nil)...)
		rs = Run(ctx(t), Options{Cfg: cfg, Member: member}, quiet())
		expect(t, rs, "permissions "+member, Pass, member+" (the credentials preflight runs with) holds the", "")
	})
	t.Run("-credentials-file", func(t *testing.T) {
		fake := readyProject(t)
		fake.SetNetworkMTU(1500)
		key := filepath.Join(t.TempDir(), "key.json")
		if err := os.WriteFile(key, []byte(caaKey()), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_ENDPOINT", "GCP_CREDENTIALS", "KUBECONFIG", "GCP_PROVISIONING_MODEL", "GCP_SERVICE_ACCOUNT"} {
			t.Setenv(v, "")
		}
		var out, errOut strings.Builder
		code := Main(ctx(t), []string{"-gcp-project-id", fake.Project(), "-zone", "us-central1-a", "-image-name", "podvm-t4", "-network", "default", "-subnetwork", "default",
			"-gcp-endpoint", fake.URL(), "-credentials-file", key}, &out, &errOut, quiet())
		if code != 0 || !strings.Contains(out.String(), "pass  permissions "+member) {
			t.Errorf("exit %d\n%s%s", code, out.String(), errOut.String())
		}
	})
}
