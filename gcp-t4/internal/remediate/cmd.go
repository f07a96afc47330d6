package remediate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// EnvPrefix prefixes the environment variable of every flag:
// --snapshotter-address is GCPT4_REMEDIATE_SNAPSHOTTER_ADDRESS.
const EnvPrefix = "GCPT4_REMEDIATE_"

// handlerFlags are the flags whose values kata-deploy's files may supply
// when they are not given explicitly.
var handlerFlags = []string{"runtime-type", "runtime-path", "kata-config", "snapshotter", "snapshotter-address", "snapshotter-root", "pod-annotations", "container-annotations"}

type options struct {
	cfg         Config
	podAnn      string
	ctrAnn      string
	criSocket   string
	restartMode string
	unit        string
	systemdBus  string
	ctrBinary   string
	interval    time.Duration
	maxFailures int
	debounce    time.Duration
	resync      time.Duration
	listen      string
	kubeconfig  string
	nodeName    string
	namespace   string
	daemonSet   string
	once        bool
	cleanup     bool
	logLevel    string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o, _, err := parseFlagsTo(args, stderr, stderr)
	return o, err
}

// parseFlagsTo is parseFlags with -h's help on stdout, and the flag set,
// whose usage follows a later misuse error.
func parseFlagsTo(args []string, stdout, stderr io.Writer) (*options, *flag.FlagSet, error) {
	h := DefaultHandler()
	o := &options{}
	fs := cli.NewFlagSet("gcp-t4-node remediate", cli.Usage{
		Synopsis: []string{"gcp-t4-node remediate [--once | --dry-run | --cleanup] [flags]"},
		About: []string{"Runs on every peer-pods node (the DaemonSet gcp-t4-remediate): puts kata-deploy's kata-remote " +
			"runtime handler back into the node's containerd configuration when a node bootstrap rewrote it, each " +
			"change checked with the node's own containerd first, and restarts containerd only when the running daemon " +
			"lacks the handler. --once converges once, --dry-run prints the diff, --cleanup puts every file back. " +
			"Every flag can also be set as its env var (" + EnvPrefix + "FLAG_NAME). docs/remediation.md"},
	})
	fs.StringVar(&o.cfg.Target.Config, "config", "/etc/containerd/config.toml", "containerd's main config file (host path; mount the host's /etc/containerd at the same path)")
	fs.StringVar(&o.cfg.Target.DropInDir, "dropin-dir", "", "the sidecar's own directory on containerd 2.x: its drop-in, imported by literal path, and its state (default: caa-gcp-t4 next to --config; no imports glob may read it)")
	fs.StringVar(&o.cfg.Target.DropInName, "dropin-name", "kata-remote.toml", "name of the sidecar's drop-in file")
	fs.StringVar(&o.cfg.Handler.Name, "handler", h.Name, "runtime handler name (the RuntimeClass handler)")
	fs.StringVar(&o.cfg.Handler.RuntimeType, "runtime-type", h.RuntimeType, "runtime_type of the handler")
	fs.StringVar(&o.cfg.Handler.RuntimePath, "runtime-path", h.RuntimePath, "host path of the kata shim")
	fs.StringVar(&o.cfg.Handler.ConfigPath, "kata-config", h.ConfigPath, "host path of the kata remote configuration (options.ConfigPath)")
	fs.StringVar(&o.cfg.Handler.Snapshotter, "snapshotter", h.Snapshotter, "snapshotter for the handler and name of its proxy plugin (empty: containerd's default snapshotter, no proxy plugin; unless set, learned from kata-deploy's handler, which names none without a snapshotter mapping)")
	fs.StringVar(&o.cfg.Handler.SnapshotterAddress, "snapshotter-address", h.SnapshotterAddress, "socket of the proxy snapshotter")
	fs.StringVar(&o.cfg.Handler.ExportsRoot, "snapshotter-root", h.ExportsRoot, "exports.root of the proxy snapshotter (empty: not set)")
	fs.StringVar(&o.podAnn, "pod-annotations", strings.Join(h.PodAnnotations, ","), "comma-separated pod_annotations")
	fs.StringVar(&o.ctrAnn, "container-annotations", strings.Join(h.ContainerAnnotations, ","), "comma-separated container_annotations")
	fs.StringVar(&o.cfg.Host.Root, "host-root", "/", "where the host's / is mounted (the kata shim, /etc/os-release, the containerd binary)")
	fs.StringVar(&o.cfg.KataDir, "kata-dir", configplan.KataDeployDir, "kata-deploy's install directory, mounted at its host path; the handler's settings are learned from kata-deploy's files there unless given as flags")
	fs.StringVar(&o.cfg.Lock.Path, "lock", "/run/lock/kata-deploy.lock", "host lock shared with kata-deploy 4.1+ (empty: none)")
	fs.StringVar(&o.cfg.ContainerdVersion, "containerd-version", "", "running containerd version (default: ask CRI, then the Node)")
	fs.StringVar(&o.ctrBinary, "containerd-binary", "", "host path of the node's containerd binary, run as `containerd config dump` to check every change (default: the ExecStart of --unit, else /usr/bin/containerd)")
	fs.StringVar(&o.criSocket, "cri-socket", "/run/containerd/containerd.sock", "containerd's CRI socket (empty: none; the Node's runtimeHandlers are used)")
	fs.StringVar(&o.restartMode, "restart", "systemd", "how to restart containerd when it lacks the handler: systemd (D-Bus on /run/systemd/private) or none")
	fs.StringVar(&o.unit, "unit", "containerd.service", "containerd's systemd unit")
	fs.StringVar(&o.systemdBus, "systemd-bus", "", "reach systemd through this D-Bus message bus address instead of its private socket /run/systemd/private")
	fs.DurationVar(&o.interval, "restart-interval", 10*time.Minute, "at most one restart per this interval")
	fs.IntVar(&o.maxFailures, "restart-max-failures", 3, "stop restarting and report after this many consecutive failures")
	fs.DurationVar(&o.cfg.Settle, "settle", 10*time.Second, "quiet time after a config change before restarting containerd (GKE and kata-deploy restart it themselves)")
	fs.DurationVar(&o.cfg.Quiet, "quiet", 500*time.Millisecond, "act only on files closed by every writer and unchanged for this long")
	fs.DurationVar(&o.cfg.VerifyTimeout, "verify-timeout", 2*time.Minute, "how long a restarted containerd gets to come back with the handler before the files are put back")
	fs.DurationVar(&o.debounce, "debounce", 100*time.Millisecond, "quiet time after a file event before reconciling")
	fs.DurationVar(&o.resync, "resync", time.Minute, "reconcile at least this often")
	fs.StringVar(&o.listen, "listen", ":9102", "address for /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster when run in a pod)")
	fs.StringVar(&o.nodeName, "node-name", "", "this node's name, for Events and the Node fallback (usually from NODE_NAME)")
	fs.StringVar(&o.namespace, "namespace", "", "the pod's namespace, for --daemonset (usually from POD_NAMESPACE)")
	fs.StringVar(&o.daemonSet, "daemonset", "", "the sidecar's own DaemonSet: on SIGTERM, when it is gone (uninstall), restore the node before exiting")
	fs.BoolVar(&o.once, "once", false, "reconcile once and exit (installers, debugging); exit 1 when not converged")
	fs.BoolVar(&o.cleanup, "cleanup", false, "restore every file the sidecar changed to its earlier content, restart containerd if a byte changed, and exit (uninstall)")
	fs.BoolVar(&o.cfg.DryRun, "dry-run", false, "print the diff that would be written and exit; writes nothing, restarts nothing")
	fs.DurationVar(&o.cfg.CreateContainerTimeout, startup.SidecarFlag, defaultCreateContainerTimeout(), "kata-remote's create_container_timeout (the agent's CreateContainer, guest pull included), kept in a drop-in of the sidecar's in the remote shim's config.d; /readyz fails while the effective value is lower; 0 leaves kata-remote's configuration alone")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return nil, fs, cli.ExitStatus(code)
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return nil, fs, cli.ExitStatus(code)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !set[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
			set[f.Name] = true
		}
	})
	if envErr != nil {
		return nil, fs, envErr
	}
	o.cfg.Explicit = map[string]bool{}
	for _, f := range handlerFlags {
		o.cfg.Explicit[f] = set[f]
	}
	if set["snapshotter"] && o.cfg.Handler.Snapshotter == "" {
		// No snapshotter: the defaults of kata-deploy's nydus proxy plugin
		// go with it.
		if !set["snapshotter-address"] {
			o.cfg.Handler.SnapshotterAddress = ""
		}
		if !set["snapshotter-root"] {
			o.cfg.Handler.ExportsRoot = ""
		}
	}
	if o.nodeName == "" {
		o.nodeName = os.Getenv("NODE_NAME")
	}
	if o.namespace == "" {
		o.namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.cfg.Target.DropInDir == "" {
		o.cfg.Target.DropInDir = filepath.Join(filepath.Dir(o.cfg.Target.Config), "caa-gcp-t4")
	}
	o.cfg.Handler.PodAnnotations = splitList(o.podAnn)
	o.cfg.Handler.ContainerAnnotations = splitList(o.ctrAnn)
	if !filepath.IsAbs(o.cfg.Target.Config) || !filepath.IsAbs(o.cfg.Target.DropInDir) {
		return nil, fs, fmt.Errorf("--config %q and --dropin-dir %q must be absolute: containerd reads the imports entry on the host", o.cfg.Target.Config, o.cfg.Target.DropInDir)
	}
	if strings.ContainsAny(o.cfg.Target.DropInName, "/*?[") || !strings.HasSuffix(o.cfg.Target.DropInName, ".toml") {
		return nil, fs, fmt.Errorf("--dropin-name %q: want a plain file name ending in .toml", o.cfg.Target.DropInName)
	}
	if o.ctrBinary != "" && !filepath.IsAbs(o.ctrBinary) {
		return nil, fs, fmt.Errorf("--containerd-binary %q: want the absolute host path of containerd", o.ctrBinary)
	}
	if o.restartMode != "systemd" && o.restartMode != "none" {
		return nil, fs, fmt.Errorf("--restart %q: want systemd or none (signals are never used: SIGHUP kills containerd)", o.restartMode)
	}
	if o.daemonSet != "" && o.namespace == "" {
		return nil, fs, fmt.Errorf("--daemonset %q needs --namespace (or POD_NAMESPACE)", o.daemonSet)
	}
	if err := startup.CheckSidecarTimeout(o.cfg.CreateContainerTimeout); err != nil {
		return nil, fs, err
	}
	if o.once && o.cleanup {
		return nil, fs, errors.New("--once and --cleanup: give one")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fs, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	return o, fs, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func kubeClient(o *options) (API, error) {
	// Without a cluster (a node debugged by hand) Events and the Node's
	// runtimeHandlers are simply not used.
	if o.kubeconfig == "" && !kubeconfig.InCluster() {
		return nil, nil
	}
	return NewAPI(o.kubeconfig)
}

// containerdBinary finds the node's containerd: the flag, else the unit's
// ExecStart, else the usual place; a host path, under --host-root.
func containerdBinary(ctx context.Context, o *options, sd *restart.Systemd, logger *slog.Logger) Containerd {
	p := o.ctrBinary
	if p == "" && sd != nil {
		if exec, err := sd.ExecPath(ctx); err == nil {
			p = exec
		} else {
			logger.Warn("reading containerd's ExecStart from systemd failed; looking in the usual places", "err", err.Error())
		}
	}
	if p == "" {
		for _, c := range []string{"/usr/bin/containerd", "/usr/local/bin/containerd", "/bin/containerd"} {
			if _, err := os.Stat(filepath.Join(o.cfg.Host.Root, c)); err == nil {
				p = c
				break
			}
		}
	}
	if p == "" {
		p = "/usr/bin/containerd"
	}
	return Containerd{Binary: filepath.Join(o.cfg.Host.Root, p), Root: o.cfg.Host.Root}
}

// Main is `gcp-t4-node remediate`. It logs through its own JSON handler at
// --log-level rather than the caller's logger: a sidecar's info lines
// (what it wrote, when it restarted) are its audit trail.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	return mainWith(ctx, args, stdout, stderr, nil)
}

// mainWith is Main knowing the containerd release lines in releases (nil:
// containerdrelease.Known): a test runs the command for a line it adds as
// one row.
func mainWith(ctx context.Context, args []string, stdout, stderr io.Writer, releases containerdrelease.Table) int {
	o, fs, err := parseFlagsTo(args, stdout, stderr)
	if code, ok := err.(cli.ExitStatus); ok {
		return int(code)
	}
	if err != nil {
		return cli.Misuse(fs, stderr, "%v", err)
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(o.logLevel))
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("component", "remediate")

	kc, err := kubeClient(o)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
		return 2
	}
	deps := Deps{
		Metrics: NewMetrics(),
		Budget:  restart.NewBudget(o.interval, o.maxFailures),
		Logger:  logger,
		Events:  Events{Client: kc, NodeName: o.nodeName, Logger: logger},
	}
	if kc != nil && o.nodeName != "" {
		deps.Node = func(ctx context.Context) (*corev1.Node, error) { return kc.Node(ctx, o.nodeName) }
	}
	if o.criSocket != "" {
		if _, err := os.Stat(o.criSocket); err == nil {
			deps.Probe = CRI{Socket: o.criSocket}
		} else {
			logger.Warn("CRI socket not found; using the Node's runtimeHandlers and containerd's start time instead", "socket", o.criSocket)
		}
	}
	var sd *restart.Systemd
	if o.restartMode == "systemd" {
		sd = &restart.Systemd{Unit: o.unit, BusAddress: o.systemdBus}
		if !o.cfg.DryRun {
			deps.Restarter = *sd
		}
	}
	deps.Containerd = containerdBinary(ctx, o, sd, logger)
	o.cfg.Releases = releases
	r, err := New(o.cfg, deps)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
		return 2
	}
	if o.cleanup {
		return runCleanup(ctx, r, stdout, stderr)
	}
	if o.once || o.cfg.DryRun {
		return runOnce(ctx, r, stdout, stderr)
	}
	if o.listen != "" {
		addr, err := r.Serve(ctx, o.listen)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
			return 2
		}
		logger.Info("serving metrics and readiness", "addr", addr)
	}
	if err := r.Run(ctx, Loop{Debounce: o.debounce, Resync: o.resync}); err != nil {
		fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
		return 1
	}
	if o.daemonSet != "" && kc != nil {
		// SIGTERM. A rolling update or a pod restart must leave the node as
		// it is (removing the handler would break every running peer pod);
		// an uninstall restores it. Which one it is, the API says: the
		// DaemonSet is gone or terminating, or this pod's identity went
		// with the rest of the install.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		gone, why := ownerGone(cctx, kc, o.namespace, o.daemonSet)
		logger.Info("stopping", "uninstall", gone, "why", why)
		if gone {
			return runCleanup(cctx, r, stdout, stderr)
		}
	}
	return 0
}

