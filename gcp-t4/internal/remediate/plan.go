package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// Errors a reconcile reports without touching anything.
var (
	ErrMalformed   = errors.New("containerd config is not valid TOML")
	ErrUnsupported = errors.New("containerd config cannot be changed safely")
	ErrUnknownRun  = errors.New("running containerd version unknown")
)

// Target says where the configuration lives. Paths are host paths, and the
// host's /etc/containerd (and kata-deploy's /opt/kata) must be mounted at
// the same paths: containerd reads the `imports` entries written here.
type Target struct {
	Config     string // main config.toml
	DropInDir  string // the sidecar's own directory (drop-in and state)
	DropInName string
}

// DropIn is the path of the sidecar's drop-in.
func (t Target) DropIn() string { return filepath.Join(t.DropInDir, t.DropInName) }

// StatePath is where the sidecar keeps its State.
func (t Target) StatePath() string { return filepath.Join(t.DropInDir, "state.json") }

// FileChange is one file to write.
type FileChange struct {
	Path     string
	Old, New []byte // Old nil: the file does not exist; New nil: remove it
}

// Plan is what a reconcile would write; no changes means converged.
type Plan struct {
	Mode        string // "in-place" (1.x) or "drop-in" (2.x)
	FileVersion int    // version of the main config
	Changes     []FileChange
	Handler     Handler // the handler kept, after learning
	Source      string  // where its settings came from
	// Fingerprint of the handler's effective settings in containerd's merge
	// of the files as they will be (State.Loaded).
	Fingerprint string
	// Candidate identifies the change (its inputs and outputs), for
	// State.Rejected.
	Candidate string
}

// Converged reports whether nothing needs writing.
func (p Plan) Converged() bool { return len(p.Changes) == 0 }

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

// The CRI tables of containerd's config dump, per release line.
var (
	cri17        = []string{"plugins", "io.containerd.grpc.v1.cri"}
	criRuntime2  = []string{"plugins", "io.containerd.cri.v1.runtime"}
	criImages2   = []string{"plugins", "io.containerd.cri.v1.images"}
	proxyPlugins = []string{"proxy_plugins"}
)

