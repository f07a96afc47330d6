package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	corev1 "k8s.io/api/core/v1"
)

// Config is what the remediator keeps and where.
type Config struct {
	Handler           Handler
	Target            Target
	Host              Host
	Lock              HostLock
	ContainerdVersion string        // overrides what the probe reports
	Settle            time.Duration // quiet time after the last config change before a restart
	VerifyTimeout     time.Duration // how long a restarted containerd gets to show the handler
	DryRun            bool
}

// NodeGetter reads this pod's Node (labels, runtime version, handlers).
type NodeGetter func(ctx context.Context) (*corev1.Node, error)

// Remediator converges one node. Its methods are safe for one caller at a
// time; Run serialises its own calls.
type Remediator struct {
	cfg       Config
	probe     Probe // nil: no CRI socket
	node      NodeGetter
	restarter restart.Restarter // nil: never restart
	budget    *restart.Budget
	events    Events
	metrics   *Metrics
	now       func() time.Time
	log       *slog.Logger

	// beforeRename is only set by the crash test.
	beforeRename func(tmp string)

	mu        sync.Mutex
	ready     bool
	lastEvent string // suppresses repeating the same warning every resync
}

// Deps are the remediator's collaborators; nil ones are left out.
type Deps struct {
	Probe     Probe
	Node      NodeGetter
	Restarter restart.Restarter
	Budget    *restart.Budget
	Events    Events
	Metrics   *Metrics
	Now       func() time.Time
	Logger    *slog.Logger
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
	r := &Remediator{cfg: cfg, probe: d.Probe, node: d.Node, restarter: d.Restarter, budget: d.Budget,
		events: d.Events, metrics: d.Metrics, now: d.Now, log: d.Logger}
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
	Skipped   string   // why nothing was done on purpose (COS, kata not installed)
	Plan      Plan     // what was (or, in dry-run, would be) written
	Wrote     []string // files replaced
	Diff      string   // dry-run: unified-style diff of the changes
	Restarted bool
	// RetryIn asks the loop to reconcile again after this long (a restart
	// waiting for the config to settle or for its budget).
	RetryIn   time.Duration
	Converged bool // config has the handler and the running containerd loaded it
}

// Ready reports whether the last reconcile ended converged.
func (r *Remediator) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

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

func (r *Remediator) fail(ctx context.Context, reason string, err error) error {
	r.metrics.Failures.WithLabelValues(reason).Inc()
	r.setReady(false)
	msg := err.Error()
	if r.lastEvent != msg {
		r.lastEvent = msg
		r.events.Emit(ctx, true, reason, msg)
	}
	return err
}

// Reconcile runs one pass: checks, plan, safe write, restart if needed.
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
		r.setReady(false)
		if r.lastEvent != why {
			r.lastEvent = why
			r.events.Emit(ctx, true, "KataRemoteUnsupportedOS", why)
		}
		return Result{Skipped: why}, nil
	}
	if missing := r.cfg.Host.MissingKata(r.cfg.Handler); missing != "" {
		why := fmt.Sprintf("%s is not on the host; not registering %s until kata is installed (a handler without its shim breaks every pod using it)", missing, r.cfg.Handler.Name)
		r.setReady(false)
		if r.lastEvent != why {
			r.lastEvent = why
			r.events.Emit(ctx, true, "KataRemoteShimMissing", why)
		}
		return Result{Skipped: why}, nil
	}
	run, err := r.runtime(ctx, node)
	if err != nil {
		return Result{}, r.fail(ctx, "RuntimeVersionUnknown", err)
	}

	unlock, err := r.cfg.Lock.Acquire(ctx)
	if err != nil {
		return Result{}, r.fail(ctx, "HostLock", err)
	}
	res, err := r.converge(ctx, run)
	unlock()
	if err != nil {
		reason := "WriteFailed"
		switch {
		case errors.Is(err, ErrMalformed):
			reason = "ConfigMalformed"
		case errors.Is(err, ErrUnsupported):
			reason = "ConfigUnsupported"
		}
		return res, r.fail(ctx, reason, err)
	}
	if r.cfg.DryRun {
		return res, nil
	}
	return r.ensureLoaded(ctx, node, res)
}

