// Package configplan is the node sidecar's containerd configuration
// planner: from the files containerd loads, kata-deploy's files and the
// facts of the running release (containerdrelease), the change that keeps
// a runtime handler in containerd's configuration, proven with containerd's
// own merge (`config dump`, through a Checker) before anything is written.
// It writes nothing on the node: the sidecar (package remediate) decides
// when to plan, writes the plan's files, restarts containerd and rolls back.
package configplan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// Errors a plan reports; the files are left untouched.
var (
	ErrMalformed   = errors.New("containerd config is not valid TOML")
	ErrUnsupported = errors.New("containerd config cannot be changed safely")
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

// FileChange is one file to write.
type FileChange struct {
	Path     string
	Old, New []byte // Old nil: the file does not exist; New nil: remove it
}

// Plan is what a reconcile would write; no changes means converged.
type Plan struct {
	Mode        containerdrelease.Strategy // the running release's
	FileVersion int                        // version of the main config
	Changes     []FileChange
	Handler     Handler // the handler kept, after learning
	Source      string  // where its settings came from
	// Fingerprint of the handler's effective settings in containerd's merge
	// of the files as they will be.
	Fingerprint string
	// Candidate identifies the change (its inputs and outputs): a change
	// containerd did not come back with is known again by it.
	Candidate string
}

// Converged reports whether nothing needs writing.
func (p Plan) Converged() bool { return len(p.Changes) == 0 }

// Checker is containerd's own merge of a configuration: `containerd
// --config main config dump`, decoded, run with the node's containerd
// binary, so that the merge rules (imports, globs, whole-table replacement,
// version migration, BOM acceptance, defaults) are those of the exact
// release that will load the files.
type Checker interface {
	Dump(ctx context.Context, main string) (map[string]any, error)
}

// Planner holds what a plan is computed from.
type Planner struct {
	Checker Checker
	Run     containerdrelease.Runtime // the running containerd and its release's facts
	Handler Handler
	Target  Target
	// KataDeploy is what kata-deploy left on the node (DetectKataDeploy);
	// Handler has already learned from it.
	KataDeploy KataDeploy
	KataDir    string // kata-deploy's install directory
	Scratch    string // where candidates are assembled for the check
	// Explicit are the handler flags given on the command line, which
	// nothing learned overrides; Source says where Handler came from.
	Explicit map[string]bool
	Source   string
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Plan computes the change that keeps Handler in containerd's
// configuration and proves it with containerd's own merge; it writes
// nothing.
func (in Planner) Plan(ctx context.Context) (Plan, error) {
	p := in // learning replaces p.Handler
	return p.plan(ctx)
}

func (p *Planner) plan(ctx context.Context) (Plan, error) {
	t := p.Target
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
	if version > p.Run.MaxConfigVersion {
		return Plan{}, fmt.Errorf("%w: %s declares version %d but containerd %s understands at most %d; containerd would not start with it, fix the file first",
			ErrUnsupported, t.Config, version, p.Run, p.Run.MaxConfigVersion)
	}
	if mv := MergedVersion(p.Run, files); mv != version {
		return Plan{}, fmt.Errorf("%w: containerd %s merges the current configuration as version %d (set by %s) while %s is version %d, so the main file's settings (CNI, runc, sandbox image) are ignored now; left untouched. Give %s the main file's version or stop importing it",
			ErrUnsupported, p.Run, mv, lastWithVersion(files, mv), t.Config, version, lastWithVersion(files, mv))
	}
	before, err := p.Checker.Dump(ctx, t.Config)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: containerd %s cannot load the current configuration (%v); fix %s first, it was left untouched", ErrUnsupported, p.Run, err, t.Config)
	}
	source := p.Source
	if p.KataDeploy.Handler == nil {
		// No kata-deploy drop-in or layout: the settings of a handler
		// already in the merged configuration (kata-deploy's in-place edit
		// on 1.7, an operator's) are kept; only what it lacks is added.
		if h, ok := handlerFromDoc(before, p.Handler.Name); ok {
			if learned := Learn(p.Handler, h, p.Explicit); !learned.Equal(p.Handler) {
				p.Handler, source = learned, "the handler already in containerd's configuration"
			}
		}
	}
	var pl Plan
	switch p.Run.Strategy {
	case containerdrelease.InPlace:
		pl, err = p.inPlace(ctx, files, before)
	case containerdrelease.DropIn:
		pl, err = p.dropIn(ctx, files, before)
	default:
		return Plan{}, fmt.Errorf("%w: containerd %s: its release row names no strategy (%q)", ErrUnsupported, p.Run, p.Run.Strategy)
	}
	pl.FileVersion, pl.Handler, pl.Source = version, p.Handler, source
	return pl, err
}

// inPlace is containerdrelease.InPlace: the release replaces a whole plugin
// table with an imported one (1.7), so a drop-in carrying any CRI key would
// erase GKE's CRI settings (CNI bin_dir); the handler is edited into the
// main file, key by key.
func (p *Planner) inPlace(ctx context.Context, files []LoadFile, before map[string]any) (Plan, error) {
	l := p.Run.CRI
	o := owned{l: l, h: p.Handler}
	pl := Plan{Mode: containerdrelease.InPlace}
	miss := missing(wanted(p.Handler, l), before)
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
		return pl, fmt.Errorf("%w: containerd %s would not load %s after the change (%v); left untouched", ErrUnsupported, p.Run, p.Target.Config, err)
	}
	// A runtime that came from containerd's built-in defaults (runc, when
	// the file names no runtime) is lost once the file defines a runtimes
	// table: the decoded map replaces the default one. Write it explicitly,
	// with the values containerd itself reports, and check again.
	if lost := lostRuntimes(before, after, l, p.Handler.Name); len(lost) > 0 {
		for _, lf := range flatten(before) {
			for _, r := range lost {
				if hasPrefix(lf.parts, slices.Concat(l.Runtimes, []string{r})) {
					changes = append(changes, tomledit.Change{Table: lf.parts[:len(lf.parts)-1], Key: lf.parts[len(lf.parts)-1], Value: lf.value})
				}
			}
		}
		sortChanges(changes)
		if cand, err = p.edit(main.Data, changes); err != nil {
			return pl, fmt.Errorf("%w (making %s explicit, since the file relies on containerd's built-in definition)", err, strings.Join(lost, ", "))
		}
		if after, err = p.dumpWith(ctx, cand, nil); err != nil {
			return pl, fmt.Errorf("%w: containerd %s would not load %s after the change (%v); left untouched", ErrUnsupported, p.Run, p.Target.Config, err)
		}
	}
	if err := p.verify(before, after, o, map[string][]byte{p.Target.Config: cand}); err != nil {
		return pl, err
	}
	pl.Changes = []FileChange{{Path: p.Target.Config, Old: main.Data, New: cand}}
	pl.Fingerprint = fingerprint(after, o)
	pl.Candidate = candidateID(pl.Changes)
	return pl, nil
}

