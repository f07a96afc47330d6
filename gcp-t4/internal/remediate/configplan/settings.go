package configplan

import (
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// leaf is one key of a decoded config, by path.
type leaf struct {
	parts []string
	value any
}

func (l leaf) key() string { return tomledit.FormatPath(l.parts) }

func flatten(doc map[string]any) map[string]leaf {
	out := map[string]leaf{}
	var walk func(prefix []string, v any)
	walk = func(prefix []string, v any) {
		t, ok := v.(map[string]any)
		if !ok || (len(t) == 0 && len(prefix) > 0) {
			l := leaf{parts: slices.Clone(prefix), value: v}
			out[l.key()] = l
			return
		}
		for k, child := range t {
			walk(append(slices.Clone(prefix), k), child)
		}
	}
	walk(nil, doc)
	return out
}

// sameValue compares decoded TOML values (strings, numbers, booleans,
// arrays, tables).
func sameValue(a, b any) bool { return reflect.DeepEqual(a, b) }

func hasPrefix(parts, prefix []string) bool {
	return len(parts) >= len(prefix) && slices.Equal(parts[:len(prefix)], prefix)
}

var proxyPlugins = []string{"proxy_plugins"}

func strs(v []string) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = s
	}
	return out
}

// platforms is handler name's entry in the release's runtime_platforms.
func platforms(l containerdrelease.CRITables, name string) []string {
	return slices.Concat(l.RuntimePlatforms, []string{name})
}

// wanted are the settings the merged configuration must hold for h, as
// containerd's dump names them, in the order they are written.
func wanted(h Handler, l containerdrelease.CRITables) []leaf {
	rt := slices.Concat(l.Runtimes, []string{h.Name})
	var out []leaf
	if h.Snapshotter != "" {
		// Snapshot annotations are what a proxy snapshotter (nydus) reads
		// to pull in the guest; containerd's default disables them. Without
		// a snapshotter kata-deploy leaves the setting alone
		// (artifacts/snapshotters.rs sets it only when it installs one), and
		// so does the sidecar: forcing it would rewrite, and restart,
		// containerd for nothing.
		out = append(out, leaf{slices.Concat(l.Images, []string{keyDisableSnapshotAnnotations}), false})
	}
	out = append(out, []leaf{
		{slices.Concat(l.Images, []string{keyDiscardUnpackedLayers}), false},
		{slices.Concat(rt, []string{"runtime_type"}), h.RuntimeType},
		{slices.Concat(rt, []string{"runtime_path"}), h.RuntimePath},
		{slices.Concat(rt, []string{"privileged_without_host_devices"}), true},
		{slices.Concat(rt, []string{"pod_annotations"}), strs(h.PodAnnotations)},
		{slices.Concat(rt, []string{"container_annotations"}), strs(h.ContainerAnnotations)},
		{slices.Concat(rt, []string{"snapshotter"}), h.Snapshotter},
		{slices.Concat(rt, []string{"options", "ConfigPath"}), h.ConfigPath},
	}...)
	if h.Snapshotter == "" {
		// containerd's default snapshotter: the runtime's key is written
		// empty (containerd dumps it so when unset, which is what
		// kata-deploy without a snapshotter mapping leaves), and there is
		// no runtime_platforms entry or proxy plugin to keep.
		return out
	}
	if l.RuntimePlatforms != nil {
		// containerd 2.x pulls a runtime's images with the images plugin's
		// runtime_platforms[runtime].snapshotter; the v2 → v3 migration never
		// fills it from the runtime's own key (plugins/cri/images/plugin.go
		// migrateConfig reads "snapshot" and writes "runtime_platform", at
		// v2.0.14 and v2.4.2), and kata-deploy 4.x only writes it for a
		// version 3 main file.
		out = append(out, leaf{slices.Concat(platforms(l, h.Name), []string{"snapshotter"}), h.Snapshotter})
	}
	if h.SnapshotterAddress == "" {
		// A snapshotter learned without an address is defined elsewhere
		// (or built in): its proxy plugin is not ours to write.
		return out
	}
	pp := slices.Concat(proxyPlugins, []string{h.Snapshotter})
	out = append(out, leaf{slices.Concat(pp, []string{"type"}), "snapshot"}, leaf{slices.Concat(pp, []string{"address"}), h.SnapshotterAddress})
	if h.ExportsRoot != "" {
		out = append(out, leaf{slices.Concat(pp, []string{"exports", "root"}), h.ExportsRoot})
	}
	return out
}

// missing lists the wanted settings dump does not hold.
func missing(want []leaf, dump map[string]any) []leaf {
	have := flatten(dump)
	var out []leaf
	for _, w := range want {
		if got, ok := have[w.key()]; !ok || !sameValue(got.value, w.value) {
			out = append(out, w)
		}
	}
	return out
}

// owned says which dump keys a change for h may alter: the handler's own
// runtime, its runtime_platforms entry, its proxy snapshotter, the two
// image-service settings, and the runtimes and proxy plugins a re-imported
// kata-deploy drop-in adds (additions only, checked by the caller).
type owned struct {
	l      containerdrelease.CRITables
	h      Handler
	extras [][]string
}

func (o owned) prefixes() [][]string {
	out := [][]string{
		slices.Concat(o.l.Runtimes, []string{o.h.Name}),
		slices.Concat(o.l.Images, []string{keyDisableSnapshotAnnotations}),
		slices.Concat(o.l.Images, []string{keyDiscardUnpackedLayers}),
	}
	if o.h.Snapshotter != "" {
		out = append(out, slices.Concat(proxyPlugins, []string{o.h.Snapshotter}))
	}
	if o.l.RuntimePlatforms != nil {
		out = append(out, platforms(o.l, o.h.Name))
	}
	return out
}

func (o owned) has(parts []string) bool {
	for _, p := range o.prefixes() {
		if hasPrefix(parts, p) {
			return true
		}
	}
	return false
}

// violations lists the keys that differ between two dumps and may not. An
// extra (kata-deploy's own runtime or proxy plugin) may only be added.
func violations(before, after map[string]any, o owned) []string {
	b, a := flatten(before), flatten(after)
	keys := map[string][]string{}
	for k, l := range b {
		keys[k] = l.parts
	}
	for k, l := range a {
		keys[k] = l.parts
	}
	var out []string
	for k, parts := range keys {
		if parts[0] == "imports" {
			// 1.7 lists the files it loaded there; 2.x the entries.
			continue
		}
		bl, inB := b[k]
		al, inA := a[k]
		if inB && inA && sameValue(bl.value, al.value) {
			continue
		}
		// An empty table that gains keys (or loses its last ones) shows as
		// a leaf on one side only; its keys are judged on their own.
		if inB && !inA && isEmptyTable(bl.value) || inA && !inB && isEmptyTable(al.value) {
			continue
		}
		if o.has(parts) {
			continue
		}
		extra := false
		for _, e := range o.extras {
			if hasPrefix(parts, e) && !anyUnder(b, e) {
				extra = true
			}
		}
		if !extra {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func isEmptyTable(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

func anyUnder(m map[string]leaf, prefix []string) bool {
	for _, l := range m {
		if hasPrefix(l.parts, prefix) {
			return true
		}
	}
	return false
}

// fingerprint hashes the handler's effective settings in dump.
func fingerprint(dump map[string]any, o owned) string {
	var lines []string
	for k, l := range flatten(dump) {
		if o.has(l.parts) {
			v, _ := tomledit.Render(l.value)
			lines = append(lines, k+"="+v)
		}
	}
	sort.Strings(lines)
	return sum([]byte(strings.Join(lines, "\n")))
}
