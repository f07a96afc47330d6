package configplan

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// What kata-deploy 4.0.0 and 4.1.0 leave on a node, read in kata-containers
// (tags 4.0.0 = cf82bb35c8, 4.1.0 = ddcb1ad8d2) under
// tools/packaging/kata-deploy/binary/src. Which of the containerd layouts
// below a release gets is its row's KataDeploy (containerdrelease):
//
//   - KataDeployEditsMain: the handler edited into /etc/containerd/config.toml
//     in place, the file first copied once to config.toml.bak
//     (runtime/containerd.rs configure_containerd, !use_drop_in).
//   - KataDeployDropIn: a drop-in <dest_dir>/containerd/config.d/kata-deploy.toml
//     (config.rs containerd_drop_in_conf_file) whose literal path is appended
//     to the main file's `imports` (toml utils append_to_toml_array).
//   - KataDeployConfD: when the main file already imports
//     /etc/containerd/conf.d, the drop-in is /etc/containerd/conf.d/kata-deploy.toml
//     and no import is added (config.rs get_containerd_paths, supports_conf_d);
//     otherwise as KataDeployDropIn.
//
// The drop-in has no `version`: it is written key by key into an empty
// file. Besides, on every release:
//
//   - the nydus snapshotter it runs for guest pull, under
//     <dest_dir>/nydus-for-kata-tee/ (artifacts/snapshotters.rs
//     install_nydus_snapshotter), serving /run/nydus-for-kata-tee/.
//   - the node label katacontainers.io/kata-runtime=true once an install
//     finished (main.rs KATA_RUNTIME_LABEL, install_stage_label); cleanup
//     removes it first. The sidecar reads it (remediate).

// KataDeploy is what kata-deploy left on this node.
type KataDeploy struct {
	// DropIn is kata-deploy's containerd drop-in holding the handler, as
	// containerd names it in `imports`; "" when there is none.
	DropIn string
	// Handler is the handler as kata-deploy's files declare it, or as
	// kata-deploy 4.x would write it given what it installed.
	Handler *Handler
	// Present: kata-deploy's files are on the node.
	Present bool
	// Tables are the runtimes and proxy plugins the drop-in defines; they
	// come back with its import.
	Runtimes, ProxyPlugins []string
}

// DetectKataDeploy looks for kata-deploy's files: kataDir is its install
// directory (/opt/kata), mounted at the same path, config the main
// containerd config, and run the running containerd.
func DetectKataDeploy(kataDir, config, name string, run containerdrelease.Runtime) (KataDeploy, error) {
	var kd KataDeploy
	if exists(filepath.Join(kataDir, KataDeployNydus, "containerd-nydus-grpc")) ||
		exists(config+".bak") && exists(filepath.Join(kataDir, "bin", "containerd-shim-kata-v2")) {
		kd.Present = true
	}
	// Both drop-ins can be on a node: kata-deploy 4.x switched to conf.d on
	// containerd 2.2+ and leaves an older install's file under kataDir
	// (it removes only that file's import: runtime/containerd.rs
	// remove_legacy_drop_in_import at 4.0.0 and 4.1.0). The one containerd
	// loads now is kata-deploy's current configuration; only when neither
	// is loaded (GKE's rewrite dropped the import) does the legacy path come
	// first, as kata-deploy itself uses it unless the main file imports
	// conf.d (config.rs get_containerd_paths).
	// In conf.d mode kata-deploy has retired the legacy file: it is not
	// its configuration, whatever it holds.
	candidates := []string{LegacyDropIn(kataDir), ConfDDropIn(config)}
	if files, err := LoadSet(config, nil); err == nil {
		slices.SortStableFunc(candidates, func(a, b string) int {
			return cmpBool(loads(files, b), loads(files, a))
		})
		if doc, err := tomledit.Decode(stripBOM(files[0].Data)); err == nil {
			if imports, _ := stringList(doc["imports"]); confDMode(run, config, imports) && !loads(files, LegacyDropIn(kataDir)) {
				if exists(LegacyDropIn(kataDir)) {
					kd.Present = true
				}
				candidates = slices.DeleteFunc(candidates, func(p string) bool { return p == LegacyDropIn(kataDir) })
			}
		}
	}
	for _, p := range candidates {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return kd, fmt.Errorf("read kata-deploy's drop-in %s: %w", p, err)
		}
		kd.Present = true
		doc, err := tomledit.Decode(stripBOM(data))
		if err != nil {
			// Being written (kata-deploy writes it key by key with plain
			// writes) or broken: not something to import.
			return kd, fmt.Errorf("%w: kata-deploy's drop-in %s: %v", ErrMalformed, p, err)
		}
		if h, ok := handlerFromDoc(doc, name); ok {
			kd.DropIn, kd.Handler = p, &h
			kd.Runtimes, kd.ProxyPlugins = tableNames(doc)
			return kd, nil
		}
	}
	if kd.Present {
		// kata-deploy 4.x whose handler is not in a file now (GKE's rewrite
		// took the in-place edit away): what it writes for the remote shim.
		// With its nydus instance, the chart's snapshotter mapping; without
		// one, no snapshotter (it installs nydus only for a mapping that
		// names it: artifacts/snapshotters.rs), so none is written here.
		h := KataDeployHandler()
		h.Name = name
		h.RuntimePath = filepath.Join(KataDeployDir, "bin", "containerd-shim-kata-v2")
		if !exists(filepath.Join(kataDir, KataDeployNydus, "containerd-nydus-grpc")) {
			h = h.WithoutSnapshotter()
		}
		kd.Handler = &h
	}
	return kd, nil
}

// LegacyDropIn is kata-deploy's drop-in outside conf.d mode:
// <dest_dir>/containerd/config.d/kata-deploy.toml (config.rs
// containerd_drop_in_conf_file, 4.0.0 and 4.1.0), imported by literal path.
func LegacyDropIn(kataDir string) string {
	return filepath.Join(kataDir, "containerd", "config.d", "kata-deploy.toml")
}

// ConfDDropIn is kata-deploy's drop-in in conf.d mode:
// /etc/containerd/conf.d/kata-deploy.toml next to the main file, which
// imports it by its own glob (config.rs get_containerd_paths, 4.0.0 and
// 4.1.0).
func ConfDDropIn(config string) string {
	return filepath.Join(filepath.Dir(config), "conf.d", "kata-deploy.toml")
}

// confDMode reports whether kata-deploy 4.x writes its conf.d drop-in on
// this node and scrubs the legacy import: a release whose layout for it is
// KataDeployConfD, and a main file whose imports name /etc/containerd/conf.d
// (config.rs config_has_containerd_confd_import: any entry containing that
// path; the conf.d directory next to config, which is that path on a node).
func confDMode(run containerdrelease.Runtime, config string, imports []string) bool {
	if run.KataDeploy != containerdrelease.KataDeployConfD {
		return false
	}
	dir := filepath.Join(filepath.Dir(config), "conf.d")
	for _, e := range imports {
		if strings.Contains(e, dir) {
			return true
		}
	}
	return false
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
