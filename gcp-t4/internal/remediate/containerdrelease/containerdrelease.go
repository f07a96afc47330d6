// Package containerdrelease is what the node sidecar knows about each
// containerd release line, as data: the config versions it reads, how it
// merges imported files, where its CRI plugins keep a runtime handler, how
// the sidecar adds the handler to it, and how kata-deploy 4.x lays out its
// files on it. containerd keeps its own release differences as data
// (migrations per config version, plugin registrations); the sidecar does
// the same, so that its code reads these facts and never compares versions.
// A new release line is one row of Known, in releases.go.
package containerdrelease

import (
	"fmt"
	"regexp"
	"strconv"
)

// Version is a containerd version as a node reports it.
type Version struct {
	Major, Minor int
	Raw          string
}

var versionRe = regexp.MustCompile(`(\d+)\.(\d+)(?:\.\d+)?`)

// ParseVersion reads "v1.7.29", "1.7.29+unknown", "containerd://2.0.4" or
// "2.2.1-gke.0": CRI, the Node and `containerd --version` each spell it
// their own way.
func ParseVersion(s string) (Version, error) {
	m := versionRe.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("containerd version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Version{Major: major, Minor: minor, Raw: s}, nil
}

func (v Version) String() string {
	if v.Raw != "" {
		return v.Raw
	}
	return fmt.Sprintf("%d.%d", v.Major, v.Minor)
}

// SameLine reports whether two versions are of one release line.
func (v Version) SameLine(o Version) bool { return v.Major == o.Major && v.Minor == o.Minor }

// before orders versions by release line.
func (v Version) before(o Version) bool {
	return v.Major < o.Major || v.Major == o.Major && v.Minor < o.Minor
}

// Strategy is how the sidecar puts the handler into a release's
// configuration; it is also the plan's mode.
type Strategy string

const (
	// InPlace edits the handler into the main config.toml, key by key: the
	// release replaces a whole plugin table with an imported file's, so a
	// drop-in with any CRI key would erase the main file's CRI settings.
	InPlace Strategy = "in-place"
	// DropIn writes the handler into a drop-in of the sidecar's, imported
	// by its literal path: the release deep-merges imported plugin tables.
	DropIn Strategy = "drop-in"
)

// KataDeployLayout is where kata-deploy 4.x puts its containerd
// configuration on a release (kata-containers
// tools/packaging/kata-deploy/binary/src, tags 4.0.0 and 4.1.0).
type KataDeployLayout string

const (
	// KataDeployEditsMain: the handler edited into config.toml, the file
	// first copied to config.toml.bak (runtime/containerd.rs
	// configure_containerd; runtime/manager.rs
	// is_containerd_capable_of_drop_in is false before containerd 2.0).
	KataDeployEditsMain KataDeployLayout = "edits config.toml"
	// KataDeployDropIn: <kata-dir>/containerd/config.d/kata-deploy.toml,
	// imported by its literal path (config.rs containerd_drop_in_conf_file).
	KataDeployDropIn KataDeployLayout = "drop-in"
	// KataDeployConfD: /etc/containerd/conf.d/kata-deploy.toml when the main
	// file imports that directory, with no import added and the legacy
	// drop-in's import removed; KataDeployDropIn otherwise (config.rs
	// get_containerd_paths, runtime/manager.rs
	// containerd_version_is_2_2_or_newer, runtime/containerd.rs
	// remove_legacy_drop_in_import).
	KataDeployConfD KataDeployLayout = "conf.d"
)

// CRITables are the tables of a containerd config dump that hold what the
// kata-remote handler needs, as key paths.
type CRITables struct {
	// Runtimes holds the runtime handlers, one table per handler.
	Runtimes []string
	// Images holds discard_unpacked_layers and disable_snapshot_annotations.
	Images []string
	// RuntimePlatforms is the images plugin's per-runtime platform table,
	// whose snapshotter a runtime's images are pulled with; nil where the
	// release has none.
	RuntimePlatforms []string
}

// The CRI layouts of containerd's config versions. A release dumps its
// merged configuration in the layout of its own config version; a file is
// written in the layout of the version it declares.
var (
	// CRIConfigVersion2 is one CRI plugin, io.containerd.grpc.v1.cri:
	// containerd 1.7's (pkg/cri/cri.go registers "cri" as a
	// plugin.GRPCPlugin, io.containerd.grpc.v1 in plugin/plugin.go;
	// pkg/cri/config/config.go PluginConfig's `containerd` table holds
	// `runtimes`, `discard_unpacked_layers` and
	// `disable_snapshot_annotations`; v1.7.29), and what a version 2 file
	// says on 2.x, where the CRI plugins migrate it.
	CRIConfigVersion2 = CRITables{
		Runtimes: []string{"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"},
		Images:   []string{"plugins", "io.containerd.grpc.v1.cri", "containerd"},
	}
	// CRIConfigVersion3 is the CRI plugins split into runtime and images
	// services, io.containerd.cri.v1.runtime and io.containerd.cri.v1.images
	// (plugins/cri/runtime/plugin.go and plugins/cri/images/plugin.go
	// register "runtime" and "images" as plugins.CRIServicePlugin,
	// io.containerd.cri.v1 in plugins/types.go; internal/cri/config/config.go
	// RuntimeConfig's `containerd` table holds `runtimes`, ImageConfig
	// `discard_unpacked_layers`, `disable_snapshot_annotations` and
	// `runtime_platforms`; v2.0.14, v2.1.0, v2.2.0, v2.3.0, v2.4.2). Version 4
	// moved server properties into plugins and left these tables as they
	// were (cmd/containerd/server/config/config.go migrations,
	// serviceMigrate, v2.4.2).
	CRIConfigVersion3 = CRITables{
		Runtimes:         []string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"},
		Images:           []string{"plugins", "io.containerd.cri.v1.images"},
		RuntimePlatforms: []string{"plugins", "io.containerd.cri.v1.images", "runtime_platforms"},
	}
)

// FileCRI is the CRI layout of a file that declares config version
// version.
func FileCRI(version int) CRITables {
	if version >= 3 {
		return CRIConfigVersion3
	}
	return CRIConfigVersion2
}

// Release is what the sidecar knows about one containerd release line.
type Release struct {
	// Line is the release line, MAJOR.MINOR.
	Line string
	// MaxConfigVersion is the newest config version the release reads
	// (and the one `containerd config default` writes): a file declaring
	// more keeps containerd from starting.
	MaxConfigVersion int
	// MigratesEachFile: every imported file is migrated to the merged
	// config version on its own before it is merged. Otherwise files are
	// merged as they are, a later file's version replaces the merged one,
	// and the plugins' migration runs once, from that version.
	MigratesEachFile bool
	// Strategy is how the sidecar adds the handler.
	Strategy Strategy
	// CRI is where the release's config dump holds the handler's settings.
	CRI CRITables
	// KataDeploy is where kata-deploy 4.x writes its configuration.
	KataDeploy KataDeployLayout
	// ReadsBOM: the release loads a config file that starts with a UTF-8
	// byte order mark. The sidecar lets containerd's own check decide;
	// the tests assert what each release does.
	ReadsBOM bool
	// CNIBinDirs: the CRI's CNI table takes the list bin_dirs; before, the
	// single bin_dir. GKE's files use what their release takes; the tests'
	// copies of them do too.
	CNIBinDirs bool
}

// line parses Line; releases_test.go checks that every row's does.
func (r Release) line() Version {
	v, err := ParseVersion(r.Line)
	if err != nil {
		panic(fmt.Sprintf("containerd release table: row %q: %v", r.Line, err))
	}
	return v
}

// Runtime is a containerd version with the facts it runs with.
type Runtime struct {
	Version
	Release
}

// Table is a list of release lines, one row each.
type Table []Release

// Row is the row of v's own release line.
func (t Table) Row(v Version) (Release, bool) {
	for _, r := range t {
		if r.line().SameLine(v) {
			return r, true
		}
	}
	return Release{}, false
}

// For returns the facts a containerd of version v runs with: its line's
// row; for a line the table lacks, the newest row before it (a release
// behaves as the line before it until a row says otherwise, which is what
// a node upgraded to a release newer than the table gets); for a version
// older than every row, the oldest row (every 1.x was handled as 1.7
// before the table). Either way every change is still proven with that
// node's own containerd before it is written.
func (t Table) For(v Version) Runtime {
	if r, ok := t.Row(v); ok {
		return Runtime{Version: v, Release: r}
	}
	var floor, oldest *Release
	for i := range t {
		l := t[i].line()
		if oldest == nil || l.before(oldest.line()) {
			oldest = &t[i]
		}
		if l.before(v) && (floor == nil || floor.line().before(l)) {
			floor = &t[i]
		}
	}
	switch {
	case floor != nil:
		return Runtime{Version: v, Release: *floor}
	case oldest != nil:
		return Runtime{Version: v, Release: *oldest}
	}
	return Runtime{Version: v}
}

// Lookup parses a version as the node reports it and returns For.
func (t Table) Lookup(s string) (Runtime, error) {
	v, err := ParseVersion(s)
	if err != nil {
		return Runtime{}, err
	}
	if len(t) == 0 {
		return Runtime{}, fmt.Errorf("containerd %s: the release table is empty", s)
	}
	return t.For(v), nil
}
