// Package remediate keeps the kata-remote runtime handler in a GKE node's
// containerd configuration: GKE rewrites config.toml at every bootstrap and
// drops it, so a one-time patch does not hold.
package remediate

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Handler is the containerd runtime handler to keep. Defaults match what
// kata-deploy registers for peer pods, so the RuntimeClass it ships
// (handler: kata-remote) finds it.
type Handler struct {
	Name                 string
	RuntimeType          string
	RuntimePath          string
	ConfigPath           string
	Snapshotter          string // proxy snapshotter name, also the proxy_plugins key
	SnapshotterAddress   string
	PodAnnotations       []string
	ContainerAnnotations []string
}

// DefaultHandler is kata-deploy's kata-remote with the nydus snapshotter.
func DefaultHandler() Handler {
	return Handler{
		Name:                 "kata-remote",
		RuntimeType:          "io.containerd.kata-remote.v2",
		RuntimePath:          "/opt/kata/bin/containerd-shim-kata-v2",
		ConfigPath:           "/opt/kata/share/defaults/kata-containers/configuration-remote.toml",
		Snapshotter:          "nydus",
		SnapshotterAddress:   "/run/containerd-nydus/containerd-nydus-grpc.sock",
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
	return nil
}

// Settings the handler needs from containerd's image service.
const (
	keyDisableSnapshotAnnotations = "disable_snapshot_annotations"
	keyDiscardUnpackedLayers      = "discard_unpacked_layers"
)
