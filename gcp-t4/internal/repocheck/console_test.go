package repocheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachestore"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// TestConsoleLinesMatchThePodVM: the provider finds a podVM's boot and
// CDH failures on its serial console by the prefixes the podVM's scripts
// print (it may not import them, so both sides spell them). A script
// that changes its line's prefix would make those failures silent on
// the pod; this fails instead. (gpu-init's prefix is checked against its
// Go constant in internal/gc's start-up scenario.)
func TestConsoleLinesMatchThePodVM(t *testing.T) {
	r := root(t)
	for script, prefix := range map[string]string{
		"podvm/mkosi.extra/usr/lib/caa-gcp-t4/boot-failed":        gcpt4.ConsoleBootFailedPrefix,
		"podvm/initrd/mkosi.extra/usr/lib/caa-gcp-t4/boot-failed": gcpt4.ConsoleBootFailedPrefix,
		"podvm/mkosi.extra/usr/lib/caa-gcp-t4/cdh-check":          gcpt4.ConsoleCDHFailedPrefix,
	} {
		data, err := os.ReadFile(filepath.Join(r, script))
		if err != nil {
			t.Fatal(err)
		}
		if want := `line="` + prefix + `{`; !strings.Contains(string(data), want) {
			t.Errorf("%s does not print %q: the provider would not see its failure", script, want)
		}
		if !strings.Contains(string(data), `echo "$line" >/dev/console`) {
			t.Errorf("%s does not write its line to the console", script)
		}
	}
}

// TestStoreLineMatchesTheProvider: the cache disk's line, which the
// provider tells on the pod (PodVMCacheDisk), is printed by
// podvm-cache-store with the prefix the provider reads.
func TestStoreLineMatchesTheProvider(t *testing.T) {
	if cachestore.ConsolePrefix != gcpt4.ConsoleStorePrefix {
		t.Errorf("podvm-cache-store prints %q, the provider reads %q", cachestore.ConsolePrefix, gcpt4.ConsoleStorePrefix)
	}
}
