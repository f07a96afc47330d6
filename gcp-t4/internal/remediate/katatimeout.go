package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/nodeevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
	"golang.org/x/sys/unix"
)

// kata-remote's create_container_timeout bounds the agent's CreateContainer,
// which with guest pull includes pulling the image inside the podVM; its
// default is 60 s (kata-containers 4.0.0, cf82bb35c8:
// src/runtime/config/configuration-remote.toml.in [runtime], and
// DEFCREATECONTAINERTIMEOUT in src/runtime/Makefile), far too short for a
// multi-GB image. The sidecar sets it with a drop-in of its own.
//
// Where kata reads it, read at 4.0.0 (cf82bb35c8) and 4.1.0 (ddcb1ad8d2):
//
//   - the shim resolves the configuration file's symlinks and then decodes
//     every entry of the config.d directory beside the resolved file, in
//     os.ReadDir's order (by name), each over what came before
//     (src/runtime/pkg/katautils/config.go decodeDropIns and
//     updateFromDropIn). Every entry is read, whatever its name: a file
//     that does not decode fails every new sandbox. Each shim reads the
//     files when its sandbox starts, so no restart is needed.
//   - kata-deploy registers the remote shim with its per-shim copy,
//     <dest_dir>/share/defaults/kata-containers/runtimes/remote/
//     configuration-remote.toml, and turns the file it extracted at
//     share/defaults/kata-containers/configuration-remote.toml into a
//     relative symlink to it; config.d is therefore
//     /opt/kata/share/defaults/kata-containers/runtimes/remote/config.d
//     either way (tools/packaging/kata-deploy/binary/src/artifacts/install.rs
//     setup_runtime_directory; utils/system.rs
//     get_kata_containers_config_path: "remote" is a Go shim, so not under
//     runtime-rs/).
//   - kata-deploy writes its own drop-ins there: 10-installation-prefix.toml
//     (a non-default prefix), 20-debug.toml, 22-k0s-kubelet-root.toml,
//     30-kernel-params.toml, and 50-user-overrides.toml, a copy of
//     /custom-configs/dropin-remote.toml, which its Helm chart renders from
//     the value shims.remote.dropIn (install.rs write_common_drop_ins,
//     install_default_runtime_drop_in; helm-chart templates custom-runtimes.yaml
//     at 4.0.0, _helpers.tpl at 4.1.0). An install or upgrade only writes
//     or removes those names: other files in config.d stay. Its uninstall
//     (cleanup, when its DaemonSet is gone) removes the whole
//     runtimes/remote directory, config.d and our drop-in with it
//     (install.rs remove_runtime_directory).
//
// Order: kataDropInName sorts after every name kata-deploy writes, so the
// value the admin gave gcp-t4 install wins over kata-deploy's defaults and
// over a user's 50-user-overrides.toml (shims.remote.dropIn): install sets
// the bound a pull needs for this cluster's images, and the readiness
// check holds the node to it. An admin who wants kata-deploy's value
// instead installs with --create-container-timeout=0.
const kataDropInName = "90-gcp-t4-create-container-timeout.toml"

// kataDropInMarker opens the drop-in; the uninstall pass removes only a
// file that starts with it.
const kataDropInMarker = "# Written by gcp-t4-node remediate (caa-gcp-t4)."

// errMountLost says the read-write mount of kata-remote's config.d went
// away under the sidecar: kata-deploy's uninstall removed the directory on
// the host, which detaches the mount in this pod. Only a new container
// gets a mount of the directory as it now is, so the loop ends and the
// kubelet restarts the container.
var errMountLost = errors.New("the read-write mount of kata-remote's config.d is gone")

// kataDropIn is the drop-in's content for d (whole seconds, as kata reads
// create_container_timeout: an integer number of seconds).
func kataDropIn(d time.Duration) []byte {
	return []byte(fmt.Sprintf("%s\n# kata-remote's create_container_timeout: the agent's CreateContainer, guest pull\n# included. Set with gcp-t4 install --create-container-timeout; removed on uninstall.\n[runtime]\ncreate_container_timeout = %d\n",
		kataDropInMarker, int64(d/time.Second)))
}

