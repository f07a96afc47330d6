package gc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// Main is `gcp-t4 gc`: the provider's own flags (and env), plus what to
// do with orphans. Once (the default) it lists and exits non-zero when an
// orphan is left undeleted, so a CI check notices; -interval loops.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	return main(ctx, "gcp-t4 gc", false, args, stdout, stderr, logger)
}

// MainReaper is `gcp-t4 reaper`, what the reaper Deployment runs: gc that
// deletes, every REAPER_INTERVAL (default 1m), with metrics on :9103.
func MainReaper(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	return main(ctx, "gcp-t4 reaper", true, args, stdout, stderr, logger)
}

func main(ctx context.Context, name string, reaper bool, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	pf := providerflags.Register(fs)
	reg := provider.NewFlagRegistrar(fs)
	pol := DefaultPolicy()
	var interval time.Duration
	var metricsAddr string
	defInterval, defAddr := time.Duration(0), ""
	if reaper {
		defInterval, defAddr = DefaultReaperInterval, DefaultReaperMetricsAddr
	}
	kubeconfigPath := fs.String("kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account, then $KUBECONFIG")
	reg.DurationWithEnv(&pol.Grace, "grace", pol.Grace, "REAPER_GRACE", "leave orphans younger than this alone")
	// Each command's help states its own defaults: the reaper deletes
	// and loops by default, gc lists once.
	intervalUsage, deleteUsage := "run a pass every interval until stopped; 0 runs once", "delete the orphans older than -grace; without it gc only lists them"
	if reaper {
		intervalUsage, deleteUsage = "run a pass every interval until stopped (must be positive)", "delete the orphans older than -grace; -delete=false only lists them"
	}
	reg.DurationWithEnv(&interval, "interval", defInterval, "REAPER_INTERVAL", intervalUsage)
	reg.StringWithEnv(&metricsAddr, "metrics-addr", defAddr, "REAPER_METRICS_ADDR", "serve Prometheus metrics on this address (/metrics, /healthz), e.g. :9103")
	del := fs.Bool("delete", reaper, deleteUsage)
	caaNamespace := ""
	keyFile := ""
	if reaper {
		reg.StringWithEnv(&keyFile, "credentials-file", "", ReaperCredentialsEnv, "the reaper's own service account key file, where its Deployment mounts the optional Secret "+ReaperCredentialsSecret+"; no file there uses Application Default Credentials")
	}
	if !reaper {
		fs.StringVar(&caaNamespace, "caa-namespace", "", "where CAA's DaemonSet is, whose peer-pods-cm fills the settings no flag or env var gives (default: the install's namespace, confidential-containers-system or wherever its ClusterRoleBinding binds CAA; a DaemonSet of that name elsewhere is ignored)")
	}
	output := fs.String("o", "table", "output: table or json")
	fs.Usage = help(name, reaper).Usage(fs)
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return code
	}
	if *output != "table" && *output != "json" {
		return cli.Misuse(fs, stderr, "-o %q: use table or json", *output)
	}
	if pol.Grace < 0 || interval < 0 || (reaper && interval == 0) {
		return cli.Misuse(fs, stderr, "-grace (REAPER_GRACE) must not be negative and -interval (REAPER_INTERVAL) must be positive for the reaper (e.g. 1m)")
	}
	if keyFile != "" {
		if err := useKeyFile(fs, pf.Config().Credentials, keyFile, logger); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
	}
	clients, err := caaconfig.Connect(*kubeconfigPath, "", "gcp-t4-gc")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	kube := clients.Kube
	if !reaper {
		// The reaper's pod has peer-pods-cm in its env; a person running
		// gc has it in the cluster: the provider's keys, and the
		// reaper's -grace, as the reaper would have them.
		filled, source, err := caaconfig.FromCluster(ctx, fs, kube, caaNamespace, os.Getenv,
			func(w string) { fmt.Fprintf(stderr, "%s: %s\n", name, w) }, setting.Key{Env: "REAPER_GRACE", Flag: "grace"})
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
		if len(filled) > 0 {
			from := ""
			if source != "" {
				from = " from " + source
			}
			fmt.Fprintf(stderr, "%s: settings%s: %s (a flag or env var overrides)\n", name, from, strings.Join(filled, ", "))
		}
	}
	cfg := pf.Config()
	prov, err := pf.Lister(ctx, logger)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	defer prov.Teardown()
	if err := VerifyClusterID(ctx, kube, cfg.ClusterID); err != nil {
		if *del {
			fmt.Fprintf(stderr, "%s: refusing to delete: %v\n", name, err)
			return 2
		}
		fmt.Fprintf(stderr, "%s: warning: %v\n", name, err)
	}
	c := &Collector{
		VMs:     prov,
		Cluster: KubeCluster{Client: kube, PeerPods: peerpod.Client{Dynamic: clients.Dynamic}},
		Policy:  pol, Delete: *del, Now: time.Now, Log: logger,
	}
	if interval <= 0 {
		return once(ctx, c, *output, stdout, stderr)
	}
	return loop(ctx, c, kube, interval, metricsAddr, stdout, stderr, logger)
}