func (r *Remediator) runtime(ctx context.Context, node *corev1.Node) (Runtime, error) {
	if r.cfg.ContainerdVersion != "" {
		return ParseRuntimeVersion(r.cfg.ContainerdVersion)
	}
	var errs []error
	if r.probe != nil {
		v, err := r.probe.RuntimeVersion(ctx)
		if err == nil {
			return ParseRuntimeVersion(v)
		}
		errs = append(errs, err)
	}
	if node != nil && node.Status.NodeInfo.ContainerRuntimeVersion != "" {
		return ParseRuntimeVersion(node.Status.NodeInfo.ContainerRuntimeVersion)
	}
	return Runtime{}, fmt.Errorf("%w: mount the containerd socket (--cri-socket), run with NODE_NAME set, or pass --containerd-version: %v", ErrUnknownRun, errors.Join(errs...))
}

func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// converge plans and writes under the host lock.
func (r *Remediator) converge(ctx context.Context, run Runtime) (Result, error) {
	t := r.cfg.Target
	main, err := os.ReadFile(t.Config)
	if err != nil {
		return Result{}, fmt.Errorf("read %s (mount the host's /etc/containerd at the same path): %w", t.Config, err)
	}
	dropIn, err := readOptional(t.DropIn())
	if err != nil {
		return Result{}, fmt.Errorf("read %s: %w", t.DropIn(), err)
	}
	p, err := Compute(r.cfg.Handler, t, run, main, dropIn)
	if err != nil {
		return Result{Plan: p}, err
	}
	res := Result{Plan: p}
	for _, w := range p.Warnings {
		r.log.Warn(w)
	}
	if p.Converged() {
		return res, nil
	}
	r.metrics.Drift.Inc()
	if r.cfg.DryRun {
		var b bytes.Buffer
		for _, c := range p.Changes {
			b.WriteString(Diff(c.Path, c.Old, c.New))
		}
		res.Diff = b.String()
		return res, nil
	}
	if err := os.MkdirAll(t.DropInDir, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", t.DropInDir, err)
	}
	// The drop-in goes first: an imports glob that matches nothing is
	// harmless, a drop-in nobody imports too.
	for _, c := range p.Changes {
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
		if c.Backup && c.Old != nil {
			if err := BackupOnce(c.Path, c.Old); err != nil {
				return res, err
			}
		}
		CleanTemps(c.Path)
		if err := writeAtomic(c.Path, c.New, r.beforeRename); err != nil {
			return res, err
		}
		r.metrics.FilesWritten.Inc()
		res.Wrote = append(res.Wrote, c.Path)
		r.log.Info("wrote containerd config", "path", c.Path, "mode", p.Mode, "version", p.FileVersion)
	}
	r.events.Emit(ctx, false, "KataRemoteConfigRestored", fmt.Sprintf("restored runtime handler %s in %v (%s, config version %d)", r.cfg.Handler.Name, res.Wrote, p.Mode, p.FileVersion))
	return res, nil
}

// handlerState asks the CRI socket, then the Node's runtimeHandlers.
func (r *Remediator) handlerState(ctx context.Context, node *corev1.Node) HandlerState {
	if r.probe != nil {
		st, err := r.probe.Handler(ctx, r.cfg.Handler.Name)
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
		return NodeHandlers(names, r.cfg.Handler.Name)
	}
	return HandlerState{}
}

func (r *Remediator) loadedOK(st HandlerState) bool {
	if !st.Loaded {
		return false
	}
	if st.Snapshotter != "" && st.Snapshotter != r.cfg.Handler.Snapshotter {
		return false
	}
	return st.Discard == nil || !*st.Discard
}

