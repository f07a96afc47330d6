package remediate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// Errors a reconcile reports without touching anything.
var (
	ErrMalformed   = errors.New("containerd config is not valid TOML")
	ErrUnsupported = errors.New("containerd config cannot be changed safely")
	ErrUnknownRun  = errors.New("running containerd version unknown")
)

// Runtime is the running containerd's version.
type Runtime struct {
	Major, Minor int
	Raw          string
}

var versionRe = regexp.MustCompile(`(\d+)\.(\d+)(?:\.\d+)?`)

// ParseRuntimeVersion reads "v1.7.29", "1.7.29+unknown", "containerd://2.0.4"
// or "2.2.1-gke.0".
func ParseRuntimeVersion(s string) (Runtime, error) {
	m := versionRe.FindStringSubmatch(s)
	if m == nil {
		return Runtime{}, fmt.Errorf("containerd version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Runtime{Major: major, Minor: minor, Raw: s}, nil
}

func (r Runtime) String() string {
	if r.Raw != "" {
		return r.Raw
	}
	return fmt.Sprintf("%d.%d", r.Major, r.Minor)
}

// MaxSchema is the newest config version the runtime accepts: 1.x rejects
// anything above 2, 2.0–2.2 above 3, 2.3 introduced 4.
func (r Runtime) MaxSchema() int {
	switch {
	case r.Major < 2:
		return 2
	case r.Major == 2 && r.Minor < 3:
		return 3
	default:
		return 4
	}
}

// Target says where the configuration lives, as this process sees it; the
// paths written into config.toml (the imports glob) are the same, so the
// host's /etc/containerd must be mounted at the same path.
type Target struct {
	Config     string // main config.toml
	DropInDir  string // conf.d, read on 2.x through an imports glob
	DropInName string
}

// DropIn is the path of our owned drop-in.
func (t Target) DropIn() string { return filepath.Join(t.DropInDir, t.DropInName) }

// Glob is the imports entry that makes containerd read conf.d.
func (t Target) Glob() string { return filepath.Join(t.DropInDir, "*.toml") }

// FileChange is one file to write.
type FileChange struct {
	Path     string
	Old, New []byte // Old is nil when the file does not exist
	Backup   bool   // keep a one-time backup of Old (files we do not own)
}

// Plan is what a reconcile would write; no changes means converged.
type Plan struct {
	Mode        string // "in-place" (1.x) or "drop-in" (2.x)
	FileVersion int    // version of the main config
	Changes     []FileChange
	Warnings    []string
}

// Converged reports whether nothing needs writing.
func (p Plan) Converged() bool { return len(p.Changes) == 0 }

// Compute decides what to write. main is config.toml's content, dropIn the
// current drop-in (nil when absent).
func Compute(h Handler, t Target, run Runtime, main, dropIn []byte) (Plan, error) {
	doc, err := tomledit.Decode(main)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %s: %v; left untouched", ErrMalformed, t.Config, err)
	}
	version := 1
	if v, ok := doc["version"].(int64); ok {
		version = int(v)
	}
	if version < 2 {
		return Plan{}, fmt.Errorf("%w: %s has config version %d; only versions 2 and above are kept (GKE writes 2)", ErrUnsupported, t.Config, version)
	}
	if run.Major == 0 {
		return Plan{}, fmt.Errorf("%w: mount the containerd socket (--cri-socket) or pass --containerd-version", ErrUnknownRun)
	}
	if version > run.MaxSchema() {
		return Plan{}, fmt.Errorf("%w: %s declares version %d but the running containerd %s understands at most %d; containerd would not start with it, fix the file first",
			ErrUnsupported, t.Config, version, run, run.MaxSchema())
	}
	if run.Major < 2 {
		// containerd 1.x replaces a whole plugin table with an imported
		// one, so a drop-in would erase GKE's CRI settings (CNI bin_dir):
		// edit the one file in place instead.
		out, err := tomledit.Apply(main, changesV2(h), tomledit.Render)
		if err != nil {
			return Plan{}, fmt.Errorf("%w: %s: %v", ErrUnsupported, t.Config, err)
		}
		p := Plan{Mode: "in-place", FileVersion: version}
		if !bytes.Equal(out, main) {
			p.Changes = append(p.Changes, FileChange{Path: t.Config, Old: main, New: out, Backup: true})
		}
		return p, nil
	}
	p := Plan{Mode: "drop-in", FileVersion: version}
	// The drop-in declares the main file's version: containerd 2.x merges
	// all files first and then migrates the result from the version of the
	// last file merged, so a version 3 drop-in over GKE's version 2 file
	// leaves every GKE CRI setting (CNI bin_dir, runc options, sandbox
	// image) unmigrated and ignored.
	want := RenderDropIn(h, version)
	if !bytes.Equal(want, dropIn) {
		p.Changes = append(p.Changes, FileChange{Path: t.DropIn(), Old: dropIn, New: want})
	}
	imports, err := stringList(doc["imports"])
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %s: imports: %v", ErrUnsupported, t.Config, err)
	}
	if !slices.Contains(imports, t.Glob()) {
		list := make([]any, 0, len(imports)+1)
		for _, s := range imports {
			list = append(list, s)
		}
		list = append(list, t.Glob())
		out, err := tomledit.Apply(main, []tomledit.Change{{Key: "imports", Value: list}}, tomledit.Render)
		if err != nil {
			return Plan{}, fmt.Errorf("%w: %s: %v", ErrUnsupported, t.Config, err)
		}
		p.Changes = append(p.Changes, FileChange{Path: t.Config, Old: main, New: out, Backup: true})
		imports = append(imports, t.Glob())
	}
	warns, err := checkImports(t, imports, run, version, want)
	if err != nil {
		return Plan{}, err
	}
	p.Warnings = warns
	return p, nil
}

