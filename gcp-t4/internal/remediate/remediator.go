package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/nodeevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	corev1 "k8s.io/api/core/v1"
)

// Config is what the remediator keeps and where.
type Config struct {
	Handler configplan.Handler
	// Explicit are the handler flags set on the command line: what is
	// learned from kata-deploy's files never overrides them.
	Explicit          map[string]bool
	Target            configplan.Target
	Host              Host
	KataDir           string // kata-deploy's install directory, mounted at its host path
	Lock              HostLock
	ContainerdVersion string        // overrides what the probe reports
	Settle            time.Duration // quiet time after the last config change before a restart
	Quiet             time.Duration // a file must be closed by its writers and unchanged this long
	VerifyTimeout     time.Duration // how long a restarted containerd gets to show the handler
	Scratch           string        // where candidates are assembled for the check ("" = $TMPDIR)
	DryRun            bool
	// CreateContainerTimeout is the create_container_timeout kata-remote
	// gets from the sidecar's drop-in in its config.d, and the least the
	// node's effective value must be to be ready; 0 leaves kata-remote's
	// configuration alone (katatimeout.go).
	CreateContainerTimeout time.Duration
	// Releases are the containerd release lines the sidecar knows; nil is
	// containerdrelease.Known. A test adds a line here as one row.
	Releases containerdrelease.Table
}

// ErrUnknownRun is reported when the running containerd's version cannot be
// learned: without it, no row of the release table applies.
var ErrUnknownRun = errors.New("running containerd version unknown")

// statePath is where the sidecar keeps its State: next to its drop-in, in
// its own directory.
func statePath(t configplan.Target) string { return filepath.Join(t.DropInDir, "state.json") }

// NodeGetter reads this pod's Node (labels, runtime version, handlers).
type NodeGetter func(ctx context.Context) (*corev1.Node, error)

// Remediator converges one node. Its methods are for one caller at a
// time; Run serialises its own calls.
type Remediator struct {
	cfg       Config
	probe     Probe // nil: no CRI socket
	node      NodeGetter
	restarter restart.Restarter // nil: never restart
	ctr       Containerd
	budget    *restart.Budget
	events    Events
	metrics   *Metrics
	now       func() time.Time
	log       *slog.Logger
	state     StateStore

	// beforeRename is only set by the crash test.
	beforeRename func(tmp string)
	// step is only set by the interruption tests: called after each step
	// of a write, restart and rollback that leaves something on disk, it
	// stops the pass there as a kill of the sidecar would.
	step func(name string)

	mu    sync.Mutex
	ready bool
	// kataReason is why kata-remote's create_container_timeout keeps the
	// node from ready ("" when it does not); kataChecked once a pass set it.
	kataReason  string
	kataChecked bool
	// kataWritable: kata-remote's config.d was seen writable by this
	// process, so a read-only one later means its mount went away.
	kataWritable bool
	lastEvent    string // the last Warning/Normal reported, so a resync does not repeat it
	// lastConverged is the last plan that found nothing to write, and
	// what it was computed from.
	lastConverged *convergedPlan
	// ctrVersion caches the checker binary's version by its mtime.
	ctrVersion   containerdrelease.Version
	ctrVersionAt time.Time
}

// Deps are the remediator's collaborators; nil ones are left out.
type Deps struct {
	Probe      Probe
	Node       NodeGetter
	Restarter  restart.Restarter
	Containerd Containerd // the node's containerd binary, for `config dump`
	Budget     *restart.Budget
	Events     Events
	Metrics    *Metrics
	Now        func() time.Time
	Logger     *slog.Logger
}

