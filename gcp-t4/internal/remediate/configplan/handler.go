package configplan

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// Handler is the containerd runtime handler to keep.
type Handler struct {
	Name                 string
	RuntimeType          string
	RuntimePath          string
	ConfigPath           string
	Snapshotter          string // proxy snapshotter name, also the proxy_plugins key
	SnapshotterAddress   string
	ExportsRoot          string // proxy_plugins.<snapshotter>.exports.root; empty: not set
	PodAnnotations       []string
	ContainerAnnotations []string
}

// kata-deploy 4.x names, read in kata-containers at tags 4.0.0 (cf82bb35c8)
// and 4.1.0 (ddcb1ad8d2), tools/packaging/kata-deploy/binary/src:
// config.rs NYDUS_FOR_KATA_TEE; artifacts/snapshotters.rs
// configure_nydus_snapshotter (proxy plugin type, address
// /run/<name>/containerd-nydus-grpc.sock, exports.root /var/lib/<name>);
// runtime/containerd.rs configure_containerd_runtime (runtime_type
// io.containerd.kata-<shim>.v2, annotations); utils/system.rs
// get_kata_containers_config_path (share/defaults/kata-containers/runtimes/<shim>).
const (
	// KataDeployNydus is the nydus snapshotter kata-deploy runs for guest
	// pull, and its proxy plugin's name.
	KataDeployNydus = "nydus-for-kata-tee"
	// KataDeployDir is kata-deploy's install directory on the host.
	KataDeployDir       = "/opt/kata"
	kataDeployShim      = KataDeployDir + "/bin/containerd-shim-kata-v2"
	kataDeployConfigDir = KataDeployDir + "/share/defaults/kata-containers"
)

// KataDeployHandler is what kata-deploy 4.x registers for its "remote" shim
// with the nydus snapshotter mapping of its chart (values.yaml
// shims.remote.containerd.snapshotter: nydus), so that the sidecar and
// kata-deploy write the same handler and never flip it back and forth.
func KataDeployHandler() Handler {
	return Handler{
		Name:                 "kata-remote",
		RuntimeType:          "io.containerd.kata-remote.v2",
		RuntimePath:          kataDeployShim,
		ConfigPath:           kataDeployConfigDir + "/runtimes/remote/configuration-remote.toml",
		Snapshotter:          KataDeployNydus,
		SnapshotterAddress:   "/run/" + KataDeployNydus + "/containerd-nydus-grpc.sock",
		ExportsRoot:          "/var/lib/" + KataDeployNydus,
		PodAnnotations:       []string{"io.katacontainers.*"},
		ContainerAnnotations: []string{"io.kubernetes.container.terminationMessage*"},
	}
}

// WithoutSnapshotter is h on containerd's default snapshotter: no
// snapshotter, so no proxy plugin address or root either.
func (h Handler) WithoutSnapshotter() Handler {
	h.Snapshotter, h.SnapshotterAddress, h.ExportsRoot = "", "", ""
	return h
}

var tomlName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Validate names the first bad field and the flag that sets it.
func (h Handler) Validate() error {
	if !tomlName.MatchString(h.Name) {
		return fmt.Errorf("--handler %q: use letters, digits, '.', '_' or '-'", h.Name)
	}
	if h.Snapshotter != "" && !tomlName.MatchString(h.Snapshotter) {
		return fmt.Errorf("--snapshotter %q: use letters, digits, '.', '_' or '-', or empty for containerd's default snapshotter", h.Snapshotter)
	}
	if h.Snapshotter == "" && (h.SnapshotterAddress != "" || h.ExportsRoot != "") {
		return fmt.Errorf("--snapshotter-address %q / --snapshotter-root %q without --snapshotter: a proxy plugin needs a name; give --snapshotter or leave both empty", h.SnapshotterAddress, h.ExportsRoot)
	}
	if !strings.HasPrefix(h.RuntimeType, "io.containerd.") {
		return fmt.Errorf("--runtime-type %q: want a containerd shim name such as io.containerd.kata-remote.v2", h.RuntimeType)
	}
	for _, f := range []struct{ flag, v string }{
		{"--runtime-path", h.RuntimePath}, {"--kata-config", h.ConfigPath},
	} {
		if !filepath.IsAbs(f.v) {
			return fmt.Errorf("%s %q: want an absolute host path", f.flag, f.v)
		}
	}
	if h.SnapshotterAddress != "" && !filepath.IsAbs(h.SnapshotterAddress) {
		return fmt.Errorf("--snapshotter-address %q: want an absolute host path, or empty where the snapshotter's proxy plugin is defined elsewhere", h.SnapshotterAddress)
	}
	if h.ExportsRoot != "" && !filepath.IsAbs(h.ExportsRoot) {
		return fmt.Errorf("--snapshotter-root %q: want an absolute host path or empty", h.ExportsRoot)
	}
	return nil
}

// Equal reports whether two handlers write the same configuration.
func (h Handler) Equal(o Handler) bool {
	return h.Name == o.Name && h.RuntimeType == o.RuntimeType && h.RuntimePath == o.RuntimePath &&
		h.ConfigPath == o.ConfigPath && h.Snapshotter == o.Snapshotter && h.SnapshotterAddress == o.SnapshotterAddress &&
		h.ExportsRoot == o.ExportsRoot && slices.Equal(h.PodAnnotations, o.PodAnnotations) &&
		slices.Equal(h.ContainerAnnotations, o.ContainerAnnotations)
}

