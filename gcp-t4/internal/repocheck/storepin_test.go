package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachestore"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// TestStoreFormatIsThePodVMsGuestComponents: `cache build` writes the
// pre-unpacked store for imagestore.GuestComponents, and the podVM's
// podvm-cache-store hands image-rs only a store for the guest-components
// its CDH is built from, which the image build reads from the pins (the
// confidential-data-hub reference's <commit>-<arch> tag). Moving one pin
// without the other would make every podVM refuse every store; this fails
// first. It also checks that the unit passes the file the build writes.
func TestStoreFormatIsThePodVMsGuestComponents(t *testing.T) {
	r := root(t)
	pins, err := os.ReadFile(filepath.Join(r, "podvm/guest-artefacts.pins"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^confidential-data-hub\s+\S+:([0-9a-f]{40})-\S+\s`).FindSubmatch(pins)
	if m == nil {
		t.Fatal("podvm/guest-artefacts.pins has no confidential-data-hub line with a <commit>-<arch> tag")
	}
	if string(m[1]) != imagestore.GuestComponents {
		t.Errorf("the podVM's CDH is guest-components %s, the store is written for %s (imagestore.GuestComponents): read image-rs's store format at the new pin and update imagestore", m[1], imagestore.GuestComponents)
	}
	build, err := os.ReadFile(filepath.Join(r, "podvm/scripts/build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(build), `"$gen/tools-tree`+cachestore.GuestComponentsFile+`"`) {
		t.Errorf("podvm/scripts/build.sh does not write %s, which podvm-cache-store reads", cachestore.GuestComponentsFile)
	}
	unit, err := os.ReadFile(filepath.Join(r, "podvm/mkosi.extra/usr/lib/systemd/system/caa-gcp-t4-cache-store.service"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ExecStart=/usr/bin/podvm-cache-store -dir " + cachestore.Dir + " -work-dir " + cachestore.WorkDir + " -guest-components-file " + cachestore.GuestComponentsFile + "\n"
	if !strings.Contains(string(unit), want) {
		t.Errorf("caa-gcp-t4-cache-store.service does not run %q", strings.TrimSpace(want))
	}
}
