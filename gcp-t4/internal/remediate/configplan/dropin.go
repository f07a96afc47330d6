package configplan

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// dropInVersion is the config version of the sidecar's drop-in. A release
// that does not migrate each file (MigratesEachFile false: 2.0–2.2) merges
// all files first and migrates the result from the version of the last file
// merged, so the drop-in has the main file's version (a version 3 drop-in
// over GKE's version 2 file would leave every GKE CRI setting unmigrated and
// ignored). One that does (2.3+) migrates every file on its own, and a
// version 2 file migrates discard_unpacked_layers only when it also defines
// a runtime (plugins/cri/images/plugin.go migrateConfig returns early
// without containerd.runtimes, v2.4.2), which the sidecar's drop-in does not
// when kata-deploy's defines the handler: it uses the split CRI plugins of
// version 3 directly.
func dropInVersion(run containerdrelease.Runtime, main int) int {
	if run.MigratesEachFile && main < 3 {
		return 3
	}
	return main
}

// fileKey maps a key of the release's config dump (CRI layout dump) to
// where a drop-in of config version version sets it, in that version's CRI
// layout: on 2.x a version 2 drop-in uses the version 2 CRI table, which
// the plugins' migration copies into the split plugins (and which would
// override a split-plugin key the same migration copies over from GKE's
// version 2 main file). Other keys (runtime_platforms, proxy_plugins) are
// where they are in every version.
func fileKey(parts []string, dump containerdrelease.CRITables, version int) []string {
	file := containerdrelease.FileCRI(version)
	switch {
	case hasPrefix(parts, dump.Runtimes):
		return slices.Concat(file.Runtimes, parts[len(dump.Runtimes):])
	case hasPrefix(parts, dump.Images) && len(parts) == len(dump.Images)+1 &&
		(parts[len(parts)-1] == keyDiscardUnpackedLayers || parts[len(parts)-1] == keyDisableSnapshotAnnotations):
		return slices.Concat(file.Images, parts[len(dump.Images):])
	}
	return parts
}

// renderDropIn writes the sidecar's drop-in: the given settings, keys of a
// config dump in CRI layout dump, in config version version
// (dropInVersion).
func renderDropIn(h Handler, dump containerdrelease.CRITables, version int, settings []leaf) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Owned by gcp-t4-node remediate: what the %s runtime handler for peer pods\n", h.Name)
	b.WriteString("# needs and the rest of containerd's configuration lacks. Rewritten whenever\n")
	b.WriteString("# it differs; change the DaemonSet's flags instead.\n")
	fmt.Fprintf(&b, "version = %d\n", version)
	type kv struct {
		table []string
		key   string
		value any
	}
	var kvs []kv
	for _, s := range settings {
		p := fileKey(s.parts, dump, version)
		kvs = append(kvs, kv{p[:len(p)-1], p[len(p)-1], s.value})
	}
	sort.SliceStable(kvs, func(i, j int) bool {
		return tomledit.FormatPath(kvs[i].table) < tomledit.FormatPath(kvs[j].table)
	})
	var table []string
	for _, c := range kvs {
		if !slices.Equal(table, c.table) {
			table = c.table
			fmt.Fprintf(&b, "\n[%s]\n", tomledit.FormatPath(table))
		}
		v, err := tomledit.Render(c.value)
		if err != nil {
			panic(err) // wanted values are strings, bools and string lists
		}
		fmt.Fprintf(&b, "  %s = %s\n", tomledit.FormatKey(c.key), v)
	}
	return []byte(b.String())
}