func stringList(v any) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of strings, got %T", v)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("want an array of strings, got an element of type %T", e)
		}
		out = append(out, s)
	}
	return out, nil
}

// checkImports proves containerd will start with the result: a literal
// import that does not exist is fatal to containerd, and so is any imported
// file it cannot parse or whose version is too new. ours stands in for the
// drop-in as it will be after the write.
func checkImports(t Target, imports []string, run Runtime, mainVersion int, ours []byte) ([]string, error) {
	var warns []string
	var files []string
	for _, imp := range imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(t.Config), imp)
		}
		if strings.ContainsAny(imp, "*?[") {
			m, err := filepath.Glob(imp)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: imports entry %q: %v", ErrUnsupported, t.Config, imp, err)
			}
			if imp == t.Glob() && !slices.Contains(m, t.DropIn()) {
				m = append(m, t.DropIn())
				slices.Sort(m)
			}
			files = append(files, m...)
			continue
		}
		if _, err := os.Stat(imp); err != nil && imp != t.DropIn() {
			return nil, fmt.Errorf("%w: %s imports %q, which does not exist; containerd will not start until that entry is removed or the file restored", ErrUnsupported, t.Config, imp)
		}
		files = append(files, imp)
	}
	last := mainVersion
	for _, f := range files {
		data := ours
		if f != t.DropIn() {
			var err error
			if data, err = os.ReadFile(f); err != nil {
				return nil, fmt.Errorf("%w: read imported %s: %v", ErrUnsupported, f, err)
			}
		}
		doc, err := tomledit.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%w: imported %s is not valid TOML (%v); containerd would not start", ErrUnsupported, f, err)
		}
		v := 1
		if x, ok := doc["version"].(int64); ok {
			v = int(x)
		}
		if v > run.MaxSchema() {
			return nil, fmt.Errorf("%w: imported %s declares version %d, newer than containerd %s accepts (%d)", ErrUnsupported, f, v, run, run.MaxSchema())
		}
		if v >= 2 {
			last = v
		}
	}
	if last != mainVersion {
		warns = append(warns, fmt.Sprintf("the last imported file declares version %d while %s is version %d: containerd migrates the merged config from version %d, so settings of the main file may be ignored", last, t.Config, mainVersion, last))
	}
	return warns, nil
}