// New validates cfg and returns a remediator.
func New(cfg Config, d Deps) (*Remediator, error) {
	if err := cfg.Handler.Validate(); err != nil {
		return nil, err
	}
	if cfg.Target.Config == "" || cfg.Target.DropInDir == "" || cfg.Target.DropInName == "" {
		return nil, errors.New("--config, --dropin-dir and --dropin-name must not be empty")
	}
	if cfg.VerifyTimeout <= 0 {
		cfg.VerifyTimeout = 2 * time.Minute
	}
	if cfg.KataDir == "" {
		cfg.KataDir = configplan.KataDeployDir
	}
	if cfg.Scratch == "" {
		cfg.Scratch = os.TempDir()
	}
	if cfg.Releases == nil {
		cfg.Releases = containerdrelease.Known
	}
	r := &Remediator{cfg: cfg, probe: d.Probe, node: d.Node, restarter: d.Restarter, ctr: d.Containerd, budget: d.Budget,
		events: d.Events, metrics: d.Metrics, now: d.Now, log: d.Logger, state: StateStore{Path: statePath(cfg.Target)}}
	if r.budget == nil {
		r.budget = restart.NewBudget(0, 0)
	}
	if r.metrics == nil {
		r.metrics = NewMetrics()
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Result is the outcome of one reconcile.
type Result struct {
	Skipped   string          // why nothing was done on purpose (COS, kata not installed, kata-deploy at work)
	Plan      configplan.Plan // what was (or, in dry-run, would be) written
	Wrote     []string        // files replaced or removed
	Diff      string          // dry-run: unified-style diff of the changes
	Restarted bool
	// RetryIn asks the loop to reconcile again after this long (a file
	// being written, a restart waiting for the config to settle or for its
	// budget, the host lock held).
	RetryIn    time.Duration
	Converged  bool // config has the handler and the running containerd loaded it
	RolledBack bool // a restart did not bring the handler up; the files were put back
}

// Ready reports whether the last reconcile ended converged and, with
// CreateContainerTimeout, kata-remote's effective create_container_timeout
// is at least that (ReadyReason says why not).
func (r *Remediator) Ready() bool { return r.ReadyReason() == "" }

func (r *Remediator) setReady(ok bool) {
	r.mu.Lock()
	r.ready = ok
	r.mu.Unlock()
	if ok {
		r.metrics.Converged.Set(1)
		r.metrics.LastConverged.Set(float64(r.now().Unix()))
	} else {
		r.metrics.Converged.Set(0)
	}
}

// report records an Event unless it is the one reported last: a failure
// that repeats at every resync is reported once, and again only after the
// node converged in between or something else was reported.
func (r *Remediator) report(ctx context.Context, warning bool, reason, msg string) {
	key := reason + "\x00" + msg
	if r.lastEvent == key {
		return
	}
	r.lastEvent = key
	r.events.Emit(ctx, warning, reason, msg)
}

// converged clears the de-duplication: the next failure is news.
func (r *Remediator) converged() {
	r.lastEvent = ""
	r.setReady(true)
}

func (r *Remediator) fail(ctx context.Context, reason string, err error) error {
	r.metrics.Failures.WithLabelValues(reason).Inc()
	r.setReady(false)
	r.report(ctx, true, reason, err.Error())
	return err
}

func (r *Remediator) skip(ctx context.Context, reason, why string) (Result, error) {
	r.setReady(false)
	r.report(ctx, true, reason, why)
	return Result{Skipped: why}, nil
}

// Reconcile runs one pass: checks, plan, proof, safe write, restart if
// needed (and roll back if containerd does not come back with it).
func (r *Remediator) Reconcile(ctx context.Context) (Result, error) {
	var node *corev1.Node
	if r.node != nil {
		n, err := r.node(ctx)
		if err != nil {
			r.log.Warn("reading the node failed; going on without it", "err", err.Error())
		} else {
			node = n
		}
	}
	if why := r.cfg.Host.COSReason(node); why != "" {
		return r.skip(ctx, nodeevents.UnsupportedOS, why)
	}
	if res, done, err := r.recoverPending(ctx); done {
		return res, err
	}
	for _, p := range r.kataDeployFiles() {
		if wait, why := settled(p, r.cfg.Quiet, time.Now()); wait > 0 {
			r.setReady(false)
			r.log.Debug("waiting for a writer", "why", why)
			return Result{RetryIn: wait}, nil
		}
	}
	run, err := r.runtime(ctx, node)
	if err != nil {
		return Result{}, r.fail(ctx, "RuntimeVersionUnknown", err)
	}
	kd, err := configplan.DetectKataDeploy(r.cfg.KataDir, r.cfg.Target.Config, r.cfg.Handler.Name, run)
	if err != nil {
		return Result{}, r.fail(ctx, "ConfigMalformed", err)
	}
	h, source := r.cfg.Handler, "flags"
	if kd.Handler != nil {
		h = configplan.Learn(h, *kd.Handler, r.cfg.Explicit)
		source = "kata-deploy 4.x's installation under " + r.cfg.KataDir
		if kd.DropIn != "" {
			source = "kata-deploy's drop-in " + kd.DropIn
		}
	}
	// A handler already in containerd's configuration takes precedence
	// over the flag defaults (docs/remediation.md): its own paths are what
	// must exist, checked once the plan has learned them.
	if missing := r.cfg.Host.MissingKata(h); missing != "" && (kd.Handler != nil || !configplan.Declares(r.cfg.Target.Config, h.Name)) {
		return r.skip(ctx, nodeevents.ShimMissing, fmt.Sprintf("%s is not on the host; not registering %s until kata is installed (a handler without its shim breaks every pod using it)", missing, h.Name))
	}
	if why := kataDeployInstalling(kd, node); why != "" {
		r.setReady(false)
		r.report(ctx, false, "WaitingForKataDeploy", why)
		return Result{Skipped: why}, nil
	}
	if err := r.checkBinary(ctx, run); err != nil {
		return Result{}, r.fail(ctx, "ConfigCheckUnavailable", err)
	}
	lockCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	unlock, err := r.cfg.Lock.Acquire(lockCtx)
	cancel()
	if errors.Is(err, errLockBusy) && ctx.Err() == nil {
		r.setReady(false)
		r.report(ctx, false, "WaitingForHostLock", err.Error())
		return Result{RetryIn: 2 * time.Second}, nil
	}
	if err != nil {
		return Result{}, r.fail(ctx, "HostLock", err)
	}
	// The lock is held through the restart and its verification, as
	// kata-deploy 4.1.0 holds it through its own (main.rs
	// install_stage_cri: the guard of acquire_node_mutation_lock lives until
	// after restart_runtime): neither restarts containerd while the other
	// is half-way through an edit.
	defer unlock()
	if err := r.keepTimeout(ctx, h); err != nil {
		r.setReady(false)
		return Result{}, err
	}
	res, err := r.converge(ctx, run, h, source, kd)
	if err != nil {
		reason := "WriteFailed"
		switch {
		case errors.Is(err, configplan.ErrMalformed):
			reason = "ConfigMalformed"
		case errors.Is(err, configplan.ErrUnsupported):
			reason = "ConfigUnsupported"
		case errors.Is(err, errSkip):
			return r.skip(ctx, nodeevents.ShimMissing, strings.TrimPrefix(err.Error(), errSkip.Error()+": "))
		}
		return res, r.fail(ctx, reason, err)
	}
	if r.cfg.DryRun || res.RetryIn > 0 {
		r.setReady(false)
		return res, nil
	}
	return r.ensureLoaded(ctx, node, res)
}

var errSkip = errors.New("skip")

// kataDeployFiles are the kata-deploy files read before planning.
func (r *Remediator) kataDeployFiles() []string {
	return []string{configplan.LegacyDropIn(r.cfg.KataDir), configplan.ConfDDropIn(r.cfg.Target.Config)}
}

func (r *Remediator) runtime(ctx context.Context, node *corev1.Node) (containerdrelease.Runtime, error) {
	if r.cfg.ContainerdVersion != "" {
		return r.cfg.Releases.Lookup(r.cfg.ContainerdVersion)
	}
	var errs []error
	if r.probe != nil {
		v, err := r.probe.RuntimeVersion(ctx)
		if err == nil {
			return r.cfg.Releases.Lookup(v)
		}
		errs = append(errs, err)
	}
	if node != nil && node.Status.NodeInfo.ContainerRuntimeVersion != "" {
		return r.cfg.Releases.Lookup(node.Status.NodeInfo.ContainerRuntimeVersion)
	}
	return containerdrelease.Runtime{}, fmt.Errorf("%w: mount the containerd socket (--cri-socket), run with NODE_NAME set, or pass --containerd-version: %v", ErrUnknownRun, errors.Join(errs...))
}

// checkBinary makes sure the binary that proves changes is the release the
// node runs: the check is only as good as the containerd doing it.
func (r *Remediator) checkBinary(ctx context.Context, run containerdrelease.Runtime) error {
	st, err := os.Stat(r.ctr.Binary)
	if err != nil {
		return fmt.Errorf("the node's containerd binary is needed to check every change (`containerd config dump`): %w; pass --containerd-binary with its host path", err)
	}
	if !st.ModTime().Equal(r.ctrVersionAt) {
		v, err := r.ctr.Version(ctx)
		if err != nil {
			return fmt.Errorf("cannot run the node's containerd to check changes: %w", err)
		}
		r.ctrVersion, r.ctrVersionAt = v, st.ModTime()
	}
	if !r.ctrVersion.SameLine(run.Version) {
		return fmt.Errorf("%s is containerd %s but containerd %s runs on the node: a check with it would not say what the running release does; restart containerd or pass the right --containerd-binary", r.ctr.Binary, r.ctrVersion, run)
	}
	return nil
}

// converge plans, proves and writes under the host lock.
func (r *Remediator) converge(ctx context.Context, run containerdrelease.Runtime, h configplan.Handler, source string, kd configplan.KataDeploy) (Result, error) {
	t := r.cfg.Target
	var res Result
	files, lerr := configplan.LoadSet(t.Config, nil)
	paths := []string{t.Config, t.DropIn()}
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	for _, p := range paths {
		if wait, why := settled(p, r.cfg.Quiet, time.Now()); wait > 0 {
			r.log.Debug("waiting for a writer", "why", why)
			res.RetryIn = wait
			return res, nil
		}
	}
	if lerr != nil && !errors.Is(lerr, configplan.ErrMalformed) && !errors.Is(lerr, configplan.ErrUnsupported) {
		return res, fmt.Errorf("%w: %v; left untouched", configplan.ErrUnsupported, lerr)
	}
	// An idle node re-reads the files at every resync; the check with
	// containerd runs only when something it reads changed.
	inputs := inputsID(files, run, h, kd, t.DropIn())
	if r.lastConverged != nil && r.lastConverged.inputs == inputs {
		res.Plan = r.lastConverged.plan
		if missing := r.cfg.Host.MissingKata(res.Plan.Handler); missing != "" {
			return res, fmt.Errorf("%w: %s is not on the host; not registering %s until kata is installed (a handler without its shim breaks every pod using it)", errSkip, missing, h.Name)
		}
		return res, nil
	}
	p := configplan.Planner{Checker: r.ctr, Run: run, Handler: h, Target: t, KataDeploy: kd, KataDir: r.cfg.KataDir, Scratch: r.cfg.Scratch, Explicit: r.cfg.Explicit, Source: source}
	pl, err := p.Plan(ctx)
	res.Plan = pl
	if err != nil {
		return res, err
	}
	if pl.Converged() && lerr == nil {
		r.lastConverged = &convergedPlan{inputs: inputs, plan: pl}
	} else {
		r.lastConverged = nil
	}
	if missing := r.cfg.Host.MissingKata(pl.Handler); missing != "" {
		if !pl.Handler.Equal(h) {
			return res, fmt.Errorf("%w: %s (the handler already configured) is not on the host; not registering it", errSkip, missing)
		}
		return res, fmt.Errorf("%w: %s is not on the host; not registering %s until kata is installed (a handler without its shim breaks every pod using it)", errSkip, missing, h.Name)
	}
	if pl.Converged() {
		return res, nil
	}
	r.metrics.Drift.Inc()
	st, err := r.state.Load()
	if err != nil {
		return res, err
	}
	if pl.Candidate != "" && st.Rejected == pl.Candidate {
		return res, fmt.Errorf("%w: this change to %s was rolled back after containerd did not come back with %s; not writing it again until the configuration changes (check containerd's log on the node)",
			configplan.ErrUnsupported, strings.Join(changedPaths(pl.Changes), ", "), h.Name)
	}
	if r.cfg.DryRun {
		var b bytes.Buffer
		for _, c := range pl.Changes {
			b.WriteString(Diff(c.Path, c.Old, c.New))
		}
		res.Diff = b.String()
		return res, nil
	}
	// Every file about to be written must be writable before any is: a
	// config.toml linked to a read-only target must not leave a drop-in
	// and a state behind that nothing imports.
	if err := writable(pl.Changes, t.DropInDir); err != nil {
		return res, err
	}
	if err := os.MkdirAll(t.DropInDir, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", t.DropInDir, err)
	}
	if err := probeWrite(r.state.Path); err != nil {
		return res, fmt.Errorf("%w; nothing was written", err)
	}
	// What each file held goes to the state first: a crash after a write
	// must not lose what uninstall puts back, nor what a rollback does.
	for _, c := range pl.Changes {
		st.recordWrite(c.Path, c.Old, c.Old != nil, c.New)
	}
	st.recordPending(pl.Fingerprint, pl.Changes)
	if err := r.state.Save(st); err != nil {
		return res, err
	}
	r.at("state saved")
	for _, c := range pl.Changes {
		// Compare-and-swap: GKE or an installer may have rewritten the file
		// since it was read; then the next pass plans again.
		cur, err := readOptional(c.Path)
		if err != nil {
			return res, fmt.Errorf("re-read %s: %w", c.Path, err)
		}
		if !bytes.Equal(cur, c.Old) {
			res.RetryIn = time.Millisecond
			return res, nil
		}
		if err := r.apply(c); err != nil {
			return res, err
		}
		r.metrics.FilesWritten.Inc()
		res.Wrote = append(res.Wrote, c.Path)
		r.at("wrote " + filepath.Base(c.Path))
		r.log.Info("wrote containerd config", "path", c.Path, "mode", pl.Mode, "version", pl.FileVersion, "handler_from", pl.Source)
	}
	// Wall time: it is compared with file times and containerd's start.
	st.Loaded = &LoadedRecord{Fingerprint: pl.Fingerprint, Since: time.Now()}
	if err := r.state.Save(st); err != nil {
		return res, err
	}
	r.events.Emit(ctx, false, nodeevents.ConfigRestored, fmt.Sprintf("restored runtime handler %s (settings from %s) in %s (%s, config version %d), checked with containerd %s's own merge",
		h.Name, pl.Source, strings.Join(res.Wrote, ", "), pl.Mode, pl.FileVersion, run))
	return res, nil
}

type convergedPlan struct {
	inputs string
	plan   configplan.Plan
}

// inputsID identifies everything a plan is computed from.
func inputsID(files []configplan.LoadFile, run containerdrelease.Runtime, h configplan.Handler, kd configplan.KataDeploy, dropIn string) string {
	var b bytes.Buffer
	var kh configplan.Handler
	if kd.Handler != nil {
		kh = *kd.Handler
	}
	fmt.Fprintf(&b, "%s\x00%+v\x00%v %s %+v %v %v\x00", run, h, kd.Present, kd.DropIn, kh, kd.Runtimes, kd.ProxyPlugins)
	for _, f := range files {
		fmt.Fprintf(&b, "%s\x00%s\x00", f.Path, sum(f.Data))
	}
	for _, p := range []string{dropIn, kd.DropIn} {
		data, err := readOptional(p)
		fmt.Fprintf(&b, "%s\x00%s\x00%v\x00", p, sum(data), err)
	}
	return sum(b.Bytes())
}

func (r *Remediator) apply(c configplan.FileChange) error {
	CleanTemps(c.Path)
	if c.New == nil {
		return removeFile(c.Path)
	}
	return writeAtomic(c.Path, c.New, r.beforeRename)
}

func changedPaths(cs []configplan.FileChange) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

// handlerState asks the CRI socket, then the Node's runtimeHandlers.
func (r *Remediator) handlerState(ctx context.Context, node *corev1.Node, name string) HandlerState {
	if r.probe != nil {
		st, err := r.probe.Handler(ctx, name)
		if err == nil && st.Known {
			return st
		}
		if err != nil {
			r.log.Debug("CRI status failed", "err", err.Error())
		}
	}
	if node != nil {
		var names []string
		for _, h := range node.Status.RuntimeHandlers {
			names = append(names, h.Name)
		}
		return NodeHandlers(names, name)
	}
	return HandlerState{}
}

func probeOK(st HandlerState, h configplan.Handler) bool {
	if !st.Loaded {
		return false
	}
	if st.Snapshotter != "" && st.Snapshotter != h.Snapshotter {
		return false
	}
	return st.Discard == nil || !*st.Discard
}

// loadedSince is when files holding the handler's current effective
// settings were put in place: a containerd started later has loaded them
// (on 2.x the CRI status does not show the images plugin's
// runtime_platforms, so this is the only way to know the snapshotter
// mapping is loaded). A fingerprint the state already has keeps its time,
// so a byte-identical rewrite does not count as new.
func (r *Remediator) loadedSince(pl configplan.Plan) time.Time {
	st, err := r.state.Load()
	if err == nil && st.Loaded != nil && st.Loaded.Fingerprint == pl.Fingerprint {
		return st.Loaded.Since
	}
	var newest time.Time
	files, _ := configplan.LoadSet(r.cfg.Target.Config, nil)
	for _, f := range files {
		if fi, err := os.Stat(f.Path); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	if err == nil && !r.cfg.DryRun && !newest.IsZero() {
		st.Loaded = &LoadedRecord{Fingerprint: pl.Fingerprint, Since: newest}
		if err := r.state.Save(st); err != nil {
			r.log.Warn("saving state failed", "err", err.Error())
		}
	}
	return newest
}

// ensureLoaded restarts containerd only when the running daemon lacks the
// handler: the probe says so, or it started before the files holding the
// handler's settings were put in place.
func (r *Remediator) ensureLoaded(ctx context.Context, node *corev1.Node, res Result) (Result, error) {
	h := res.Plan.Handler
	st := r.handlerState(ctx, node, h.Name)
	if st.Known && !probeOK(st, h) && r.restarter == nil {
		r.setReady(false)
		r.log.Warn("running containerd lacks the handler and restarts are disabled", "handler", h.Name)
		return res, nil
	}
	if r.restarter == nil {
		// Nothing can restart containerd from here (--restart=none): the
		// files are right, and an installer or operator restarts it.
		res.Converged = st.Known
		if res.Converged {
			r.proven()
			r.converged()
		} else {
			r.setReady(false)
		}
		return res, nil
	}
	if res.Plan.Mode == containerdrelease.InPlace && st.Known && st.Discard != nil && probeOK(st, h) {
		// A release edited in place (1.7) reports every setting the handler
		// needs in its CRI status (runtime, snapshotter,
		// discard_unpacked_layers; it has no runtime_platforms): what it
		// runs is known, whatever the files say now.
		res.Converged = true
		r.proven()
		r.converged()
		return res, nil
	}
	since := r.loadedSince(res.Plan)
	started, err := r.restarter.StartedAt(ctx)
	if err != nil {
		return res, r.fail(ctx, "RestartFailed", fmt.Errorf("read containerd's start time: %w", err))
	}
	loadedFiles := !started.Before(since)
	if loadedFiles && (!st.Known || probeOK(st, h)) {
		res.Converged = true
		r.proven()
		r.converged()
		return res, nil
	}
	if loadedFiles {
		return res, r.fail(ctx, "HandlerNotLoaded", fmt.Errorf("containerd started at %s, after the config was in place (%s), but has not loaded %s as configured; check containerd's log, not restarting it",
			started.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano), h.Name))
	}
	now := r.now()
	if wait := r.cfg.Settle - time.Since(since); r.cfg.Settle > 0 && wait > 0 {
		// GKE restarts containerd itself after rewriting the config, and
		// kata-deploy after installing; give that restart time to land.
		res.RetryIn = wait
		r.setReady(false)
		return res, nil
	}
	if err := r.budget.Allow(now); err != nil {
		if errors.Is(err, restart.ErrTooSoon) {
			res.RetryIn = r.budget.Interval / 10
			r.setReady(false)
			r.log.Warn("restart deferred", "err", err.Error())
			// Until then the node's containerd lacks the handler: say so
			// where an operator looks, with the way out.
			r.report(ctx, true, "RestartDeferred", fmt.Sprintf("%s is back in containerd's configuration files, but the running containerd started before they were written; the sidecar restarts containerd at most once per --restart-interval (%s): %v. Until then pods of RuntimeClass %s fail to start on this node; `systemctl restart containerd` on the node loads it now",
				h.Name, r.budget.Interval, err, h.Name))
			return res, nil
		}
		return res, r.fail(ctx, "RestartBudgetExhausted", err)
	}
	r.metrics.Restarts.Inc()
	r.log.Info("restarting containerd to load the handler", "handler", h.Name, "started", started, "config_since", since)
	err = r.restarter.Restart(ctx)
	r.at("restarted")
	if err == nil {
		err = r.waitLoaded(ctx, h, since)
	}
	r.budget.Record(now, err)
	if err != nil {
		return r.rollback(ctx, res, err)
	}
	res.Restarted, res.Converged = true, true
	r.proven()
	r.converged()
	r.events.Emit(ctx, false, "ContainerdRestarted", fmt.Sprintf("restarted containerd to load runtime handler %s", h.Name))
	return res, nil
}

// waitLoaded polls until the restarted containerd shows the handler, up to
// VerifyTimeout.
func (r *Remediator) waitLoaded(ctx context.Context, h configplan.Handler, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.VerifyTimeout)
	defer cancel()
	for {
		var node *corev1.Node
		if r.node != nil {
			// runtimeHandlers change on the Node, not in a copy.
			if n, err := r.node(ctx); err == nil {
				node = n
			}
		}
		st := r.handlerState(ctx, node, h.Name)
		started, serr := r.restarter.StartedAt(ctx)
		up := serr == nil && !started.Before(since)
		if up && (!st.Known || probeOK(st, h)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not come back with handler %s within %s: %w", h.Name, r.cfg.VerifyTimeout, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rollback puts back the files of the pending change (State.Pending)
// after containerd did not come back with them, restarts containerd once
// more and reports: the node ends at least as healthy as before the change.
// The pending change is read from the state on the host, so a change
// written by an earlier process of the sidecar is undone too.
func (r *Remediator) rollback(ctx context.Context, res Result, cause error) (Result, error) {
	st, err := r.state.Load()
	if err != nil {
		return res, r.fail(ctx, "RollbackFailed", fmt.Errorf("%v; and reading the state to roll back failed: %w", cause, err))
	}
	if st.Pending == nil || !st.Pending.ours() {
		// Nothing of an unproven change of ours is in place (someone else
		// rewrote the files, or the change was proven before): report only.
		return res, r.fail(ctx, "RestartFailed", fmt.Errorf("restart %d of at most %d consecutive failures: %w", r.budget.Failures(), r.budget.MaxFailures, cause))
	}
	return r.rollbackPending(ctx, res, st, cause)
}

// inPlace are the pending changes whose files still hold what was written.
func (p *PendingRecord) inPlace() []PendingChange {
	var out []PendingChange
	for _, c := range p.Changes {
		cur, err := readOptional(c.Path)
		if err == nil && writtenSum(cur) == c.Written && !(c.Existed && bytes.Equal(cur, c.Previous)) {
			out = append(out, c)
		}
	}
	return out
}

// rollbackPending undoes st.Pending in reverse write order, books the
// candidate as rejected, restarts containerd and clears the pending change.
// Each step is saved before the next, so that a sidecar stopped anywhere in
// between finishes the rollback at its next start (recoverPending).
func (r *Remediator) rollbackPending(ctx context.Context, res Result, st State, cause error) (Result, error) {
	p := st.Pending
	var restored []string
	if !p.Restored {
		back := p.inPlace()
		if !p.RollingBack {
			p.RollingBack = true
			if err := r.state.Save(st); err != nil {
				return res, r.fail(ctx, "RollbackFailed", fmt.Errorf("%v; and saving the state before the rollback failed: %w", cause, err))
			}
		}
		slices.Reverse(back)
		for _, c := range back {
			cur, _ := readOptional(c.Path)
			undo := configplan.FileChange{Path: c.Path, Old: cur, New: c.Previous}
			if !c.Existed {
				undo.New = nil
			}
			if err := r.apply(undo); err != nil {
				return res, r.fail(ctx, "RollbackFailed", fmt.Errorf("%v; and putting back %s failed: %w (the state in %s keeps what is left to put back)", cause, c.Path, err, r.state.Path))
			}
			if rec := st.file(c.Path); rec != nil {
				if rec.Existed == c.Existed && bytes.Equal(rec.Original, c.Previous) {
					st.Files = slices.DeleteFunc(st.Files, func(f FileRecord) bool { return f.Path == c.Path })
				} else {
					rec.Written = sum(c.Previous)
				}
			}
			restored = append(restored, c.Path)
			r.at("restored " + filepath.Base(c.Path))
		}
		st.Rejected, st.Loaded = p.candidate(), nil
		p.Restored = true
		if err := r.state.Save(st); err != nil {
			r.log.Warn("saving state failed", "err", err.Error())
		}
		r.at("rollback saved")
	}
	again := "restarted containerd again"
	if err := r.restarter.Restart(ctx); err != nil {
		again = fmt.Sprintf("restarting containerd again failed too: %v", err)
	}
	r.at("restarted again")
	st.Pending = nil
	if err := r.state.Save(st); err != nil {
		r.log.Warn("saving state failed", "err", err.Error())
	}
	res.RolledBack = true
	what := "restored " + strings.Join(restored, ", ") + " to their previous content"
	if len(restored) == 0 {
		what = "the files were put back already"
	}
	return res, r.fail(ctx, "RolledBack", fmt.Errorf("%w; %s and %s; the change is not written again until the configuration changes",
		cause, what, again))
}

func (r *Remediator) at(name string) {
	if r.step != nil {
		r.step(name)
	}
}

// proven clears the pending change once a running containerd has shown
// it loaded.
func (r *Remediator) proven() {
	if r.cfg.DryRun {
		return
	}
	st, err := r.state.Load()
	if err != nil || st.Pending == nil {
		return
	}
	st.Pending = nil
	if err := r.state.Save(st); err != nil {
		r.log.Warn("saving state failed", "err", err.Error())
	}
}

// activeReporter is a Restarter that can say whether containerd runs now
// (restart.Systemd: the unit's ActiveState).
type activeReporter interface {
	Active(ctx context.Context) (bool, error)
}

// down reports whether containerd is known not to run now: systemd says
// its unit is not active, or (a restarter that cannot say) it has no start
// time. Not reaching systemd is not knowing: nothing is rolled back then.
func (r *Remediator) down(ctx context.Context) bool {
	if a, ok := r.restarter.(activeReporter); ok {
		up, err := a.Active(ctx)
		return err == nil && !up
	}
	_, err := r.restarter.StartedAt(ctx)
	return err != nil
}

// recoverPending finishes what an earlier process of the sidecar left
// half-done: its change is written but unproven (State.Pending) and
// containerd is not running. Unless containerd comes up within
// VerifyTimeout (systemd or GKE may be restarting it), the change is
// rolled back from the state and containerd restarted. done says the pass
// ends here.
func (r *Remediator) recoverPending(ctx context.Context) (Result, bool, error) {
	if r.cfg.DryRun {
		return Result{}, false, nil
	}
	// A kill at the state's rename leaves its temp file; it never
	// replaces anything.
	CleanTemps(r.state.Path)
	if r.restarter == nil {
		return Result{}, false, nil
	}
	st, err := r.state.Load()
	if err != nil || st.Pending == nil {
		return Result{}, false, nil
	}
	// A rollback stopped half-way is finished whether or not containerd
	// runs: it was started because containerd did not come back with the
	// change.
	unfinished := st.Pending.RollingBack && !st.Pending.Restored
	if !unfinished && !r.down(ctx) {
		if st.Pending.Restored {
			// The rollback's restart came through: nothing is pending.
			r.proven()
		}
		return Result{}, false, nil
	}
	deadline := time.Now().Add(r.cfg.VerifyTimeout)
	if unfinished {
		deadline = time.Now()
	}
	for r.down(ctx) {
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return Result{}, true, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !unfinished && !r.down(ctx) {
		return Result{}, false, nil
	}
	lockCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	unlock, err := r.cfg.Lock.Acquire(lockCtx)
	cancel()
	if errors.Is(err, errLockBusy) && ctx.Err() == nil {
		r.setReady(false)
		r.report(ctx, false, "WaitingForHostLock", err.Error())
		return Result{RetryIn: 2 * time.Second}, true, nil
	}
	if err != nil {
		return Result{}, true, r.fail(ctx, "HostLock", err)
	}
	defer unlock()
	if st, err = r.state.Load(); err != nil || st.Pending == nil {
		return Result{}, false, nil
	}
	if !st.Pending.ours() {
		// containerd is down, but not with a change of ours in place.
		r.proven()
		return Result{}, false, nil
	}
	cause := fmt.Errorf("containerd is not running (for %s) with the change an earlier run of the sidecar wrote and had not seen loaded", r.cfg.VerifyTimeout)
	if unfinished {
		cause = errors.New("an earlier run of the sidecar was stopped while it rolled back a change containerd did not come back with")
	}
	res, err := r.rollbackPending(ctx, Result{}, st, cause)
	return res, true, err
}

// writable checks, before anything is written, that every file of a change
// can be replaced where it lives (the target of a symlink): a temp file is
// created next to it and removed, which is what the write itself needs.
// The sidecar's own directory is checked once it exists.
func writable(changes []configplan.FileChange, own string) error {
	for _, c := range changes {
		if filepath.Dir(c.Path) == own {
			continue
		}
		if err := probeWrite(c.Path); err != nil {
			return fmt.Errorf("%w: %v; nothing was written", configplan.ErrUnsupported, err)
		}
	}
	return nil
}

func probeWrite(path string) error {
	target, err := resolve(path)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s cannot be replaced: %w", target, bare(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
