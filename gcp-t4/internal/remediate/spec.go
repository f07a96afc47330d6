// Package remediate keeps the kata-remote runtime handler in a GKE node's
// containerd configuration: GKE rewrites config.toml at every bootstrap and
// drops it, so a one-time patch does not hold.
package remediate

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Handler is the containerd runtime handler to keep. Defaults are what
// kata-deploy 4.x registers for its "remote" shim with the nydus snapshotter
// mapping of its chart (values.yaml shims.remote.containerd.snapshotter:
// nydus), so the sidecar and kata-deploy write the same handler and never
// flip it back and forth.
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
	kataDeployNydus     = "nydus-for-kata-tee"
	kataDeployDir       = "/opt/kata"
	kataDeployShim      = kataDeployDir + "/bin/containerd-shim-kata-v2"
	kataDeployConfigDir = kataDeployDir + "/share/defaults/kata-containers"
)

// DefaultHandler is kata-deploy 4.x's kata-remote.
func DefaultHandler() Handler {
	return Handler{
		Name:                 "kata-remote",
		RuntimeType:          "io.containerd.kata-remote.v2",
		RuntimePath:          kataDeployShim,
		ConfigPath:           kataDeployConfigDir + "/runtimes/remote/configuration-remote.toml",
		Snapshotter:          kataDeployNydus,
		SnapshotterAddress:   "/run/" + kataDeployNydus + "/containerd-nydus-grpc.sock",
		ExportsRoot:          "/var/lib/" + kataDeployNydus,
		PodAnnotations:       []string{"io.katacontainers.*"},
		ContainerAnnotations: []string{"io.kubernetes.container.terminationMessage*"},
	}
}

var tomlName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Validate names the first bad field and how to fix it.
func (h Handler) Validate() error {
	for _, f := range []struct{ flag, v string }{
		{"--handler", h.Name}, {"--snapshotter", h.Snapshotter},
	} {
		if !tomlName.MatchString(f.v) {
			return fmt.Errorf("%s %q: use letters, digits, '.', '_' or '-'", f.flag, f.v)
		}
	}
	if !strings.HasPrefix(h.RuntimeType, "io.containerd.") {
		return fmt.Errorf("--runtime-type %q: want a containerd shim name such as io.containerd.kata-remote.v2", h.RuntimeType)
	}
	for _, f := range []struct{ flag, v string }{
		{"--runtime-path", h.RuntimePath}, {"--kata-config", h.ConfigPath}, {"--snapshotter-address", h.SnapshotterAddress},
	} {
		if !filepath.IsAbs(f.v) {
			return fmt.Errorf("%s %q: want an absolute host path", f.flag, f.v)
		}
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
