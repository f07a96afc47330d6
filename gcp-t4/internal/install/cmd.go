package install

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// kvFlag collects repeated --set KEY=VALUE.
type kvFlag map[string]string

func (f kvFlag) String() string { return "" }

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, e.g. GCP_ZONES=auto")
	}
	f[k] = v
	return nil
}

type clusterFlags struct {
	kubeconfig, context string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&c.context, "context", "", "kubeconfig context (default: the current one)")
}

func (c *clusterFlags) restConfig() (*rest.Config, error) {
	cfg, err := kubeconfig.Load(c.kubeconfig, c.context, "gcp-t4-install")
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig, --context: %w", err)
	}
	return cfg, nil
}

type clients struct {
	typed   kubernetes.Interface
	cluster Cluster
}

func newClients(cfg *rest.Config) (clients, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	return clients{typed: cs, cluster: Cluster{Dynamic: dyn, Mapper: mapper}}, nil
}

type installOptions struct {
	cluster                  clusterFlags
	settings                 Settings
	set                      kvFlag
	credentialsFile, wifFile string
	gke, runtimeClass        Mode
	dryRun, force, wait      bool
	timeout, pollInterval    time.Duration
	project, zone, podImage  string
	network, subnetwork      string
}

func parseInstall(args []string, stderr io.Writer) (*installOptions, error) {
	o := &installOptions{set: kvFlag{}, pollInterval: time.Second}
	fs := flag.NewFlagSet("gcp-t4 install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gcp-t4 install [flags]\n\nRenders install/overlays/gcp-t4 (embedded) with your settings, detects GKE, applies with server-side apply and waits for the DaemonSet. docs/install.md.\n\nflags:")
		fs.PrintDefaults()
	}
	o.cluster.register(fs)
	fs.StringVar(&o.settings.Image, "image", "", "image with cloud-api-adaptor and gcp-t4 (built by make image), name[:tag][@digest]; default "+ImageName+":latest")
	fs.StringVar(&o.project, "project", "", "GCP_PROJECT_ID: project the podVMs run in (required)")
	fs.StringVar(&o.zone, "zone", "", "GCP_ZONE: primary zone, one with T4s (required)")
	fs.StringVar(&o.podImage, "podvm-image", "", "PODVM_IMAGE_NAME: the podVM image (required without GCP_INSTANCE_TEMPLATE)")
	fs.StringVar(&o.network, "network", "", "GCP_NETWORK, e.g. global/networks/default (required without GCP_INSTANCE_TEMPLATE)")
	fs.StringVar(&o.subnetwork, "subnetwork", "", "GCP_SUBNETWORK")
	fs.Var(o.set, "set", "any other peer-pods-cm key, KEY=VALUE, repeatable (docs/provider.md)")
	fs.StringVar(&o.credentialsFile, "credentials-file", "", "service account key JSON for GCP_CREDENTIALS (prefer --wif-credential-config: no key)")
	fs.StringVar(&o.wifFile, "wif-credential-config", "", "Workload Identity Federation credential configuration (external_account, credential source file "+WIFTokenPath+"); docs/install.md")
	gke := fs.String("gke", "auto", "containerd remediation sidecar (components/gke-remediation): auto (on GKE), on, off")
	rc := fs.String("runtimeclass", "auto", "kata-remote RuntimeClass (components/runtimeclass): auto (when none exists), on, off")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the manifests and exit; contacts no cluster")
	fs.BoolVar(&o.force, "force-conflicts", false, "take over fields another field manager set to other values")
	fs.BoolVar(&o.wait, "wait", true, "wait for the DaemonSet rollout")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the apply (pruning included) and, separately, for the rollout")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; settings are flags, e.g. --set GCP_ZONES=auto", fs.Arg(0))
	}
	var err error
	if o.gke, err = ParseMode("gke", *gke); err != nil {
		return nil, err
	}
	if o.runtimeClass, err = ParseMode("runtimeclass", *rc); err != nil {
		return nil, err
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %s: want a positive duration, e.g. 5m", o.timeout)
	}
	cfg := map[string]string{}
	for k, v := range o.set {
		cfg[k] = v
	}
	for _, s := range []struct{ flag, key, val string }{
		{"project", "GCP_PROJECT_ID", o.project}, {"zone", "GCP_ZONE", o.zone}, {"podvm-image", "PODVM_IMAGE_NAME", o.podImage},
		{"network", "GCP_NETWORK", o.network}, {"subnetwork", "GCP_SUBNETWORK", o.subnetwork},
	} {
		if s.val == "" {
			continue
		}
		if prev, ok := cfg[s.key]; ok && prev != s.val {
			return nil, fmt.Errorf("--%s %q and --set %s=%q disagree; give one", s.flag, s.val, s.key, prev)
		}
		cfg[s.key] = s.val
	}
	if len(cfg) > 0 {
		o.settings.Config = cfg
	}
	if o.credentialsFile != "" {
		data, err := os.ReadFile(o.credentialsFile)
		if err != nil {
			return nil, fmt.Errorf("--credentials-file: %w", err)
		}
		o.settings.Credentials = data
	}
	if o.wifFile != "" {
		data, err := os.ReadFile(o.wifFile)
		if err != nil {
			return nil, fmt.Errorf("--wif-credential-config: %w", err)
		}
		o.settings.WIFCredentialConfig = data
	}
	if err := o.settings.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// missingRequired names the required settings not given, as flags.