// configTime is the newest modification time of the files that make up
// the handler's config.
func (r *Remediator) configTime() time.Time {
	var newest time.Time
	for _, p := range []string{r.cfg.Target.Config, r.cfg.Target.DropIn()} {
		if st, err := os.Stat(p); err == nil && st.ModTime().After(newest) {
			newest = st.ModTime()
		}
	}
	return newest
}

// ensureLoaded restarts containerd only when the running daemon lacks the
// handler and started before the config that has it was written.
func (r *Remediator) ensureLoaded(ctx context.Context, node *corev1.Node, res Result) (Result, error) {
	if res.RetryIn > 0 {
		r.setReady(false)
		return res, nil
	}
	st := r.handlerState(ctx, node)
	if st.Known && r.loadedOK(st) {
		res.Converged = true
		r.lastEvent = ""
		r.setReady(true)
		return res, nil
	}
	if r.restarter == nil {
		// Nothing can restart containerd from here (--restart=none): the
		// file is right, and an installer or operator restarts it.
		res.Converged = !st.Known
		r.setReady(res.Converged)
		if st.Known {
			r.log.Warn("running containerd lacks the handler and restarts are disabled", "handler", r.cfg.Handler.Name)
		}
		return res, nil
	}
	started, err := r.restarter.StartedAt(ctx)
	if err != nil {
		return res, r.fail(ctx, "RestartFailed", fmt.Errorf("read containerd's start time: %w", err))
	}
	written := r.configTime()
	if !started.Before(written) {
		if !st.Known {
			// No probe, but containerd started after the config: it has it.
			res.Converged = true
			r.setReady(true)
			return res, nil
		}
		return res, r.fail(ctx, "HandlerNotLoaded", fmt.Errorf("containerd started at %s, after the config was written (%s), but has not loaded %s as configured; check containerd's log, not restarting it",
			started.Format(time.RFC3339Nano), written.Format(time.RFC3339Nano), r.cfg.Handler.Name))
	}
	now := r.now()
	if wait := r.cfg.Settle - now.Sub(written); r.cfg.Settle > 0 && wait > 0 {
		// GKE restarts containerd itself after rewriting the config; give
		// that restart (and any further rewrite) time to land first.
		res.RetryIn = wait
		r.setReady(false)
		return res, nil
	}
	if err := r.budget.Allow(now); err != nil {
		if errors.Is(err, restart.ErrTooSoon) {
			res.RetryIn = r.budget.Interval / 10
			r.setReady(false)
			r.log.Warn("restart deferred", "err", err.Error())
			return res, nil
		}
		return res, r.fail(ctx, "RestartBudgetExhausted", err)
	}
	r.metrics.Restarts.Inc()
	r.log.Info("restarting containerd to load the handler", "handler", r.cfg.Handler.Name, "started", started, "config_written", written)
	err = r.restarter.Restart(ctx)
	if err == nil {
		err = r.waitLoaded(ctx, node, written)
	}
	r.budget.Record(now, err)
	if err != nil {
		return res, r.fail(ctx, "RestartFailed", fmt.Errorf("restart %d of at most %d consecutive failures: %w", r.budget.Failures(), r.budget.MaxFailures, err))
	}
	res.Restarted, res.Converged = true, true
	r.lastEvent = ""
	r.setReady(true)
	r.events.Emit(ctx, false, "ContainerdRestarted", fmt.Sprintf("restarted containerd to load runtime handler %s", r.cfg.Handler.Name))
	return res, nil
}

// waitLoaded polls until the restarted containerd shows the handler.
func (r *Remediator) waitLoaded(ctx context.Context, node *corev1.Node, written time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.VerifyTimeout)
	defer cancel()
	for {
		if r.node != nil {
			// runtimeHandlers change on the Node, not in the copy we hold.
			if n, err := r.node(ctx); err == nil {
				node = n
			}
		}
		st := r.handlerState(ctx, node)
		if st.Known && r.loadedOK(st) {
			return nil
		}
		if !st.Known {
			if started, err := r.restarter.StartedAt(ctx); err == nil && !started.Before(written) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not report handler %s after the restart: %w", r.cfg.Handler.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
