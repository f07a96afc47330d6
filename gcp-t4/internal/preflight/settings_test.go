package preflight

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A run with no settings and no credentials names every missing setting
// and the credentials together, each with its fix, instead of stopping at
// the credentials.
func TestBareRunReportsSettingsAndCredentials(t *testing.T) {
	clearProviderEnv(t)
	// No Application Default Credentials: the variable names a file that
	// is not there, which fails at once and the same way on every machine
	// (a search for credentials would ask a metadata server where there
	// may be one).
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "absent.json"))
	var out, errOut strings.Builder
	code := Main(ctx(t), []string{"-o", "json"}, &out, &errOut, quiet())
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errOut.String())
	}
	rs := decodeResults(t, out.String())
	var names []string
	for _, r := range rs {
		if r.Status != Fail {
			t.Errorf("%s: %s, want only failures", r.Check, r.Status)
		}
		names = append(names, r.Check)
	}
	if got := strings.Join(names, ","); got != "config,config,config,config,credentials" {
		t.Errorf("checks %s; want the four missing settings and the credentials", got)
	}
	for i, v := range []string{"GCP_PROJECT_ID (-gcp-project-id)", "GCP_ZONE (-zone)", "PODVM_IMAGE_NAME (-image-name)", "GCP_NETWORK (-network)"} {
		if i < len(rs) && !strings.Contains(rs[i].Detail, v+" is required") {
			t.Errorf("config failure %d: %q, want %s", i, rs[i].Detail, v)
		}
	}
	expect(t, rs, "config", Fail, "", "with -kubeconfig of a cluster CAA is installed in, preflight reads them from its peer-pods-cm")
	expect(t, rs, "credentials", Fail, "absent.json", "gcloud auth application-default login")
	var table strings.Builder
	if err := Print(&table, "table", rs); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(table.String(), "set the variable the message names"); n != 1 {
		t.Errorf("the shared config fix is printed %d times:\n%s", n, table.String())
	}
}

// With a service account key given, a credentials failure is about that
// key: never gcloud's own login or access token, which the run does not
// use.
func TestCredentialsFixWithAKeyFile(t *testing.T) {
	clearProviderEnv(t)
	key := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(key, []byte(caaKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	notKey := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(notKey, []byte(`{"type":"authorized_user","client_id":"x","client_secret":"y","refresh_token":"z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		file       string
		code       int // the emulator's answer to projects.get; 0: none injected
		fix        string
		wantDetail string
	}{
		{"refused", key, 401, "gcloud iam service-accounts keys list --iam-account=" + caaAccount + " --project=demo-project", "refused"},
		{"no answer", key, 500, "nothing to change in the key (-credentials-file " + key + ", for " + caaAccount + ")", "calling the Compute API"},
		{"not a service account key", notKey, 401, "-credentials-file " + notKey + " is not a service account key: mkdir -p -m 700 ~/.config/caa-gcp-t4 && gcloud iam service-accounts keys create ~/.config/caa-gcp-t4/caa-key.json", "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := readyProject(t)
			fake.FailNext("GET", "projects.get", tc.code, 1)
			var out, errOut strings.Builder
			Main(ctx(t), []string{"-gcp-project-id", fake.Project(), "-zone", "us-central1-a", "-image-name", "podvm-t4", "-network", "default",
				"-gcp-endpoint", fake.URL(), "-credentials-file", tc.file, "-o", "json"}, &out, &errOut, quiet())
			rs := decodeResults(t, out.String())
			expect(t, rs, "credentials", Fail, tc.wantDetail, tc.fix)
			if r, _ := find(rs, "credentials"); strings.Contains(r.Fix, "application-default") {
				t.Errorf("with a key file the fix suggests gcloud's own credentials: %s", r.Fix)
			}
		})
	}
}

// The missing-image fix is what the build guide does: gce-pack.sh with
// the provider's image name, and what it says the script uploads (the
// tarball's name, the family, the guest OS features) is what the script
// does.
func TestImageFixIsWhatGcePackUploads(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "..", "podvm", "scripts", "gce-pack.sh"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(script)
	for _, want := range []string{
		"\nfeatures=" + PackGuestOSFeatures + "\n",
		"\nfamily=${GCE_IMAGE_FAMILY:-" + PackImageFamily + "}\n",
		"\nname=${GCE_IMAGE_NAME:-caa-gcp-t4-podvm-$key}\n",
		`"$bucket/$name.tar.gz"`,
		`--source-uri="$bucket/$name.tar.gz"`,
		`--guest-os-features="$features"`,
		`bucket=${GCE_BUCKET:-`, `${GCE_PROJECT:+--project=$GCE_PROJECT}`, `"${GCE_EXECUTE:-0}" = 1`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("gce-pack.sh no longer has %q: preflight's image fix says what it does", want)
		}
	}
	fix := packFix("demo-project", "podvm-t4", "")
	for _, want := range []string{"make podvm-binaries && make podvm", "GCE_BUCKET=gs://BUCKET GCE_PROJECT=demo-project GCE_IMAGE_NAME=podvm-t4 GCE_EXECUTE=1 podvm/scripts/gce-pack.sh ",
		"uploads gs://BUCKET/podvm-t4.tar.gz and creates image podvm-t4 in family " + PackImageFamily, "--guest-os-features=" + PackGuestOSFeatures} {
		if !strings.Contains(fix, want) {
			t.Errorf("image fix lacks %q:\n%s", want, fix)
		}
	}
	if fam := packFix("demo-project", "", "podvm-t4"); !regexp.MustCompile(`GCE_IMAGE_FAMILY=podvm-t4 GCE_EXECUTE=1 .* in family podvm-t4,`).MatchString(fam) || strings.Contains(fam, "GCE_IMAGE_NAME") {
		t.Errorf("image family fix:\n%s", fam)
	}
}
