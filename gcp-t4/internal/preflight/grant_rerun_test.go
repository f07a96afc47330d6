package preflight

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGcloud is a gcloud that keeps custom roles and bindings in a
// directory and refuses what IAM refuses: creating a role that exists,
// updating or describing one that does not.
const fakeGcloud = `#!/bin/sh
set -e
state="$GCLOUD_STATE"
case "$1 $2 $3" in
"iam roles describe") test -f "$state/role-$4" ;;
"iam roles create")
	if test -f "$state/role-$4"; then echo "ERROR: (gcloud.iam.roles.create) ALREADY_EXISTS: role $4" >&2; exit 1; fi
	for a in "$@"; do case "$a" in --permissions=*) echo "${a#--permissions=}" > "$state/role-$4";; esac; done ;;
"iam roles update")
	test -f "$state/role-$4" || { echo "ERROR: NOT_FOUND" >&2; exit 1; }
	for a in "$@"; do case "$a" in --permissions=*) echo "${a#--permissions=}" > "$state/role-$4";; esac; done ;;
"projects add-iam-policy-binding "*|"iam service-accounts add-iam-policy-binding") echo "$*" >> "$state/bindings" ;;
*) echo "fake gcloud: unexpected $*" >&2; exit 2 ;;
esac
`

// The grants preflight prints are safe to run twice: a rerun, or a role
// left from an older grant with fewer permissions, ends with the role
// holding exactly the permissions printed, and no step fails.
func TestGrantsAreSafeToRunTwice(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("a POSIX shell is needed to run the printed commands: %v", err)
	}
	bin, state := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "gcloud"), []byte(fakeGcloud), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) {
		t.Helper()
		c := exec.Command(sh, "-c", cmd)
		c.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "GCLOUD_STATE="+state)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s\n%v: %s", cmd, err, out)
		}
	}
	perms := []string{"compute.instances.create", "compute.instances.delete"}
	caa := roleFix("demo-project", "serviceAccount:caa@demo-project.iam.gserviceaccount.com", perms, "podvm@demo-project.iam.gserviceaccount.com")
	// An older grant left the role with one permission.
	if err := os.WriteFile(filepath.Join(state, "role-"+RoleID), []byte("compute.instances.create\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(caa)
	run(caa)
	reaper := ReaperRoleFix("demo-project", "")
	run(reaper)
	run(reaper)
	for role, want := range map[string]string{RoleID: strings.Join(perms, ","), ReaperRoleID: strings.Join(ReaperPermissions, ",")} {
		got, err := os.ReadFile(filepath.Join(state, "role-"+role))
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("role %s holds %q (%v), want %q", role, got, err, want)
		}
	}
}
