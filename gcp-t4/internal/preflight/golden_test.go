package preflight

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// update rewrites the golden files from what preflight prints now:
// go test ./internal/preflight -run TestTableOnTheEmulatorsDefaultProject -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden with the output of this run")

// clearProviderEnv leaves the provider's settings to the flags alone.
func clearProviderEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_ENDPOINT",
		"GCP_CREDENTIALS", "KUBECONFIG", "GCP_PROVISIONING_MODEL", "GCP_SERVICE_ACCOUNT", "GCP_INSTANCE_TEMPLATE", "GCP_NETWORK_TAGS"} {
		t.Setenv(v, "")
	}
	// No Application Default Credentials reach preflight but what a test
	// gives it.
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("CLOUDSDK_CONFIG", t.TempDir())
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if got != string(want) {
		t.Errorf("preflight's table differs from %s (if the change is meant, rerun with -update and read the diff):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// fixLine is a command line of a fix: after "fix: " or at the fix's
// continuation indent.
var fixLine = regexp.MustCompile(`^      (?:fix: |     )(.*)$`)

// checkLayout holds the table to its layout: every row's detail starts in
// the same column (a check too long for it takes a line of its own), fix
// lines are indented under their row, and no command is printed twice.
func checkLayout(t *testing.T, out string, rs []Result) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	seen := map[string]int{}
	col := -1
	row := 0
	for i, l := range lines {
		if m := fixLine.FindStringSubmatch(l); m != nil {
			cmd, _, _ := strings.Cut(m[1], commentSep)
			if strings.HasPrefix(cmd, "(as under ") {
				continue
			}
			if j, dup := seen[cmd]; dup {
				t.Errorf("line %d prints again the command of line %d: %s", i+1, j+1, cmd)
			}
			seen[cmd] = i
			continue
		}
		if row >= len(rs) {
			break
		}
		r := rs[row]
		prefix := string(r.Status) + strings.Repeat(" ", statusWidth-len(r.Status)) + gap + r.Check
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("line %d %q: want row %d, %s %s", i+1, l, row, r.Status, r.Check)
		}
		detailLine := l
		if l == prefix && r.Detail != "" {
			// The check took the whole line; its detail is on the next.
			detailLine = lines[i+1]
		}
		at := utf8.RuneCountInString(detailLine) - utf8.RuneCountInString(strings.SplitN(r.Detail, "\n", 2)[0])
		if !strings.HasSuffix(detailLine, strings.SplitN(r.Detail, "\n", 2)[0]) {
			t.Fatalf("line %d %q does not end in its detail %q", i+1, detailLine, r.Detail)
		}
		if col < 0 {
			col = at
		}
		if at != col {
			t.Errorf("line %d: the detail starts at column %d, the table's is %d:\n%s", i+1, at, col, detailLine)
		}
		row++
	}
	if row != len(rs) {
		t.Errorf("the table shows %d of %d results", row, len(rs))
	}
}

// TestTableOnTheEmulatorsDefaultProject: preflight's table for the
// emulator's default project (GCE's defaults: default-allow-internal, no
// Cloud NAT, Private Google Access off, MTU 1460) and the podVM image
// missing, as a new user's first run shows it. The golden file is the
// whole output; the layout is also held by rule, so a regenerated file
// cannot hide a fix printed twice or a column that moves.
func TestTableOnTheEmulatorsDefaultProject(t *testing.T) {
	clearProviderEnv(t)
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	args := []string{"-gcp-project-id", fake.Project(), "-zone", "us-central1-a", "-image-name", "podvm-missing", "-network", "global/networks/default",
		"-subnetwork", "default", "-gcp-endpoint", fake.URL(), "-o", "table"}
	var out, errOut strings.Builder
	code := Main(ctx(t), args, &out, &errOut, quiet())
	if code != 1 {
		t.Fatalf("exit %d, want 1 (the image, NAT, Private Google Access and MTU fail)\n%s%s", code, out.String(), errOut.String())
	}
	got := strings.ReplaceAll(out.String(), fake.URL(), "GCP_ENDPOINT")
	golden(t, "default-project.golden", got)

	// The same run's results, for the layout rules.
	var js strings.Builder
	if Main(ctx(t), append(args[:len(args)-2], "-o", "json"), &js, &errOut, quiet()) != 1 {
		t.Fatal("the json run differs")
	}
	rs := decodeResults(t, js.String())
	checkLayout(t, out.String(), rs)
	for _, want := range []string{"fail  image podvm-missing", "(as under \"firewall tcp:15150 others→podVMs (default)\" above)",
		"GCE_IMAGE_NAME=podvm-missing GCE_EXECUTE=1 podvm/scripts/gce-pack.sh", "--guest-os-features=" + PackGuestOSFeatures} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q", want)
		}
	}
}

func decodeResults(t *testing.T, js string) []Result {
	t.Helper()
	var doc struct{ Results []Result }
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	return doc.Results
}