// ownerGone asks whether the sidecar's DaemonSet still stands. Only
// metadata is read, so the sidecar needs no apps/v1 types.
func ownerGone(ctx context.Context, kc API, ns, name string) (bool, string) {
	m, err := kc.DaemonSet(ctx, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("daemonset %s/%s is gone", ns, name)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return true, fmt.Sprintf("this pod's identity was removed (%v): the install is being deleted", err)
	case err != nil:
		return false, fmt.Sprintf("cannot tell whether daemonset %s/%s is being deleted (%v); leaving the node as it is", ns, name, err)
	}
	if m.DeletionTimestamp != nil {
		return true, fmt.Sprintf("daemonset %s/%s is being deleted", ns, name)
	}
	return false, fmt.Sprintf("daemonset %s/%s stays (rolling update or pod restart)", ns, name)
}

func runCleanup(ctx context.Context, r *Remediator, stdout, stderr io.Writer) int {
	res, err := r.Cleanup(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "cleaned up: restored %s, removed %s, kept %s, restarted containerd: %v\n", orNone(res.Restored), orNone(res.Removed), orNone(res.Kept), res.Restarted)
	return 0
}

// runOnce reconciles until converged or until a reconcile fails, waiting
// out what asks to be waited for (a writer, the settle time, the lock).
func runOnce(ctx context.Context, r *Remediator, stdout, stderr io.Writer) int {
	for {
		res, err := r.Reconcile(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
			return 1
		}
		if r.cfg.DryRun && res.RetryIn == 0 {
			switch {
			case res.Skipped != "":
				fmt.Fprintf(stdout, "skipped: %s\n", res.Skipped)
			case res.Plan.Converged():
				fmt.Fprintf(stdout, "converged: %s has %s (%s, config version %d)\n", r.cfg.Target.Config, res.Plan.Handler.Name, res.Plan.Mode, res.Plan.FileVersion)
			default:
				fmt.Fprint(stdout, res.Diff)
			}
			return 0
		}
		switch {
		case res.Skipped != "":
			fmt.Fprintf(stdout, "skipped: %s\n", res.Skipped)
			return 1
		case res.RetryIn > 0 && res.RetryIn <= time.Minute:
			select {
			case <-ctx.Done():
				return 1
			case <-time.After(res.RetryIn):
			}
			continue
		case res.RetryIn > 0:
			fmt.Fprintf(stdout, "not converged: restart deferred by the restart budget for %s\n", res.RetryIn)
			return 1
		}
		if !res.Converged {
			fmt.Fprintf(stdout, "config converged (wrote %d file(s)); the running containerd loads %s at its next restart (--restart=none)\n", len(res.Wrote), res.Plan.Handler.Name)
			return 0
		}
		fmt.Fprintf(stdout, "converged: wrote %d file(s), restarted containerd: %v\n", len(res.Wrote), res.Restarted)
		return 0
	}
}

// defaultCreateContainerTimeout is what gcp-t4 install sets, from the
// startup catalogue's row (internal/startup, kata-create-container): the
// value lives there only.
func defaultCreateContainerTimeout() time.Duration {
	c, err := startup.Load()
	if err != nil {
		// The catalogue is embedded and tested; this cannot happen in a
		// built binary.
		panic(err)
	}
	return c.InstallCreateContainerTimeout()
}