func cat(parts ...[]string) []string {
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

// layout names the tables of the dump of one release line.
type layout struct{ v2 bool }

func layoutOf(run Runtime) layout { return layout{v2: run.Major >= 2} }

func (l layout) runtimes() []string {
	if l.v2 {
		return cat(criRuntime2, []string{"containerd", "runtimes"})
	}
	return cat(cri17, []string{"containerd", "runtimes"})
}

// images is the table holding discard_unpacked_layers and
// disable_snapshot_annotations.
func (l layout) images() []string {
	if l.v2 {
		return criImages2
	}
	return cat(cri17, []string{"containerd"})
}

func (l layout) platforms(name string) []string {
	return cat(criImages2, []string{"runtime_platforms", name})
}

// wanted are the settings the merged configuration must hold for h, as
// containerd's dump names them, in the order they are written.
func wanted(h Handler, l layout) []leaf {
	rt := cat(l.runtimes(), []string{h.Name})
	out := []leaf{
		{cat(l.images(), []string{keyDisableSnapshotAnnotations}), false},
		{cat(l.images(), []string{keyDiscardUnpackedLayers}), false},
		{cat(rt, []string{"runtime_type"}), h.RuntimeType},
		{cat(rt, []string{"runtime_path"}), h.RuntimePath},
		{cat(rt, []string{"privileged_without_host_devices"}), true},
		{cat(rt, []string{"pod_annotations"}), strs(h.PodAnnotations)},
		{cat(rt, []string{"container_annotations"}), strs(h.ContainerAnnotations)},
		{cat(rt, []string{"snapshotter"}), h.Snapshotter},
		{cat(rt, []string{"options", "ConfigPath"}), h.ConfigPath},
	}
	if l.v2 {
		// containerd 2.x pulls a runtime's images with the images plugin's
		// runtime_platforms[runtime].snapshotter; the v2 → v3 migration never
		// fills it from the runtime's own key (plugins/cri/images/plugin.go
		// migrateConfig reads "snapshot" and writes "runtime_platform", at
		// v2.0.14 and v2.4.2), and kata-deploy 4.x only writes it for a
		// version 3 main file.
		out = append(out, leaf{cat(l.platforms(h.Name), []string{"snapshotter"}), h.Snapshotter})
	}
	if h.SnapshotterAddress == "" {
		// A snapshotter learned without an address is defined elsewhere
		// (or built in): its proxy plugin is not ours to write.
		return out
	}
	pp := cat(proxyPlugins, []string{h.Snapshotter})
	out = append(out, leaf{cat(pp, []string{"type"}), "snapshot"}, leaf{cat(pp, []string{"address"}), h.SnapshotterAddress})
	if h.ExportsRoot != "" {
		out = append(out, leaf{cat(pp, []string{"exports", "root"}), h.ExportsRoot})
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
	l      layout
	h      Handler
	extras [][]string
}

func (o owned) prefixes() [][]string {
	out := [][]string{
		cat(o.l.runtimes(), []string{o.h.Name}),
		cat(proxyPlugins, []string{o.h.Snapshotter}),
		cat(o.l.images(), []string{keyDisableSnapshotAnnotations}),
		cat(o.l.images(), []string{keyDiscardUnpackedLayers}),
	}
	if o.l.v2 {
		out = append(out, o.l.platforms(o.h.Name))
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

// planner computes a candidate change and proves it with containerd's own
// merge before anything is written.
type planner struct {
	ctr     Containerd
	run     Runtime
	h       Handler
	t       Target
	kd      KataDeploy
	scratch string // where candidates are assembled for `config dump`
	kataDir string // kata-deploy's install directory
	// explicit are the handler flags given on the command line, which
	// nothing learned overrides; source says where h came from.
	explicit map[string]bool
	source   string
}

func (p *planner) plan(ctx context.Context) (Plan, error) {
	t := p.t
	files, err := LoadSet(t.Config, nil)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupported) {
			return Plan{}, fmt.Errorf("%w; left untouched", err)
		}
		return Plan{}, fmt.Errorf("%w: %v; left untouched", ErrUnsupported, err)
	}
	main := files[0]
	version := main.Version
	if version < 2 {
		return Plan{}, fmt.Errorf("%w: %s has config version %d; only versions 2 and above are kept (GKE writes 2)", ErrUnsupported, t.Config, version)
	}
	if version > p.run.MaxSchema() {
		return Plan{}, fmt.Errorf("%w: %s declares version %d but containerd %s understands at most %d; containerd would not start with it, fix the file first",
			ErrUnsupported, t.Config, version, p.run, p.run.MaxSchema())
	}
	if mv := MergedVersion(p.run, files); mv != version {
		return Plan{}, fmt.Errorf("%w: containerd %s merges the current configuration as version %d (set by %s) while %s is version %d, so the main file's settings (CNI, runc, sandbox image) are ignored now; left untouched. Give %s the main file's version or stop importing it",
			ErrUnsupported, p.run, mv, lastWithVersion(files, mv), t.Config, version, lastWithVersion(files, mv))
	}
	before, err := p.ctr.Dump(ctx, t.Config)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: containerd %s cannot load the current configuration (%v); fix %s first, it was left untouched", ErrUnsupported, p.run, err, t.Config)
	}
	source := p.source
	if p.kd.Handler == nil {
		// No kata-deploy drop-in or layout: the settings of a handler
		// already in the merged configuration (kata-deploy's in-place edit
		// on 1.7, an operator's) are kept; only what it lacks is added.
		if h, ok := handlerFromDoc(before, p.h.Name); ok {
			if learned := learn(p.h, h, p.explicit); !learned.Equal(p.h) {
				p.h, source = learned, "the handler already in containerd's configuration"
			}
		}
	}
	var pl Plan
	if p.run.Major < 2 {
		pl, err = p.inPlace(ctx, files, before)
	} else {
		pl, err = p.dropIn(ctx, files, before)
	}
	pl.FileVersion, pl.Handler, pl.Source = version, p.h, source
	return pl, err
}

// inPlace: containerd 1.x replaces a whole plugin table with an imported
// one (services/server/config/config.go mergeConfig at v1.7.29), so a
// drop-in carrying any CRI key would erase GKE's CRI settings (CNI
// bin_dir); the handler is edited into the main file, key by key.
func (p *planner) inPlace(ctx context.Context, files []LoadFile, before map[string]any) (Plan, error) {
	l := layoutOf(p.run)
	o := owned{l: l, h: p.h}
	pl := Plan{Mode: "in-place"}
	miss := missing(wanted(p.h, l), before)
	if len(miss) == 0 {
		pl.Fingerprint = fingerprint(before, o)
		return pl, nil
	}
	main := files[0]
	changes := toChanges(miss)
	cand, err := p.edit(main.Data, changes)
	if err != nil {
		return pl, err
	}
	after, err := p.dumpWith(ctx, cand, nil)
	if err != nil {
		return pl, fmt.Errorf("%w: containerd %s would not load %s after the change (%v); left untouched", ErrUnsupported, p.run, p.t.Config, err)
	}
	// A runtime that came from containerd's built-in defaults (runc, when
	// the file names no runtime) is lost once the file defines a runtimes
	// table: the decoded map replaces the default one. Write it explicitly,
	// with the values containerd itself reports, and check again.
	if lost := lostRuntimes(before, after, l, p.h.Name); len(lost) > 0 {
		for _, lf := range flatten(before) {
			for _, r := range lost {
				if hasPrefix(lf.parts, cat(l.runtimes(), []string{r})) {
					changes = append(changes, tomledit.Change{Table: lf.parts[:len(lf.parts)-1], Key: lf.parts[len(lf.parts)-1], Value: lf.value})
				}
			}
		}
		sortChanges(changes)
		if cand, err = p.edit(main.Data, changes); err != nil {
			return pl, fmt.Errorf("%w (making %s explicit, since the file relies on containerd's built-in definition)", err, strings.Join(lost, ", "))
		}
		if after, err = p.dumpWith(ctx, cand, nil); err != nil {
			return pl, fmt.Errorf("%w: containerd %s would not load %s after the change (%v); left untouched", ErrUnsupported, p.run, p.t.Config, err)
		}
	}
	if err := p.verify(before, after, o, map[string][]byte{p.t.Config: cand}); err != nil {
		return pl, err
	}
	pl.Changes = []FileChange{{Path: p.t.Config, Old: main.Data, New: cand}}
	pl.Fingerprint = fingerprint(after, o)
	pl.Candidate = candidateID(pl.Changes)
	return pl, nil
}

// lostRuntimes are runtimes other than ours the candidate's merge no longer
// has at all.
func lostRuntimes(before, after map[string]any, l layout, ours string) []string {
	b, _ := lookupMap(before, l.runtimes()...)
	a, _ := lookupMap(after, l.runtimes()...)
	var out []string
	for r := range b {
		if _, ok := a[r]; !ok && r != ours {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

func toChanges(ls []leaf) []tomledit.Change {
	out := make([]tomledit.Change, 0, len(ls))
	for _, l := range ls {
		out = append(out, tomledit.Change{Table: l.parts[:len(l.parts)-1], Key: l.parts[len(l.parts)-1], Value: l.value})
	}
	return out
}

func sortChanges(c []tomledit.Change) {
	sort.SliceStable(c, func(i, j int) bool {
		return tomledit.FormatPath(c[i].Table) < tomledit.FormatPath(c[j].Table)
	})
}

// edit applies changes to a file, keeping its byte order mark (containerd
// 1.7 reads a file that has one; the editor and parser here do not).
func (p *planner) edit(data []byte, changes []tomledit.Change) ([]byte, error) {
	body := stripBOM(data)
	out, err := tomledit.Apply(body, changes, tomledit.Render)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v; left untouched", ErrUnsupported, p.t.Config, err)
	}
	if len(body) != len(data) {
		out = append(slices.Clone(bom), out...)
	}
	return out, nil
}

// dropIn: containerd 2.x deep-merges plugin tables, so the handler goes in
// a drop-in of ours, imported by its literal path (never a glob: a glob
// also reads whatever else lands in that directory). When kata-deploy's
// own drop-in holds the handler and lost its import (GKE rewrote the main
// file), its import is restored instead, and ours only adds what its
// configuration lacks.
func (p *planner) dropIn(ctx context.Context, files []LoadFile, before map[string]any) (Plan, error) {
	l := layoutOf(p.run)
	t := p.t
	pl := Plan{Mode: "drop-in"}
	main := files[0]
	ours := t.DropIn()
	doc, err := tomledit.Decode(stripBOM(main.Data))
	if err != nil {
		return pl, fmt.Errorf("%w: %s: %v; left untouched", ErrMalformed, t.Config, err)
	}
	imports, err := stringList(doc["imports"])
	if err != nil {
		return pl, fmt.Errorf("%w: %s: imports: %v", ErrUnsupported, t.Config, err)
	}
	resolveEntry := func(e string) string {
		e = filepath.Clean(e)
		if !filepath.IsAbs(e) {
			e = filepath.Join(filepath.Dir(t.Config), e)
		}
		return e
	}
	var base []string
	for _, e := range imports {
		r := resolveEntry(e)
		if r == ours {
			continue
		}
		if strings.Contains(r, "*") {
			if ok, _ := filepath.Match(r, ours); ok {
				return pl, fmt.Errorf("%w: %s imports %q, which also matches the sidecar's drop-in %s; use a --dropin-dir no imports glob reads", ErrUnsupported, t.Config, e, ours)
			}
		}
		base = append(base, e)
	}
	o := owned{l: l, h: p.h}
	// In conf.d mode kata-deploy 4.x removes the legacy drop-in's import
	// on every install (runtime/containerd.rs remove_legacy_drop_in_import,
	// 4.0.0 and 4.1.0); adding it back would start a fight in which the
	// stale file's settings win containerd's merge in between. The settings
	// learned from it go into the sidecar's own drop-in instead.
	restoreImport := p.kd.DropIn != "" && !loads(files, p.kd.DropIn) &&
		!(p.kd.DropIn == legacyDropIn(p.kataDir) && confDMode(p.run, t.Config, imports))
	if restoreImport {
		base = append(base, p.kd.DropIn)
		for _, r := range p.kd.Runtimes {
			o.extras = append(o.extras, cat(l.runtimes(), []string{r}), cat(l.platforms(r)))
		}
		for _, pp := range p.kd.ProxyPlugins {
			o.extras = append(o.extras, cat(proxyPlugins, []string{pp}))
		}
	}
	baseMain, err := p.withImports(main.Data, doc, base)
	if err != nil {
		return pl, err
	}
	baseDump := before
	if !bytes.Equal(baseMain, main.Data) {
		if baseDump, err = p.dumpWith(ctx, baseMain, nil); err != nil {
			return pl, fmt.Errorf("%w: containerd %s would not load %s with the imports %q (%v); left untouched", ErrUnsupported, p.run, t.Config, base, err)
		}
	}
	var drop []byte
	if miss := missing(wanted(p.h, l), baseDump); len(miss) > 0 {
		drop = renderDropIn(p.h, dropInVersion(p.run, main.Version), miss)
	}
	final := base
	if drop != nil {
		final = append(slices.Clone(base), ours)
	}
	cand, err := p.withImports(main.Data, doc, final)
	if err != nil {
		return pl, err
	}
	cur, err := readOptional(ours)
	if err != nil {
		return pl, fmt.Errorf("read %s: %w", ours, err)
	}
	if !bytes.Equal(drop, cur) && (drop != nil || cur != nil) {
		pl.Changes = append(pl.Changes, FileChange{Path: ours, Old: cur, New: drop})
	}
	if !bytes.Equal(cand, main.Data) {
		pl.Changes = append(pl.Changes, FileChange{Path: t.Config, Old: main.Data, New: cand})
	}
	// The drop-in exists before the import names it, and the import goes
	// before the drop-in is removed: containerd does not start with an
	// import whose file is missing.
	if drop == nil {
		slices.Reverse(pl.Changes)
	}
	if pl.Converged() {
		pl.Fingerprint = fingerprint(before, o)
		return pl, nil
	}
	extra := map[string][]byte{}
	if drop != nil {
		extra[ours] = drop
	}
	after, err := p.dumpWith(ctx, cand, extra)
	if err != nil {
		return pl, fmt.Errorf("%w: containerd %s would not load %s after the change (%v); left untouched", ErrUnsupported, p.run, t.Config, err)
	}
	over := map[string][]byte{t.Config: cand}
	if drop != nil {
		over[ours] = drop
	}
	if err := p.verify(before, after, o, over); err != nil {
		return pl, err
	}
	pl.Fingerprint = fingerprint(after, o)
	pl.Candidate = candidateID(pl.Changes)
	return pl, nil
}

func loads(files []LoadFile, path string) bool {
	for _, f := range files {
		if f.Path == path {
			return true
		}
	}
	return false
}

// withImports sets the main file's imports to list (or leaves the bytes
// alone when they already say so).
func (p *planner) withImports(data []byte, doc map[string]any, list []string) ([]byte, error) {
	cur, _ := stringList(doc["imports"])
	if slices.Equal(cur, list) || (len(list) == 0 && doc["imports"] == nil) {
		return data, nil
	}
	return p.edit(data, []tomledit.Change{{Key: "imports", Value: strs(list)}})
}

// verify proves the candidate with containerd's merge: nothing but the
// handler's own settings changes, the handler's settings hold, and the
// merged config version is the main file's.
func (p *planner) verify(before, after map[string]any, o owned, override map[string][]byte) error {
	if v := violations(before, after, o); len(v) > 0 {
		shown := v
		if len(shown) > 6 {
			shown = append(slices.Clone(shown[:6]), fmt.Sprintf("and %d more", len(v)-6))
		}
		return fmt.Errorf("%w: in containerd %s's merge, the change would also alter %s; left untouched. %s",
			ErrUnsupported, p.run, strings.Join(shown, ", "), p.hint(override))
	}
	if miss := missing(wanted(p.h, o.l), after); len(miss) > 0 {
		var keys []string
		for _, m := range miss {
			keys = append(keys, m.key())
		}
		return fmt.Errorf("%w: in containerd %s's merge the change would not take effect (%s); another imported file overrides it; left untouched. %s",
			ErrUnsupported, p.run, strings.Join(keys, ", "), p.hint(override))
	}
	files, err := LoadSet(p.t.Config, override)
	if err != nil {
		return fmt.Errorf("%w: %v; left untouched", ErrUnsupported, err)
	}
	if mv := MergedVersion(p.run, files); mv != files[0].Version {
		culprit := lastWithVersion(files, mv)
		return fmt.Errorf("%w: containerd %s would merge the configuration as version %d (set by %s) while %s is version %d, and then ignore the main file's settings; left untouched. Give %s the main file's version or stop importing it",
			ErrUnsupported, p.run, mv, culprit, p.t.Config, files[0].Version, culprit)
	}
	return nil
}

func lastWithVersion(files []LoadFile, v int) string {
	culprit := ""
	for _, f := range files {
		if f.Version == v {
			culprit = f.Path
		}
	}
	return culprit
}

// hint names the files containerd would load besides the main one, where
// the conflict comes from.
func (p *planner) hint(override map[string][]byte) string {
	files, err := LoadSet(p.t.Config, override)
	if err != nil || len(files) < 2 {
		if p.run.Major < 2 {
			return fmt.Sprintf("Check %s: the handler must be addable to it without changing anything else.", p.t.Config)
		}
		return ""
	}
	var names []string
	for _, f := range files[1:] {
		names = append(names, f.Path)
	}
	return fmt.Sprintf("containerd also loads %s: remove the conflicting settings there, or stop importing it.", strings.Join(names, ", "))
}

// dumpWith runs `config dump` on a candidate main file, assembled in the
// scratch directory with every import made absolute and the entries named
// in extra pointed at candidate copies, so that containerd reads the exact
// files it would read after the change.
func (p *planner) dumpWith(ctx context.Context, main []byte, extra map[string][]byte) (map[string]any, error) {
	dir, err := os.MkdirTemp(p.scratch, "check-")
	if err != nil {
		return nil, fmt.Errorf("scratch directory for the check (mount an emptyDir at %s): %w", p.scratch, err)
	}
	defer os.RemoveAll(dir)
	doc, err := tomledit.Decode(stripBOM(main))
	if err != nil {
		return nil, fmt.Errorf("%w: candidate %s: %v", ErrMalformed, p.t.Config, err)
	}
	imports, _ := stringList(doc["imports"])
	var list []string
	for i, e := range imports {
		e = filepath.Clean(e)
		if !filepath.IsAbs(e) {
			e = filepath.Join(filepath.Dir(p.t.Config), e)
		}
		if data, ok := extra[e]; ok {
			copyPath := filepath.Join(dir, fmt.Sprintf("import-%d.toml", i))
			if err := os.WriteFile(copyPath, data, 0o644); err != nil {
				return nil, err
			}
			e = copyPath
		}
		list = append(list, e)
	}
	if len(imports) > 0 {
		body, err := tomledit.Apply(stripBOM(main), []tomledit.Change{{Key: "imports", Value: strs(list)}}, tomledit.Render)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, p.t.Config, err)
		}
		if len(stripBOM(main)) != len(main) {
			body = append(slices.Clone(bom), body...)
		}
		main = body
	}
	path := filepath.Join(dir, filepath.Base(p.t.Config))
	if err := os.WriteFile(path, main, 0o644); err != nil {
		return nil, err
	}
	return p.ctr.Dump(ctx, path)
}

func candidateID(changes []FileChange) string {
	var b bytes.Buffer
	for _, c := range changes {
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00", c.Path, sum(c.Old), sum(c.New))
	}
	return sum(b.Bytes())
}

// dropInVersion is the config version of the sidecar's drop-in. containerd
// 2.0–2.2 merge all files first and migrate the result from the version of
// the last file merged, so the drop-in has the main file's version (a
// version 3 drop-in over GKE's version 2 file would leave every GKE CRI
// setting unmigrated and ignored). From 2.3 every file is migrated on its
// own, and a version 2 file migrates discard_unpacked_layers only when it
// also defines a runtime (plugins/cri/images/plugin.go migrateConfig returns
// early without containerd.runtimes, v2.4.2), which the sidecar's drop-in
// does not when kata-deploy's defines the handler: it uses the split CRI
// plugins of version 3 directly.
func dropInVersion(run Runtime, main int) int {
	if run.MigratesEachFile() && main < 3 {
		return 3
	}
	return main
}

// fileKey maps a dump key of containerd 2.x to where a drop-in of the given
// version sets it: a version 2 drop-in uses the version 2 CRI table, which
// the plugins' migration copies into the split plugins (and which would
// override a split-plugin key the same migration copies over from GKE's
// version 2 main file).
func fileKey(parts []string, version int) []string {
	if version >= 3 {
		return parts
	}
	switch {
	case hasPrefix(parts, cat(criRuntime2, []string{"containerd"})):
		return cat(cri17, parts[len(criRuntime2):])
	case hasPrefix(parts, criImages2) && len(parts) == 3 && (parts[2] == keyDiscardUnpackedLayers || parts[2] == keyDisableSnapshotAnnotations):
		return cat(cri17, []string{"containerd", parts[2]})
	}
	return parts
}

// renderDropIn writes the sidecar's drop-in for containerd 2.x: the given
// settings, in config version version (dropInVersion).
func renderDropIn(h Handler, version int, settings []leaf) []byte {
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
		p := fileKey(s.parts, version)
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

func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}