var (
	criV2        = []string{"plugins", "io.containerd.grpc.v1.cri", "containerd"}
	criV3Runtime = []string{"plugins", "io.containerd.cri.v1.runtime", "containerd"}
	criV3Images  = []string{"plugins", "io.containerd.cri.v1.images"}
)

func path(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func strs(v []string) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = s
	}
	return out
}

// runtimeChanges are the handler's own keys under the runtimes table.
func runtimeChanges(h Handler, containerd []string) []tomledit.Change {
	rt := path(containerd, []string{"runtimes", h.Name})
	return []tomledit.Change{
		{Table: rt, Key: "runtime_type", Value: h.RuntimeType},
		{Table: rt, Key: "runtime_path", Value: h.RuntimePath},
		{Table: rt, Key: "privileged_without_host_devices", Value: true},
		{Table: rt, Key: "pod_annotations", Value: strs(h.PodAnnotations)},
		{Table: rt, Key: "container_annotations", Value: strs(h.ContainerAnnotations)},
		{Table: rt, Key: "snapshotter", Value: h.Snapshotter},
		{Table: path(rt, []string{"options"}), Key: "ConfigPath", Value: h.ConfigPath},
	}
}

func proxyChanges(h Handler) []tomledit.Change {
	pp := []string{"proxy_plugins", h.Snapshotter}
	return []tomledit.Change{
		{Table: pp, Key: "type", Value: "snapshot"},
		{Table: pp, Key: "address", Value: h.SnapshotterAddress},
	}
}

// changesV2 is the version 2 layout for containerd 1.x, edited into GKE's
// existing CRI table.
func changesV2(h Handler) []tomledit.Change {
	out := []tomledit.Change{
		{Table: criV2, Key: keyDisableSnapshotAnnotations, Value: false},
		{Table: criV2, Key: keyDiscardUnpackedLayers, Value: false},
	}
	out = append(out, runtimeChanges(h, criV2)...)
	return append(out, proxyChanges(h)...)
}

// RenderDropIn writes the owned drop-in for containerd 2.x in the given
// config version (2 keeps GKE's version 2 main file migrating; 3 and 4 use
// the split CRI plugins).
func RenderDropIn(h Handler, version int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Owned by gcp-t4 remediate: the %s runtime handler for peer pods.\n", h.Name)
	b.WriteString("# Rewritten whenever it differs; edit the DaemonSet's flags instead.\n")
	fmt.Fprintf(&b, "version = %d\n", version)
	var changes []tomledit.Change
	if version == 2 {
		changes = append(changes,
			tomledit.Change{Table: criV2, Key: keyDisableSnapshotAnnotations, Value: false},
			tomledit.Change{Table: criV2, Key: keyDiscardUnpackedLayers, Value: false})
		changes = append(changes, runtimeChanges(h, criV2)...)
	} else {
		changes = append(changes,
			tomledit.Change{Table: criV3Images, Key: keyDisableSnapshotAnnotations, Value: false},
			tomledit.Change{Table: criV3Images, Key: keyDiscardUnpackedLayers, Value: false})
		changes = append(changes, runtimeChanges(h, criV3Runtime)...)
	}
	// containerd 2.x picks a runtime's snapshotter from the images plugin's
	// runtime_platforms; its version 2 migration never fills that in from
	// the runtime's own snapshotter key, so it is written explicitly in
	// every version.
	changes = append(changes, tomledit.Change{Table: path(criV3Images, []string{"runtime_platforms", h.Name}), Key: "snapshotter", Value: h.Snapshotter})
	changes = append(changes, proxyChanges(h)...)
	var table []string
	for _, c := range changes {
		if !slices.Equal(table, c.Table) {
			table = c.Table
			fmt.Fprintf(&b, "\n[%s]\n", tomledit.FormatPath(table))
		}
		v, err := tomledit.Render(c.Value)
		if err != nil {
			panic(err) // values above are strings, bools and string lists
		}
		fmt.Fprintf(&b, "  %s = %s\n", tomledit.FormatKey(c.Key), v)
	}
	return []byte(b.String())
}