// Settings the handler needs from containerd's image service.
const (
	keyDisableSnapshotAnnotations = "disable_snapshot_annotations"
	keyDiscardUnpackedLayers      = "discard_unpacked_layers"
)

// runtimeTables are where a file may declare runtime handlers: the CRI
// layout of config version 2 or of version 3 and later, whatever the
// release (kata-deploy's drop-in follows the main file's version).
var runtimeTables = [][]string{
	containerdrelease.FileCRI(2).Runtimes,
	containerdrelease.FileCRI(3).Runtimes,
}

func lookup(doc map[string]any, path ...string) (any, bool) {
	var cur any = doc
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func lookupMap(doc map[string]any, path ...string) (map[string]any, bool) {
	v, ok := lookup(doc, path...)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

func str(doc map[string]any, path ...string) string {
	v, _ := lookup(doc, path...)
	s, _ := v.(string)
	return s
}

func strsOf(doc map[string]any, path ...string) []string {
	v, _ := lookup(doc, path...)
	l, _ := stringList(v)
	return l
}

// handlerFromDoc reads handler name from a config file or a config dump,
// in either CRI layout.
func handlerFromDoc(doc map[string]any, name string) (Handler, bool) {
	for _, t := range runtimeTables {
		rt := slices.Concat(t, []string{name})
		if str(doc, slices.Concat(rt, []string{"runtime_type"})...) == "" {
			continue
		}
		h := Handler{
			Name:                 name,
			RuntimeType:          str(doc, slices.Concat(rt, []string{"runtime_type"})...),
			RuntimePath:          str(doc, slices.Concat(rt, []string{"runtime_path"})...),
			ConfigPath:           str(doc, slices.Concat(rt, []string{"options", "ConfigPath"})...),
			Snapshotter:          str(doc, slices.Concat(rt, []string{"snapshotter"})...),
			PodAnnotations:       strsOf(doc, slices.Concat(rt, []string{"pod_annotations"})...),
			ContainerAnnotations: strsOf(doc, slices.Concat(rt, []string{"container_annotations"})...),
		}
		if h.Snapshotter != "" {
			h.SnapshotterAddress = str(doc, "proxy_plugins", h.Snapshotter, "address")
			h.ExportsRoot = str(doc, "proxy_plugins", h.Snapshotter, "exports", "root")
		}
		return h, true
	}
	return Handler{}, false
}

func tableNames(doc map[string]any) (runtimes, proxies []string) {
	for _, t := range runtimeTables {
		if m, ok := lookupMap(doc, t...); ok {
			for k := range m {
				runtimes = append(runtimes, k)
			}
		}
	}
	if m, ok := lookupMap(doc, "proxy_plugins"); ok {
		for k := range m {
			proxies = append(proxies, k)
		}
	}
	return runtimes, proxies
}

// Learn fills the fields of h not set explicitly (explicit[flag], by the
// sidecar's flag names) from from.
func Learn(h Handler, from Handler, explicit map[string]bool) Handler {
	set := func(flag string, dst *string, v string) {
		if !explicit[flag] && v != "" {
			*dst = v
		}
	}
	set("runtime-type", &h.RuntimeType, from.RuntimeType)
	set("runtime-path", &h.RuntimePath, from.RuntimePath)
	set("kata-config", &h.ConfigPath, from.ConfigPath)
	switch {
	case explicit["snapshotter"]:
	case from.Snapshotter == "":
		// kata-deploy without a snapshotter mapping for this shim (the
		// chart's shims.<shim>.containerd.snapshotter unset) writes no
		// snapshotter key (runtime/containerd.rs
		// write_containerd_runtime_config at 4.0.0 and 4.1.0), and runs no
		// nydus: the handler stays on containerd's default. Writing the
		// flag's default instead would name a snapshotter the node does not
		// run, failing every image the runtime pulls.
		h.Snapshotter = ""
		if !explicit["snapshotter-address"] {
			h.SnapshotterAddress = ""
		}
		if !explicit["snapshotter-root"] {
			h.ExportsRoot = ""
		}
	case from.Snapshotter != h.Snapshotter || from.SnapshotterAddress != "":
		h.Snapshotter = from.Snapshotter
		// The address and root go with the snapshotter they belong to; an
		// empty address means its proxy plugin is defined elsewhere.
		if !explicit["snapshotter-address"] {
			h.SnapshotterAddress = from.SnapshotterAddress
		}
		if !explicit["snapshotter-root"] {
			h.ExportsRoot = from.ExportsRoot
		}
	}
	if !explicit["pod-annotations"] && from.PodAnnotations != nil {
		h.PodAnnotations = from.PodAnnotations
	}
	if !explicit["container-annotations"] && from.ContainerAnnotations != nil {
		h.ContainerAnnotations = from.ContainerAnnotations
	}
	return h
}

// Declares reports whether a file containerd loads from config already
// defines handler name.
func Declares(config, name string) bool {
	files, err := LoadSet(config, nil)
	if err != nil {
		return false
	}
	for _, f := range files {
		doc, err := tomledit.Decode(stripBOM(f.Data))
		if err != nil {
			continue
		}
		if _, ok := handlerFromDoc(doc, name); ok {
			return true
		}
	}
	return false
}