// providerSettingsUsed are the provider settings gc and the reaper read:
// the project to list, the cluster whose VMs are theirs, how to reach and
// authenticate to the API, and the delete rate. The rest of the provider's
// configuration shapes creates, which they never make.
var providerSettingsUsed = []string{"gcp-project-id", "cluster-id", "gcp-credentials", "gcp-endpoint", "mutations-per-second"}

// help is gc's or the reaper's -h: their own flags and the provider
// settings they read, not the ~35 CAA takes.
func help(name string, reaper bool) providerflags.Help {
	if reaper {
		return providerflags.Help{
			Synopsis: name + " [flags]",
			About: []string{"Each pass lists this cluster's podVMs and deletes those whose sandbox is gone (no PeerPod, or its pod gone) " +
				"once older than -grace, then waits -interval; it serves the metrics and records an Event on its pod per deletion. docs/reaper.md"},
			Uses:   providerSettingsUsed,
			Source: "a flag, else its env var, which the Deployment sets from peer-pods-cm",
			// The reaper logs its passes; it prints no table.
			Hide: []string{"o"},
		}
	}
	return providerflags.Help{
		Synopsis: name + " [-kubeconfig FILE] [-delete] [flags]",
		About: []string{"Each podVM is listed with a verdict and its reason; -delete removes only orphans older than -grace. " +
			"Run once, gc exits 1 while an orphan is left, so a CI job notices. docs/reaper.md"},
		Uses:   providerSettingsUsed,
		Source: "a flag, else its env var, else the installed CAA's peer-pods-cm",
	}
}

func once(ctx context.Context, c *Collector, output string, stdout, stderr io.Writer) int {
	p, err := c.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 gc: %v\n", err)
		return 1
	}
	if err := Print(stdout, output, p); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 gc: %v\n", err)
		return 1
	}
	if p.Count(Orphan)+p.Count(DeleteErr) > 0 {
		return 1
	}
	return 0
}

