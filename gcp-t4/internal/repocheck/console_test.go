package repocheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"
	"github.com/caa-gcp-t4/gcp-t4/internal/cachestore"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/consoleline"
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
		"podvm/mkosi.extra/usr/lib/caa-gcp-t4/boot-failed":        consoleline.BootFailedPrefix,
		"podvm/initrd/mkosi.extra/usr/lib/caa-gcp-t4/boot-failed": consoleline.BootFailedPrefix,
		"podvm/mkosi.extra/usr/lib/caa-gcp-t4/cdh-check":          consoleline.CDHFailedPrefix,
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
	if cachestore.ConsolePrefix != consoleline.StorePrefix {
		t.Errorf("podvm-cache-store prints %q, the provider reads %q", cachestore.ConsolePrefix, consoleline.StorePrefix)
	}
}

// TestLayersLineMatchesTheProvider: the sweep's line, which the provider
// tells on the pod (PodVMImageLayers), is printed by podvm-cache-store
// sweep with the prefix the provider reads, and its JSON carries the
// fields the provider reads by name.
func TestLayersLineMatchesTheProvider(t *testing.T) {
	if cachestore.SweepPrefix != consoleline.LayersPrefix {
		t.Errorf("podvm-cache-store sweep prints %q, the provider reads %q", cachestore.SweepPrefix, consoleline.LayersPrefix)
	}
	b, err := json.Marshal(cachestore.SweepReport{Removed: 1, RemovedBytes: 2, Pending: 3, PendingBytes: 4, FreeBytes: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"removed":1`, `"removed_bytes":2`, `"pending":3`, `"pending_bytes":4`, `"free_bytes":5`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("the sweep's line %s lacks %s, which the provider reads", b, k)
		}
	}
}

// TestPullLineMatchesTheProvider: the cache mirror's pull lines, which
// the provider turns into each container's PodVMImageSource Event, carry
// the prefix and the words the provider reads.
func TestPullLineMatchesTheProvider(t *testing.T) {
	if cachemirror.PullPrefix != consoleline.PullPrefix {
		t.Errorf("the cache mirror prints %q, the provider reads %q", cachemirror.PullPrefix, consoleline.PullPrefix)
	}
	b, err := json.Marshal(cachemirror.PullLine{Image: "sha256:x", Served: cachemirror.ServedLayers})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"image":"sha256:x","served":"layers"}` {
		t.Errorf("the pull line's JSON is %s, the provider reads {\"image\":…,\"served\":…}", b)
	}
	// The provider reads these words (its TestImageSourceToldPerContainer
	// feeds it each): the mirror must print exactly them.
	if cachemirror.ServedManifest != "manifest" || cachemirror.ServedLayers != "layers" || cachemirror.ServedAbsent != "absent" {
		t.Errorf("the cache mirror says it served %q, %q, %q; the provider reads manifest, layers, absent",
			cachemirror.ServedManifest, cachemirror.ServedLayers, cachemirror.ServedAbsent)
	}
}