// lostRuntimes are runtimes other than ours the candidate's merge no longer
// has at all.
func lostRuntimes(before, after map[string]any, l containerdrelease.CRITables, ours string) []string {
	b, _ := lookupMap(before, l.Runtimes...)
	a, _ := lookupMap(after, l.Runtimes...)
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
func (p *Planner) edit(data []byte, changes []tomledit.Change) ([]byte, error) {
	body := stripBOM(data)
	out, err := tomledit.Apply(body, changes, tomledit.Render)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v; left untouched", ErrUnsupported, p.Target.Config, err)
	}
	if len(body) != len(data) {
		out = append(slices.Clone(bom), out...)
	}
	return out, nil
}

// dropIn is containerdrelease.DropIn: the release deep-merges plugin
// tables (2.x), so the handler goes in a drop-in of ours, imported by its
// literal path (never a glob: a glob also reads whatever else lands in that
// directory). When kata-deploy's own drop-in holds the handler and lost its
// import (GKE rewrote the main file), its import is restored instead, and
// ours only adds what its configuration lacks.
func (p *Planner) dropIn(ctx context.Context, files []LoadFile, before map[string]any) (Plan, error) {
	l := p.Run.CRI
	t := p.Target
	pl := Plan{Mode: containerdrelease.DropIn}
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
	o := owned{l: l, h: p.Handler}
	// In conf.d mode kata-deploy 4.x removes the legacy drop-in's import
	// on every install (runtime/containerd.rs remove_legacy_drop_in_import,
	// 4.0.0 and 4.1.0); adding it back would start a fight in which the
	// stale file's settings win containerd's merge in between. The settings
	// learned from it go into the sidecar's own drop-in instead.
	restoreImport := p.KataDeploy.DropIn != "" && !loads(files, p.KataDeploy.DropIn) &&
		!(p.KataDeploy.DropIn == LegacyDropIn(p.KataDir) && confDMode(p.Run, t.Config, imports))
	if restoreImport {
		base = append(base, p.KataDeploy.DropIn)
		for _, r := range p.KataDeploy.Runtimes {
			o.extras = append(o.extras, slices.Concat(l.Runtimes, []string{r}))
			if l.RuntimePlatforms != nil {
				o.extras = append(o.extras, platforms(l, r))
			}
		}
		for _, pp := range p.KataDeploy.ProxyPlugins {
			o.extras = append(o.extras, slices.Concat(proxyPlugins, []string{pp}))
		}
	}
	baseMain, err := p.withImports(main.Data, doc, base)
	if err != nil {
		return pl, err
	}
	baseDump := before
	if !bytes.Equal(baseMain, main.Data) {
		if baseDump, err = p.dumpWith(ctx, baseMain, nil); err != nil {
			return pl, fmt.Errorf("%w: containerd %s would not load %s with the imports %q (%v); left untouched", ErrUnsupported, p.Run, t.Config, base, err)
		}
	}
	var drop []byte
	if miss := missing(wanted(p.Handler, l), baseDump); len(miss) > 0 {
		drop = renderDropIn(p.Handler, l, dropInVersion(p.Run, main.Version), miss)
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
		return pl, fmt.Errorf("%w: containerd %s would not load %s after the change (%v); left untouched", ErrUnsupported, p.Run, t.Config, err)
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

// withImports sets the main file's imports to list (or leaves the bytes
// alone when they already say so).
func (p *Planner) withImports(data []byte, doc map[string]any, list []string) ([]byte, error) {
	cur, _ := stringList(doc["imports"])
	if slices.Equal(cur, list) || (len(list) == 0 && doc["imports"] == nil) {
		return data, nil
	}
	return p.edit(data, []tomledit.Change{{Key: "imports", Value: strs(list)}})
}

// verify proves the candidate with containerd's merge: nothing but the
// handler's own settings changes, the handler's settings hold, and the
// merged config version is the main file's.
func (p *Planner) verify(before, after map[string]any, o owned, override map[string][]byte) error {
	if v := violations(before, after, o); len(v) > 0 {
		shown := v
		if len(shown) > 6 {
			shown = append(slices.Clone(shown[:6]), fmt.Sprintf("and %d more", len(v)-6))
		}
		return fmt.Errorf("%w: in containerd %s's merge, the change would also alter %s; left untouched. %s",
			ErrUnsupported, p.Run, strings.Join(shown, ", "), p.hint(override))
	}
	if miss := missing(wanted(p.Handler, o.l), after); len(miss) > 0 {
		var keys []string
		for _, m := range miss {
			keys = append(keys, m.key())
		}
		return fmt.Errorf("%w: in containerd %s's merge the change would not take effect (%s); another imported file overrides it; left untouched. %s",
			ErrUnsupported, p.Run, strings.Join(keys, ", "), p.hint(override))
	}
	files, err := LoadSet(p.Target.Config, override)
	if err != nil {
		return fmt.Errorf("%w: %v; left untouched", ErrUnsupported, err)
	}
	if mv := MergedVersion(p.Run, files); mv != files[0].Version {
		culprit := lastWithVersion(files, mv)
		return fmt.Errorf("%w: containerd %s would merge the configuration as version %d (set by %s) while %s is version %d, and then ignore the main file's settings; left untouched. Give %s the main file's version or stop importing it",
			ErrUnsupported, p.Run, mv, culprit, p.Target.Config, files[0].Version, culprit)
	}
	return nil
}

// hint names the files containerd would load besides the main one, where
// the conflict comes from.
func (p *Planner) hint(override map[string][]byte) string {
	files, err := LoadSet(p.Target.Config, override)
	if err != nil || len(files) < 2 {
		if p.Run.Strategy == containerdrelease.InPlace {
			return fmt.Sprintf("Check %s: the handler must be addable to it without changing anything else.", p.Target.Config)
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
func (p *Planner) dumpWith(ctx context.Context, main []byte, extra map[string][]byte) (map[string]any, error) {
	dir, err := os.MkdirTemp(p.Scratch, "check-")
	if err != nil {
		return nil, fmt.Errorf("scratch directory for the check (mount an emptyDir at %s): %w", p.Scratch, err)
	}
	defer os.RemoveAll(dir)
	doc, err := tomledit.Decode(stripBOM(main))
	if err != nil {
		return nil, fmt.Errorf("%w: candidate %s: %v", ErrMalformed, p.Target.Config, err)
	}
	imports, _ := stringList(doc["imports"])
	var list []string
	for i, e := range imports {
		e = filepath.Clean(e)
		if !filepath.IsAbs(e) {
			e = filepath.Join(filepath.Dir(p.Target.Config), e)
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
			return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, p.Target.Config, err)
		}
		if len(stripBOM(main)) != len(main) {
			body = append(slices.Clone(bom), body...)
		}
		main = body
	}
	path := filepath.Join(dir, filepath.Base(p.Target.Config))
	if err := os.WriteFile(path, main, 0o644); err != nil {
		return nil, err
	}
	return p.Checker.Dump(ctx, path)
}

func candidateID(changes []FileChange) string {
	var b bytes.Buffer
	for _, c := range changes {
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00", c.Path, sum(c.Old), sum(c.New))
	}
	return sum(b.Bytes())
}