func (o *installOptions) missingRequired() []string {
	c := o.settings.Config
	var miss []string
	if c["GCP_PROJECT_ID"] == "" {
		miss = append(miss, "--project")
	}
	if c["GCP_ZONE"] == "" {
		miss = append(miss, "--zone")
	}
	if c["GCP_INSTANCE_TEMPLATE"] == "" {
		if c["PODVM_IMAGE_NAME"] == "" {
			miss = append(miss, "--podvm-image")
		}
		if c["GCP_NETWORK"] == "" {
			miss = append(miss, "--network")
		}
	}
	return miss
}

// Main is `gcp-t4 install`. It talks to a person at a terminal (notes and
// rollout progress on stdout, warnings and errors on stderr), so it writes
// text rather than structured logs; the manifests alone go to stdout with
// --dry-run.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	o, err := parseInstall(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gcp-t4 install: %v\n", err)
		return 2
	}
	if err := runInstall(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 install: %v\n", err)
		return 1
	}
	return 0
}

func runInstall(ctx context.Context, o *installOptions, stdout, stderr io.Writer) error {
	if o.dryRun {
		s := o.settings
		s.GKERemediation = o.gke == ModeOn
		s.RuntimeClass = o.runtimeClass == ModeOn
		if o.gke == ModeAuto || o.runtimeClass == ModeAuto {
			fmt.Fprintln(stderr, "gcp-t4 install: dry run, no cluster contacted: --gke=auto and --runtimeclass=auto render as off; pass =on to include them")
		}
		if miss := o.missingRequired(); len(miss) > 0 {
			fmt.Fprintf(stderr, "gcp-t4 install: dry run: %s not given; a real install requires them\n", strings.Join(miss, ", "))
		}
		out, err := RenderYAML(s)
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	if miss := o.missingRequired(); len(miss) > 0 {
		return fmt.Errorf("missing %s (the provider refuses to start without them; docs/provider.md)", strings.Join(miss, ", "))
	}
	cfg, err := o.cluster.restConfig()
	if err != nil {
		return fmt.Errorf("%w; --dry-run prints the manifests without a cluster", err)
	}
	c, err := newClients(cfg)
	if err != nil {
		return err
	}
	env, err := Detect(ctx, c.typed)
	if err != nil {
		return err
	}
	d, err := Decide(env, o.gke, o.runtimeClass)
	if err != nil {
		return err
	}
	for _, n := range d.Notes {
		fmt.Fprintf(stdout, "%s\n", n)
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	s := o.settings
	s.GKERemediation, s.RuntimeClass = d.GKERemediation, d.RuntimeClass
	if err := setClusterID(ctx, c.typed, &s); err != nil {
		return err
	}
	if s.Credentials == nil && s.WIFCredentialConfig == nil {
		fmt.Fprintln(stderr, "warning: neither --wif-credential-config nor --credentials-file: CAA uses whatever Application Default Credentials its pod finds (docs/install.md, \"Credentials\")")
	}
	m, err := Render(s)
	if err != nil {
		return err
	}
	objs, err := Objects(m)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	res, err := c.cluster.Apply(actx, objs, ApplyOptions{ForceConflicts: o.force})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied %d objects with server-side apply (field manager %s): %d changed, %d unchanged\n",
		len(objs), FieldManager, len(res.Changed), len(res.Unchanged))
	for _, r := range res.Changed {
		fmt.Fprintf(stdout, "  configured %s\n", r)
	}
	for _, r := range res.Pruned {
		fmt.Fprintf(stdout, "  pruned %s (no longer rendered)\n", r)
	}
	if !o.wait {
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, o.timeout)
	defer wcancel()
	r, err := WaitRollout(wctx, c.typed, stdout, o.pollInterval)
	if err != nil {
		return err
	}
	if r.Desired == 0 {
		fmt.Fprintln(stdout, "rollout done, but no node matches the DaemonSet's node selector yet")
	} else {
		fmt.Fprintln(stdout, "rollout done")
	}
	return nil
}

type uninstallOptions struct {
	cluster clusterFlags
	dryRun  bool
	timeout time.Duration
	guard   guardOptions
}

// MainUninstall is `gcp-t4 uninstall`.
func MainUninstall(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	o := &uninstallOptions{}
	fs := flag.NewFlagSet("gcp-t4 uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.cluster.register(fs)
	fs.BoolVar(&o.dryRun, "dry-run", false, "list what would be deleted; delete nothing")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the objects to be gone")
	o.guard.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gcp-t4 uninstall: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := runUninstall(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 uninstall: %v\n", err)
		return 1
	}
	return 0
}

func runUninstall(ctx context.Context, o *uninstallOptions, stdout io.Writer) error {
	cfg, err := o.cluster.restConfig()
	if err != nil {
		return err
	}
	c, err := newClients(cfg)
	if err != nil {
		return err
	}
	inv, err := c.cluster.ReadInventory(ctx)
	if err != nil {
		return err
	}
	if len(inv.Objects) == 0 {
		fmt.Fprintf(stdout, "nothing to uninstall: no inventory %s/%s (manifests applied with kubectl apply -k are removed with kubectl delete -k)\n", Namespace, InventoryName)
		return nil
	}
	if err := o.guard.check(ctx, c.typed, c.cluster.Dynamic, o.dryRun, stdout); err != nil {
		return err
	}
	var del, adopted []Ref
	var ns *Ref
	for _, r := range inv.Objects {
		switch {
		case inv.adopted(r):
			adopted = append(adopted, r)
		case r.Kind == "Namespace" && r.APIVersion == "v1":
			ns = &r
		default:
			del = append(del, r)
		}
	}
	del = append(del, Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: Namespace, Name: InventoryName})
	if o.dryRun {
		for _, r := range adopted {
			fmt.Fprintf(stdout, "would keep %s (it existed before install) and drop the fields install set\n", r)
		}
		for _, r := range del {
			fmt.Fprintf(stdout, "would delete %s\n", r)
		}
		if ns != nil {
			fmt.Fprintf(stdout, "would delete %s if nothing else is left in it\n", *ns)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for _, r := range adopted {
		if err := c.cluster.release(ctx, r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "keeping %s: it existed before install; dropped the fields install set\n", r)
	}
	if err := c.cluster.deleteAll(ctx, del); err != nil {
		return err
	}
	for _, r := range del {
		fmt.Fprintf(stdout, "deleted %s\n", r)
	}
	if ns == nil {
		return nil
	}
	others, err := foreignObjects(ctx, c.typed, ns.Name)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		fmt.Fprintf(stdout, "keeping %s: it holds objects install did not create: %s\n", *ns, strings.Join(others, ", "))
		return nil
	}
	if err := c.cluster.deleteAll(ctx, []Ref{*ns}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %s\n", *ns)
	return nil
}

// foreignObjects lists what else lives in ns (say peerpod-ctrl or a
// kata-deploy installed there later), so uninstall does not delete the
// namespace under it. Pods of the deleted DaemonSet and what Kubernetes
// puts in every namespace do not count.
func foreignObjects(ctx context.Context, cs kubernetes.Interface, ns string) ([]string, error) {
	var out []string
	add := func(kind string, names ...string) {
		for _, n := range names {
			out = append(out, kind+"/"+n)
		}
	}
	opts := metav1.ListOptions{}
	dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list daemonsets in %s: %w", ns, err)
	}
	for _, x := range dss.Items {
		add("DaemonSet", x.Name)
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list deployments in %s: %w", ns, err)
	}
	for _, x := range deps.Items {
		add("Deployment", x.Name)
	}
	sts, err := cs.AppsV1().StatefulSets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list statefulsets in %s: %w", ns, err)
	}
	for _, x := range sts.Items {
		add("StatefulSet", x.Name)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", ns, err)
	}
	for _, x := range pods.Items {
		if !ownedByOurDaemonSet(x) {
			add("Pod", x.Name)
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list configmaps in %s: %w", ns, err)
	}
	for _, x := range cms.Items {
		if x.Name != "kube-root-ca.crt" {
			add("ConfigMap", x.Name)
		}
	}
	secs, err := cs.CoreV1().Secrets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list secrets in %s: %w", ns, err)
	}
	for _, x := range secs.Items {
		add("Secret", x.Name)
	}
	sas, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list serviceaccounts in %s: %w", ns, err)
	}
	for _, x := range sas.Items {
		if x.Name != "default" {
			add("ServiceAccount", x.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func ownedByOurDaemonSet(p corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Name == DaemonSetName {
			return true
		}
	}
	return false
}
