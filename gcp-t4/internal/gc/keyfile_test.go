package gc

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/testkey"
)

// reaperKey is a service account key as `gcloud iam service-accounts keys
// create` writes one, with a key made for the test.
func reaperKey(t *testing.T) []byte {
	t.Helper()
	b, err := testkey.ServiceAccount("reaper@p.iam.gserviceaccount.com", "fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReaperReadsItsKeyFromAFile: the key the reaper Deployment mounts
// (REAPER_CREDENTIALS_FILE) becomes the provider's credentials in memory,
// never an environment variable; no file there is Application Default
// Credentials (the Secret is optional); a file that is not a usable key, or
// a second key in GCP_CREDENTIALS, stops the reaper naming the file.
func TestReaperReadsItsKeyFromAFile(t *testing.T) {
	t.Setenv("GCP_CREDENTIALS", "")
	dir := t.TempDir()
	key := reaperKey(t)
	keyPath := filepath.Join(dir, "key.json")
	if err := os.WriteFile(keyPath, key, 0o400); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (*flag.FlagSet, *providerflags.Flags) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		pf := providerflags.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs, pf
	}

	fs, pf := parse()
	if err := useKeyFile(fs, pf.Config().Credentials, keyPath, quiet()); err != nil {
		t.Fatal(err)
	}
	if cfg := pf.Config(); cfg.Credentials != string(key) || cfg.CredentialsOption() == nil {
		t.Errorf("credentials after the file: %d bytes, option %v; want the key file's content", len(cfg.Credentials), cfg.CredentialsOption())
	}
	if v := os.Getenv("GCP_CREDENTIALS"); v != "" {
		t.Error("the key reached the process environment")
	}

	fs, pf = parse()
	if err := useKeyFile(fs, pf.Config().Credentials, filepath.Join(dir, "absent", "key.json"), quiet()); err != nil || pf.Config().Credentials != "" {
		t.Errorf("no file: %v, credentials %q; want Application Default Credentials", err, pf.Config().Credentials)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"type":"authorized_user","refresh_token":"secret-refresh"}`), 0o400); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		path, given, want string
	}{
		"not a key":  {bad, "", `REAPER_CREDENTIALS_FILE ` + bad + `: type "authorized_user" is not allowed`},
		"unreadable": {dir, "", "REAPER_CREDENTIALS_FILE " + dir + ": read " + dir},
		"two keys":   {keyPath, string(key), "REAPER_CREDENTIALS_FILE " + keyPath + " and GCP_CREDENTIALS both give a key"},
	} {
		fs, _ := parse()
		err := useKeyFile(fs, tc.given, tc.path, quiet())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "secret-refresh") || strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%s: the error shows the file's content: %v", name, err)
		}
	}

	// The command: REAPER_CREDENTIALS_FILE is read before anything else
	// and a bad file stops it with exit 2, naming the variable.
	t.Setenv(ReaperCredentialsEnv, bad)
	var stdout, stderr bytes.Buffer
	if code := MainReaper(context.Background(), nil, &stdout, &stderr, quiet()); code != 2 || !strings.Contains(stderr.String(), "gcp-t4 reaper: REAPER_CREDENTIALS_FILE "+bad) {
		t.Errorf("reaper with a bad key file: exit %d\n%s", code, stderr.String())
	}
}