// loop is the reaper: a pass every interval, metrics and Events on each,
// until ctx ends. A failed pass is logged and retried at the next tick.
func loop(ctx context.Context, c *Collector, kube kubernetes.Interface, interval time.Duration, metricsAddr string, stdout, stderr io.Writer, logger *slog.Logger) int {
	m := NewMetrics()
	report := Report{Metrics: m, Now: time.Now}
	// The reaper runs in the adaptor's namespace, where the start-up
	// Events' signing key is.
	key := &startupevents.KeySource{Client: kube, Namespace: os.Getenv("POD_NAMESPACE")}
	if name, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE"); name != "" && ns != "" {
		report.Events = &Events{Client: kube, Now: time.Now, Log: logger, Key: key,
			Pod: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: name, Namespace: ns, UID: types.UID(os.Getenv("POD_UID"))}}
	}
	// Start-up metrics from the provider's signed Events; only what ends
	// after this start counts (Startup.Since).
	report.Startup = &Startup{Client: kube, Metrics: m, Log: logger, Key: key, Since: time.Now()}
	c.Observer = report
	if metricsAddr != "" {
		l, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 gc: -metrics-addr %s: %v\n", metricsAddr, err)
			return 2
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	fmt.Fprintf(stdout, "reaper: a pass every %s, grace %s, delete=%v\n", interval, c.Policy.Grace, c.Delete)
	// A pass now, then one every interval after the last ended, until
	// stopped; a failed pass is logged and the next one runs.
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		p, err := c.Run(ctx)
		if err != nil {
			logger.Error("reaper pass failed; nothing deleted", "err", err)
			return
		}
		logger.Info("reaper pass", "vms", len(p.Findings), "deleted", p.Count(Deleted), "deleteFailed", p.Count(DeleteErr),
			"orphansWithinGrace", p.Count(TooYoung), "unowned", p.Count(Unowned), "unidentified", p.Count(Unidentified), "otherClusters", p.OtherClusters)
	}, interval)
	return 0
}

// Print writes a pass as a table or JSON.
func Print(w io.Writer, output string, p Pass) error {
	var b bytes.Buffer
	if output == "json" {
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(p.Findings); err != nil {
			return err
		}
		_, err := w.Write(termout.JSON(b.Bytes()))
		return err
	}
	// A VM's labels and metadata (its namespace, pod and node) are
	// written by whoever may label or create VMs in the project, and a
	// reason may quote them: each cell is cleaned, so it keeps to its
	// line and does nothing to the terminal.
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tNAMESPACE/POD\tNODE\tCREATED\tVERDICT\tREASON")
	for _, f := range p.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termout.Clean(f.VM.ID), termout.Clean(f.VM.Namespace+"/"+f.VM.Pod), termout.Clean(f.VM.Node),
			f.VM.Created.UTC().Format(time.RFC3339), termout.Clean(string(f.Verdict)), termout.Clean(f.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.OtherClusters > 0 {
		fmt.Fprintf(&b, "(%d podVMs of other clusters in the project left alone)\n", p.OtherClusters)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// The reaper's own key, as its Deployment delivers it: the optional Secret
// ReaperCredentialsSecret mounted as a file, whose path ReaperCredentialsEnv
// names. A file, not an environment variable, so the key is not in the
// process's environment (/proc/PID/environ) for anyone who may read it.
const (
	ReaperCredentialsEnv    = "REAPER_CREDENTIALS_FILE"
	ReaperCredentialsSecret = "caa-gcp-t4-reaper-credentials"
)

// useKeyFile gives the provider the key in path, read into memory. No file
// there is no key: the Secret is optional, and without it (Workload
// Identity) the kubelet mounts an empty directory, so the reaper uses
// Application Default Credentials. A key also given as GCP_CREDENTIALS is
// refused rather than one silently winning. CAA's key instead reaches it
// as GOOGLE_APPLICATION_CREDENTIALS, because install adds that mount only
// with a key; the reaper's Secret is created apart from install, so its
// file may be absent, and ADC fails on a GOOGLE_APPLICATION_CREDENTIALS
// naming a missing file rather than falling back to the metadata server.
func useKeyFile(flags *flag.FlagSet, given, path string, logger *slog.Logger) error {
	what := ReaperCredentialsEnv + " " + path
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		logger.Info("no key file: using Application Default Credentials (Workload Identity, or GOOGLE_APPLICATION_CREDENTIALS)", "file", path, "secret", ReaperCredentialsSecret)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w; the Deployment mounts the Secret %s there readable by its group (fsGroup)", what, err, ReaperCredentialsSecret)
	}
	if given != "" {
		return fmt.Errorf("%s and GCP_CREDENTIALS both give a key: give the reaper's key as the file only", what)
	}
	info, err := credential.Check(what, data)
	if err != nil {
		return err
	}
	if err := flags.Set("gcp-credentials", string(data)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	logger.Info("credentials from file", "file", path, "credentials", info.String())
	return nil
}
