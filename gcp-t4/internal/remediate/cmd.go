package remediate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/restart"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// EnvPrefix prefixes the environment variable of every flag:
// --snapshotter-address is GCPT4_REMEDIATE_SNAPSHOTTER_ADDRESS.
const EnvPrefix = "GCPT4_REMEDIATE_"

type options struct {
	cfg         Config
	podAnn      string
	ctrAnn      string
	criSocket   string
	restartMode string
	unit        string
	systemdBus  string
	interval    time.Duration
	maxFailures int
	debounce    time.Duration
	resync      time.Duration
	listen      string
	kubeconfig  string
	nodeName    string
	once        bool
	logLevel    string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	h := DefaultHandler()
	o := &options{}
	fs := flag.NewFlagSet("gcp-t4-node remediate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.cfg.Target.Config, "config", "/etc/containerd/config.toml", "containerd's main config file (host path; mount the host's /etc/containerd at the same path)")
	fs.StringVar(&o.cfg.Target.DropInDir, "dropin-dir", "", "drop-in directory imported by a glob on containerd 2.x (default: conf.d next to --config)")
	fs.StringVar(&o.cfg.Target.DropInName, "dropin-name", "50-kata-remote.toml", "name of the owned drop-in file")
	fs.StringVar(&o.cfg.Handler.Name, "handler", h.Name, "runtime handler name (the RuntimeClass handler)")
	fs.StringVar(&o.cfg.Handler.RuntimeType, "runtime-type", h.RuntimeType, "runtime_type of the handler")
	fs.StringVar(&o.cfg.Handler.RuntimePath, "runtime-path", h.RuntimePath, "host path of the kata shim")
	fs.StringVar(&o.cfg.Handler.ConfigPath, "kata-config", h.ConfigPath, "host path of the kata remote configuration (options.ConfigPath)")
	fs.StringVar(&o.cfg.Handler.Snapshotter, "snapshotter", h.Snapshotter, "snapshotter for the handler and name of its proxy plugin (kata-deploy 3.29+: nydus-for-kata-tee)")
	fs.StringVar(&o.cfg.Handler.SnapshotterAddress, "snapshotter-address", h.SnapshotterAddress, "socket of the proxy snapshotter")
	fs.StringVar(&o.podAnn, "pod-annotations", strings.Join(h.PodAnnotations, ","), "comma-separated pod_annotations")
	fs.StringVar(&o.ctrAnn, "container-annotations", strings.Join(h.ContainerAnnotations, ","), "comma-separated container_annotations")
	fs.StringVar(&o.cfg.Host.Root, "host-root", "/", "where the host's / is mounted (to find the kata shim and /etc/os-release)")
	fs.StringVar(&o.cfg.Lock.Path, "lock", "/run/lock/kata-deploy.lock", "host lock shared with kata-deploy (empty: none)")
	fs.StringVar(&o.cfg.ContainerdVersion, "containerd-version", "", "running containerd version (default: ask CRI, then the Node)")
	fs.StringVar(&o.criSocket, "cri-socket", "/run/containerd/containerd.sock", "containerd's CRI socket (empty: none; the Node's runtimeHandlers are used)")
	fs.StringVar(&o.restartMode, "restart", "systemd", "how to restart containerd when it lacks the handler: systemd (D-Bus on /run/systemd/private) or none")
	fs.StringVar(&o.unit, "unit", "containerd.service", "containerd's systemd unit")
	fs.StringVar(&o.systemdBus, "systemd-bus", "", "reach systemd through this D-Bus message bus address instead of its private socket /run/systemd/private")
	fs.DurationVar(&o.interval, "restart-interval", 10*time.Minute, "at most one restart per this interval")
	fs.IntVar(&o.maxFailures, "restart-max-failures", 3, "stop restarting and report after this many consecutive failures")
	fs.DurationVar(&o.cfg.Settle, "settle", 10*time.Second, "quiet time after a config change before restarting containerd (GKE restarts it itself after a rewrite)")
	fs.DurationVar(&o.debounce, "debounce", 100*time.Millisecond, "quiet time after a file event before reconciling")
	fs.DurationVar(&o.resync, "resync", time.Minute, "reconcile at least this often")
	fs.StringVar(&o.listen, "listen", ":9102", "address for /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster when run in a pod)")
	fs.StringVar(&o.nodeName, "node-name", "", "this node's name, for Events and the Node fallback (usually from NODE_NAME)")
	fs.BoolVar(&o.once, "once", false, "reconcile once and exit (installers, debugging); exit 1 when not converged")
	fs.BoolVar(&o.cfg.DryRun, "dry-run", false, "print the diff that would be written and exit; writes nothing, restarts nothing")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
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
		return nil, envErr
	}
	if o.nodeName == "" {
		o.nodeName = os.Getenv("NODE_NAME")
	}
	if o.cfg.Target.DropInDir == "" {
		o.cfg.Target.DropInDir = filepath.Join(filepath.Dir(o.cfg.Target.Config), "conf.d")
	}
	o.cfg.Handler.PodAnnotations = splitList(o.podAnn)
	o.cfg.Handler.ContainerAnnotations = splitList(o.ctrAnn)
	if !filepath.IsAbs(o.cfg.Target.Config) || !filepath.IsAbs(o.cfg.Target.DropInDir) {
		return nil, fmt.Errorf("--config %q and --dropin-dir %q must be absolute: containerd resolves the imports glob on the host", o.cfg.Target.Config, o.cfg.Target.DropInDir)
	}
	if strings.ContainsAny(o.cfg.Target.DropInName, "/*?[") || !strings.HasSuffix(o.cfg.Target.DropInName, ".toml") {
		return nil, fmt.Errorf("--dropin-name %q: want a plain file name ending in .toml", o.cfg.Target.DropInName)
	}
	if o.restartMode != "systemd" && o.restartMode != "none" {
		return nil, fmt.Errorf("--restart %q: want systemd or none (signals are never used: SIGHUP kills containerd)", o.restartMode)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	return o, nil
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

func kubeClient(o *options) (corev1client.CoreV1Interface, error) {
	// Without a cluster (a node debugged by hand) Events and the Node's
	// runtimeHandlers are simply not used.
	if o.kubeconfig == "" && !kubeconfig.InCluster() {
		return nil, nil
	}
	cfg, err := kubeconfig.Load(o.kubeconfig, "", "gcp-t4-remediate")
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return corev1client.NewForConfig(cfg)
}

// Main is `gcp-t4-node remediate`. It logs through its own JSON handler at
// --log-level rather than the caller's logger: a sidecar's info lines
// (what it wrote, when it restarted) are its audit trail.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
		return 2
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
		deps.Node = func(ctx context.Context) (*corev1.Node, error) {
			return kc.Nodes().Get(ctx, o.nodeName, metav1.GetOptions{})
		}
	}
	if o.criSocket != "" {
		if _, err := os.Stat(o.criSocket); err == nil {
			deps.Probe = CRI{Socket: o.criSocket}
		} else {
			logger.Warn("CRI socket not found; using the Node's runtimeHandlers and containerd's start time instead", "socket", o.criSocket)
		}
	}
	if o.restartMode == "systemd" && !o.cfg.DryRun {
		deps.Restarter = restart.Systemd{Unit: o.unit, BusAddress: o.systemdBus}
	}
	r, err := New(o.cfg, deps)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
		return 2
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
	return 0
}

// runOnce reconciles until converged or until a reconcile fails, waiting
// out the settle time a restart needs.
func runOnce(ctx context.Context, r *Remediator, stdout, stderr io.Writer) int {
	for {
		res, err := r.Reconcile(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4-node remediate: %v\n", err)
			return 1
		}
		if r.cfg.DryRun {
			if res.Skipped != "" {
				fmt.Fprintf(stdout, "skipped: %s\n", res.Skipped)
			} else if res.Plan.Converged() {
				fmt.Fprintf(stdout, "converged: %s has %s (%s, config version %d)\n", r.cfg.Target.Config, r.cfg.Handler.Name, res.Plan.Mode, res.Plan.FileVersion)
			} else {
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
			fmt.Fprintf(stdout, "config converged (wrote %d file(s)); the running containerd loads %s at its next restart (--restart=none)\n", len(res.Wrote), r.cfg.Handler.Name)
			return 0
		}
		fmt.Fprintf(stdout, "converged: wrote %d file(s), restarted containerd: %v\n", len(res.Wrote), res.Restarted)
		return 0
	}
}