// kataFiles are the remote shim's configuration as this pod sees it: the
// resolved base file and its config.d.
type kataFiles struct {
	Base, ConfD string
}

// kataPaths maps the handler's ConfigPath (a host path) to this pod: kata
// lives under kata-deploy's install directory, mounted at KataDir.
func (r *Remediator) kataPaths(h configplan.Handler) (kataFiles, error) {
	rel, err := filepath.Rel(configplan.KataDeployDir, h.ConfigPath)
	if err != nil || strings.HasPrefix(rel, "..") {
		return kataFiles{}, fmt.Errorf("kata-remote's configuration %s is outside %s; the sidecar sets create_container_timeout only in kata-deploy's installation", h.ConfigPath, configplan.KataDeployDir)
	}
	base, err := filepath.EvalSymlinks(filepath.Join(r.cfg.KataDir, rel))
	if err != nil {
		return kataFiles{}, fmt.Errorf("resolve kata-remote's configuration %s: %w", h.ConfigPath, err)
	}
	return kataFiles{Base: base, ConfD: filepath.Join(filepath.Dir(base), "config.d")}, nil
}

// EffectiveTimeout is kata-remote's create_container_timeout as the shim
// computes it: the base file, then every config.d entry by name. from
// names the file the value came from; set is false when no file sets it.
func EffectiveTimeout(kf kataFiles) (secs int64, from string, set bool, err error) {
	paths := []string{kf.Base}
	entries, err := os.ReadDir(kf.ConfD)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, "", false, fmt.Errorf("read %s: %w", kf.ConfD, err)
	}
	for _, e := range entries {
		paths = append(paths, filepath.Join(kf.ConfD, e.Name()))
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return 0, "", false, fmt.Errorf("kata would fail to read %s: %w", p, bare(err))
		}
		doc, err := tomledit.Decode(withoutBOM(data))
		if err != nil {
			return 0, "", false, fmt.Errorf("kata would fail to decode %s: %v", p, err)
		}
		rt, _ := doc["runtime"].(map[string]any)
		v, ok := rt["create_container_timeout"]
		if !ok {
			continue
		}
		n, ok := v.(int64)
		if !ok || n < 0 {
			return 0, "", false, fmt.Errorf("%s: runtime.create_container_timeout = %v is not a number of seconds kata reads", p, v)
		}
		secs, from, set = n, p, true
	}
	return secs, from, set, nil
}

// keepTimeout writes the drop-in where it is missing or changed, then
// checks the effective value; what keeps the node from ready is kept for
// /readyz. Only errMountLost is returned: everything else is reported and
// retried at the next pass.
func (r *Remediator) keepTimeout(ctx context.Context, h configplan.Handler) error {
	want := r.cfg.CreateContainerTimeout
	kf, err := r.kataPaths(h)
	if want == 0 {
		// Not set by us: a drop-in an earlier setting left goes.
		if err == nil && !r.cfg.DryRun {
			if _, rerr := r.removeKataDropIn(kf); rerr != nil {
				r.log.Warn("removing the create_container_timeout drop-in failed", "err", rerr.Error())
			}
		}
		r.setKataReason("")
		return nil
	}
	if err != nil {
		return r.kataFail(ctx, err)
	}
	path := filepath.Join(kf.ConfD, kataDropInName)
	wantData := kataDropIn(want)
	writable := unix.Access(kf.ConfD, unix.W_OK) == nil
	cur, err := readOptional(path)
	if err != nil {
		return r.kataFail(ctx, fmt.Errorf("read %s: %w", path, err))
	}
	if !bytes.Equal(cur, wantData) {
		if cur != nil {
			if _, perr := tomledit.Decode(withoutBOM(cur)); perr != nil {
				return r.kataFail(ctx, fmt.Errorf("%s does not parse (%v); left as it is: fix or remove it", path, perr))
			}
		}
		if r.cfg.DryRun {
			r.log.Info("would write kata-remote's create_container_timeout", "path", path, "timeout", want.String())
		} else {
			if err := r.writeKataDropIn(kf.ConfD, path, wantData); err != nil {
				if errors.Is(err, syscall.EROFS) && r.kataWritable {
					r.setKataReason(errMountLost.Error())
					return fmt.Errorf("%w (kata-deploy removed and recreated %s?): %v; exiting so that the kubelet restarts the container with a new mount", errMountLost, kf.ConfD, err)
				}
				return r.kataFail(ctx, fmt.Errorf("write %s: %w (mount the directory read-write: install/components/gke-remediation)", path, err))
			}
			writable = true
			what := "was missing"
			if cur != nil {
				what = "held something else"
			}
			r.events.Emit(ctx, false, nodeevents.CreateContainerTimeoutSet,
				fmt.Sprintf("set kata-remote's create_container_timeout to %s in %s (the file %s)", want, path, what))
		}
	}
	if writable {
		r.kataWritable = true
	}
	secs, from, set, err := EffectiveTimeout(kf)
	switch {
	case err != nil:
		return r.kataFail(ctx, err)
	case !set:
		return r.kataFail(ctx, fmt.Errorf("kata-remote's create_container_timeout is set in neither %s nor %s", kf.Base, kf.ConfD))
	case time.Duration(secs)*time.Second < want:
		return r.kataFail(ctx, fmt.Errorf("kata-remote's effective create_container_timeout is %ds (from %s), below --create-container-timeout=%s", secs, from, want))
	}
	r.setKataReason("")
	return nil
}

// writeKataDropIn creates config.d if kata-deploy has not, then writes the
// drop-in atomically. kata reads every entry of config.d, temp files
// included: one holds nothing or the whole content (written in one call),
// both of which decode.
func (r *Remediator) writeKataDropIn(dir, path string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	CleanTemps(path)
	return writeAtomic(path, data, nil)
}

// errNotOurs: a file at the drop-in's name that the sidecar did not write.
var errNotOurs = errors.New("not the sidecar's")

// removeKataDropIn removes the sidecar's drop-in, only if it is the
// sidecar's (starts with the marker). removed is the path when it did.
func (r *Remediator) removeKataDropIn(kf kataFiles) (removed string, err error) {
	path := filepath.Join(kf.ConfD, kataDropInName)
	CleanTemps(path)
	cur, err := readOptional(path)
	if err != nil || cur == nil {
		return "", err
	}
	if !bytes.HasPrefix(cur, []byte(kataDropInMarker)) {
		return "", fmt.Errorf("%w: %s does not start with %q; left as it is", errNotOurs, path, kataDropInMarker)
	}
	if err := removeFile(path); err != nil {
		return "", err
	}
	return path, nil
}

func (r *Remediator) kataFail(ctx context.Context, err error) error {
	r.setKataReason(err.Error())
	r.metrics.Failures.WithLabelValues(nodeevents.CreateContainerTimeoutFailed).Inc()
	r.report(ctx, true, nodeevents.CreateContainerTimeoutFailed, err.Error())
	return nil
}

func (r *Remediator) setKataReason(s string) {
	r.mu.Lock()
	r.kataReason, r.kataChecked = s, true
	r.mu.Unlock()
}

// ReadyReason is "" when the node is ready: kata-remote is in the
// running containerd's configuration and, with --create-container-timeout,
// its effective create_container_timeout is at least that. Otherwise it is
// why not, in one line.
func (r *Remediator) ReadyReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.ready:
		return fmt.Sprintf("%s is not (yet) in the running containerd's configuration; see this pod's log and the Node's Events", r.cfg.Handler.Name)
	case r.cfg.CreateContainerTimeout > 0 && !r.kataChecked:
		return "kata-remote's create_container_timeout not checked yet"
	case r.kataReason != "":
		return strings.ReplaceAll(r.kataReason, "\n", " ")
	}
	return ""
}

// kataConfD is the config.d to watch, or "" when it is not known.
func (r *Remediator) kataConfD() string {
	if r.cfg.CreateContainerTimeout == 0 {
		return ""
	}
	kf, err := r.kataPaths(r.cfg.Handler)
	if err != nil {
		return ""
	}
	return kf.ConfD
}

// withoutBOM drops a leading UTF-8 byte order mark, which the TOML decoder
// here does not take, before a file is read for its values.
func withoutBOM(b []byte) []byte { return bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) }
