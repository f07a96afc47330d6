package install

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
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

// ClusterFlags are install's and uninstall's --kubeconfig and --context.
type ClusterFlags struct {
	Kubeconfig, Context string
}

// Register adds them to fs.
func (c *ClusterFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context (default: the current one)")
}

// Connect builds the clients of the cluster they name (caaconfig.Connect,
// whose rate limit is set for install's burst of applies); userAgent names
// the command to the API server's audit log.
func (c ClusterFlags) Connect(userAgent string) (caaconfig.Clients, error) {
	cl, err := caaconfig.Connect(c.Kubeconfig, c.Context, userAgent)
	if err != nil {
		return caaconfig.Clients{}, fmt.Errorf("--kubeconfig, --context: %w", err)
	}
	return cl, nil
}

// listFlag collects a repeated flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	if s == "" {
		return fmt.Errorf("want a key, e.g. GCP_ZONES")
	}
	*f = append(*f, s)
	return nil
}

type installOptions struct {
	cluster               ClusterFlags
	req                   Request
	gke, runtimeClass     Mode
	costGuard             Mode
	dryRun, render, force bool
	// restartPeerPods lets a change that rolls CAA restart the peer pods
	// on its nodes (checkRoll).
	restartPeerPods       bool
	wait                  bool
	timeout, pollInterval time.Duration
	rolloutTimeout        time.Duration
	// keyFile is --credentials-file's path, for refuseCommittableKey.
	keyFile string
}

func readFile(flag, path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return data, nil
}

func parseInstall(args []string, stderr io.Writer) (*installOptions, error) {
	o, _, err := parseInstallTo(args, stderr, stderr)
	return o, err
}

// parseInstallTo is parseInstall with -h's help on stdout, and the flag
// set, whose usage follows a later misuse error.
func parseInstallTo(args []string, stdout, stderr io.Writer) (*installOptions, *flag.FlagSet, error) {
	o := &installOptions{pollInterval: time.Second}
	set := kvFlag{}
	var unset listFlag
	fs := cli.NewFlagSet("gcp-t4 install", cli.Usage{
		Synopsis: []string{"gcp-t4 install [flags]"},
		About: []string{"Installs or upgrades CAA with gcp-t4: renders install/overlays/gcp-t4 (embedded), detects GKE, " +
			"validates peer-pods-cm with the provider's own rules, prints the settings diff and applies with server-side " +
			"apply. An upgrade keeps every setting already installed (image, peer-pods-cm keys, credentials, " +
			"certificates) unless a flag changes it; --unset KEY, --use-adc and --no-tls-certs remove. A change that restarts CAA " +
			"while kata-remote pods run on its nodes restarts them too: refused without --restart-peer-pods. docs/install.md."},
	})
	o.cluster.Register(fs)
	var project, zone, podImage, network, subnetwork string
	var credFile, wifFile, tlsCA, tlsCert, tlsKey string
	var noTLS bool
	fs.StringVar(&o.req.Image, "image", "", "image with cloud-api-adaptor and gcp-t4 (built by make image), name[:tag][@digest]; default: the installed one, else "+ImageName+":latest")
	fs.StringVar(&o.req.Namespace, "namespace", "", "namespace for CAA (default: where it is installed, else "+Namespace+"); RBAC subjects follow")
	fs.StringVar(&project, "project", "", "GCP_PROJECT_ID: project the podVMs run in (required)")
	fs.StringVar(&zone, "zone", "", "GCP_ZONE: primary zone, one with T4s (required)")
	fs.StringVar(&podImage, "podvm-image", "", "PODVM_IMAGE_NAME: the podVM image (required without GCP_INSTANCE_TEMPLATE)")
	fs.StringVar(&network, "network", "", "GCP_NETWORK, e.g. global/networks/default (required without GCP_INSTANCE_TEMPLATE)")
	fs.StringVar(&subnetwork, "subnetwork", "", "GCP_SUBNETWORK")
	fs.Var(set, "set", "any peer-pods-cm key CAA "+UpstreamRelease+" or gcp-t4 reads, KEY=VALUE, repeatable (docs/provider.md)")
	fs.Var(&unset, "unset", "remove a peer-pods-cm key set earlier (back to its default), repeatable")
	fs.StringVar(&credFile, "credentials-file", "", "service account key JSON for GCP_CREDENTIALS (prefer --wif-credential-config: no key)")
	fs.StringVar(&wifFile, "wif-credential-config", "", "Workload Identity Federation credential configuration (external_account, credential source file "+WIFTokenPath+"); docs/install.md")
	fs.BoolVar(&o.req.UseADC, "use-adc", false, "drop an installed key or WIF configuration: CAA uses the pod's Application Default Credentials")
	fs.StringVar(&tlsCA, "tls-ca", "", "refused: custom CAA-to-podVM certificates break every peer pod with the gcp-t4 podVM image (docs/install.md); CAA generates its own")
	fs.StringVar(&tlsCert, "tls-cert", "", "refused, as --tls-ca")
	fs.StringVar(&tlsKey, "tls-key", "", "refused, as --tls-ca")
	fs.BoolVar(&noTLS, "no-tls-certs", false, "drop custom certificates an earlier version installed: CAA generates its own")
	gke := fs.String("gke", "auto", "containerd remediation sidecar (components/gke-remediation): auto (on GKE), on, off")
	rc := fs.String("runtimeclass", "auto", "kata-remote RuntimeClass (components/runtimeclass): auto (left to kata-deploy), on (created so kata-deploy's chart can adopt it), off")
	guard := fs.String("cost-guard", "auto", "per-pod GPU limits per namespace and fixed kata annotations, checked by the API server (components/cost-guard, docs/provider.md): auto (on for a new install; an upgrade keeps what is installed), on, off")
	fs.StringVar(&o.req.GuardMaxGPUsPerPod, "cost-guard-max-gpus-per-pod", "", "the cost guard's GPU limit per peer pod for every namespace (maxGPUsPerPod; an H100 counts 18); default: the installed one, else 1")
	defCCT, err := DefaultCreateContainerTimeout()
	if err != nil {
		return nil, fs, err
	}
	fs.StringVar(&o.req.CreateContainerTimeout, "create-container-timeout", "", "kata-remote's create_container_timeout (the agent's CreateContainer, guest pull included), set by the remediation sidecar on each node, which is Ready only while the effective value is at least this; 0 leaves kata-remote's configuration alone; default: the installed one, else "+defCCT)
	fs.BoolVar(&o.dryRun, "dry-run", false, "read what is installed, print the settings diff and have the API server validate every object (server-side dry run); change nothing")
	fs.BoolVar(&o.render, "render", false, "print the manifests the flags alone render, Secret data redacted; contacts no cluster")
	fs.BoolVar(&o.restartPeerPods, RestartPeerPodsFlag, false, "apply a change that restarts CAA (its pod template: settings, key, image) although kata-remote pods run on its nodes: each restarts on a new podVM and its old podVM bills until the reaper's pass; without it install refuses (exit 2) and lists them")
	fs.BoolVar(&o.force, "force-conflicts", false, "take over fields another field manager set to other values")
	fs.BoolVar(&o.wait, "wait", true, "wait for the DaemonSet rollout (objects no longer rendered are pruned after it)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the apply (pruning included) and, separately, for the rollout")
	fs.DurationVar(&o.rolloutTimeout, "rollout-timeout", 0, "how long to wait for the rollout alone, as kubectl rollout status --timeout (default: --timeout)")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return nil, fs, cli.ExitStatus(code)
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected argument %q; settings are flags, e.g. --set GCP_ZONES=auto", fs.Arg(0))
	}
	if o.gke, err = ParseMode("gke", *gke); err != nil {
		return nil, fs, err
	}
	if o.runtimeClass, err = ParseMode("runtimeclass", *rc); err != nil {
		return nil, fs, err
	}
	if o.costGuard, err = ParseMode("cost-guard", *guard); err != nil {
		return nil, fs, err
	}
	if o.req.GuardMaxGPUsPerPod != "" {
		if o.costGuard == ModeOff {
			return nil, fs, fmt.Errorf("--cost-guard-max-gpus-per-pod with --cost-guard=off: the limit is the cost guard's; drop one")
		}
		if err := checkGuardMax(o.req.GuardMaxGPUsPerPod); err != nil {
			return nil, fs, err
		}
	}
	if v := o.req.CreateContainerTimeout; v != "" {
		if err := CheckCreateContainerTimeout(v); err != nil {
			return nil, fs, err
		}
		if o.gke == ModeOff {
			return nil, fs, fmt.Errorf("--create-container-timeout with --gke=off: the remediation sidecar sets it; drop one")
		}
	}
	if o.timeout <= 0 {
		return nil, fs, fmt.Errorf("--timeout %s: want a positive duration, e.g. 5m", o.timeout)
	}
	switch {
	case o.rolloutTimeout < 0:
		return nil, fs, fmt.Errorf("--rollout-timeout %s: want a positive duration, e.g. 10m", o.rolloutTimeout)
	case o.rolloutTimeout == 0:
		o.rolloutTimeout = o.timeout
	}
	if o.dryRun && o.render {
		return nil, fs, fmt.Errorf("--dry-run and --render: give one (--dry-run reads the cluster, --render does not)")
	}
	cfg := map[string]string{}
	for k, v := range set {
		cfg[k] = v
	}
	for _, f := range []struct{ flag, key, val string }{
		{"project", "GCP_PROJECT_ID", project}, {"zone", "GCP_ZONE", zone}, {"podvm-image", "PODVM_IMAGE_NAME", podImage},
		{"network", "GCP_NETWORK", network}, {"subnetwork", "GCP_SUBNETWORK", subnetwork},
	} {
		if f.val == "" {
			continue
		}
		if prev, ok := cfg[f.key]; ok && prev != f.val {
			return nil, fs, fmt.Errorf("--%s %q and --set %s=%q disagree; give one", f.flag, f.val, f.key, prev)
		}
		cfg[f.key] = f.val
	}
	o.req.Set, o.req.Unset = cfg, unset
	o.keyFile = credFile
	if o.req.Credentials, err = readFile("credentials-file", credFile); err != nil {
		return nil, fs, err
	}
	if o.req.WIF, err = readFile("wif-credential-config", wifFile); err != nil {
		return nil, fs, err
	}
	if tlsCA != "" || tlsCert != "" || tlsKey != "" {
		return nil, fs, errCustomTLS
	}
	o.req.NoTLS = noTLS
	// What the flags say on their own must hold before any cluster is read.
	probe := Settings{Image: o.req.Image, Config: cfg, Credentials: o.req.Credentials, WIFCredentialConfig: o.req.WIF, TLS: o.req.TLS, Namespace: o.req.Namespace}
	if err := probe.Validate(); err != nil {
		return nil, fs, err
	}
	return o, fs, nil
}

// missingRequired names the required settings not given, as flags.
func missingRequired(c map[string]string) []string {
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

// checkConfig is what install and --render check of the peer-pods-cm the
// objects carry: the required keys, then every key by CAA's and the
// provider's rules.
func checkConfig(objs []*unstructured.Unstructured, tlsMounted bool) error {
	if miss := missingRequired(configOf(objs)); len(miss) > 0 {
		return fmt.Errorf("missing %s (the provider refuses to start without them; docs/provider.md)", strings.Join(miss, ", "))
	}
	return ValidateConfig(configOf(objs), tlsMounted)
}

// Main is `gcp-t4 install`. It talks to a person at a terminal (notes,
// the settings diff and rollout progress on stdout, warnings and errors on
// stderr), so it writes text rather than structured logs; the manifests
// alone go to stdout with --render.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	o, fs, err := parseInstallTo(args, stdout, stderr)
	if code, ok := err.(cli.ExitStatus); ok {
		return int(code)
	}
	if err != nil {
		return cli.Misuse(fs, stderr, "%v", err)
	}
	// Before anything is rendered or applied: a key a `git add` would
	// commit is refused as bad input (exit 2), its own message the fix.
	if err := refuseCommittableKey(ctx, "credentials-file", o.keyFile, logger); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 install: %v\n", err)
		return 2
	}
	if err := runInstall(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 install: %v\n", err)
		// A refusal to restart peer pods is a choice left to the user
		// (its message names the flag), not a failure: exit 2, as above.
		if errors.Is(err, errRollRefused) {
			return 2
		}
		return 1
	}
	return 0
}

// renderOffline is --render: the flags alone, no cluster.
func renderOffline(o *installOptions, stdout, stderr io.Writer) error {
	objs, err := renderObjects(o, stderr)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}

// renderObjects is what --render prints: the objects the flags alone
// give, checked as install checks them, Secret data redacted.
func renderObjects(o *installOptions, stderr io.Writer) ([]*unstructured.Unstructured, error) {
	s, _, err := Merge(Live{}, o.req)
	if err != nil {
		return nil, err
	}
	s.GKERemediation = o.gke == ModeOn
	s.RuntimeClass = o.runtimeClass == ModeOn
	// auto is what a first install gets: the guard on.
	s.CostGuard = o.costGuard != ModeOff
	if o.gke == ModeAuto || o.runtimeClass == ModeAuto {
		fmt.Fprintln(stderr, "gcp-t4 install: --render contacts no cluster: --gke=auto and --runtimeclass=auto render as off; pass =on to include them")
	}
	if o.costGuard == ModeAuto {
		fmt.Fprintln(stderr, "gcp-t4 install: --render: --cost-guard=auto renders as on, as for a new install (components/cost-guard needs Kubernetes 1.30 or later); pass --cost-guard=off to leave it out")
	}
	objs, err := Build(s)
	if err != nil {
		return nil, err
	}
	// Exactly install's checks, in install's order, so that what --render
	// prints for kubectl apply is what install would apply; only the
	// cluster ID, which install reads from the cluster, must be given.
	if err := checkConfig(objs, s.TLS != nil); err != nil {
		return nil, err
	}
	if configOf(objs)[ClusterIDKey] == "" {
		return nil, fmt.Errorf("--render: %s is not set: --render contacts no cluster, so give this cluster's ID, its kube-system namespace's UID: --set %s=$(kubectl get namespace kube-system -o jsonpath='{.metadata.uid}')", ClusterIDKey, ClusterIDKey)
	}
	if redactSecrets(objs) {
		fmt.Fprintln(stderr, "gcp-t4 install: --render: Secret data redacted; `gcp-t4 install` applies the real files")
	}
	return objs, nil
}

// redactSecrets replaces every Secret value by its size.
func redactSecrets(objs []*unstructured.Unstructured) bool {
	any := false
	for _, o := range objs {
		if o.GetKind() != "Secret" {
			continue
		}
		for _, field := range []string{"data", "stringData"} {
			d, _, _ := unstructured.NestedMap(o.Object, field)
			for k, v := range d {
				s, _ := v.(string)
				d[k] = fmt.Sprintf("<redacted: %d bytes>", len(s))
				any = true
			}
			if len(d) > 0 {
				_ = unstructured.SetNestedMap(o.Object, d, field)
			}
		}
	}
	return any
}

func runInstall(ctx context.Context, o *installOptions, stdout, stderr io.Writer) error {
	if o.render {
		return renderOffline(o, stdout, stderr)
	}
	c, err := o.cluster.Connect("gcp-t4-install")
	if err != nil {
		return fmt.Errorf("%w; --render prints the manifests without a cluster", err)
	}
	live, err := ReadLive(ctx, c.Kube, o.req.Namespace)
	if err != nil {
		return err
	}
	if live.HelmRelease != "" {
		return fmt.Errorf("daemonset %s/%s belongs to Helm release %q (upstream's peerpods chart); change it with helm upgrade (docs/install.md, \"Helm\"), or helm uninstall it before using gcp-t4 install", live.Namespace, DaemonSetName, live.HelmRelease)
	}
	s, notes, err := Merge(live, o.req)
	if err != nil {
		return err
	}
	env, err := Detect(ctx, c.Kube)
	if err != nil {
		return err
	}
	d, err := Decide(env, o.gke, o.runtimeClass)
	if err != nil {
		return err
	}
	s.GKERemediation, s.RuntimeClass = d.GKERemediation, d.RuntimeClass
	guard, err := costGuardWanted(ctx, c.Kube, o.costGuard, live)
	if err != nil {
		return err
	}
	s.CostGuard = guard.on
	if guard.note != "" {
		d.Notes = append(d.Notes, guard.note)
	}
	if guard.warning != "" {
		d.Warnings = append(d.Warnings, guard.warning)
	}
	if !s.CostGuard && o.req.GuardMaxGPUsPerPod != "" {
		return fmt.Errorf("--cost-guard-max-gpus-per-pod: the cost guard is not installed here; add --cost-guard=on")
	}
	if err := setClusterID(ctx, c.Kube, &s); err != nil {
		return err
	}
	objs, err := Build(s)
	if err != nil {
		return err
	}
	if err := checkConfig(objs, s.TLS != nil); err != nil {
		return err
	}
	for _, n := range append(d.Notes, notes...) {
		fmt.Fprintf(stdout, "%s\n", n)
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if s.Credentials == nil && s.WIFCredentialConfig == nil {
		fmt.Fprintln(stderr, "warning: no key and no Workload Identity Federation configuration: CAA uses the Application Default Credentials its pod finds, on GKE the node's service account, which then needs the podVM permissions (docs/install.md, \"Credentials\")")
	}
	PrintDiff(stdout, liveView(live), newView(s, objs))
	cl := Cluster{Dynamic: c.Dynamic, Mapper: c.Mapper, Namespace: s.Namespace}
	actx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := checkRoll(actx, c.Kube, cl, objs, o.restartPeerPods, o.dryRun, o.force, stdout, stderr); err != nil {
		return err
	}
	res, err := cl.Apply(actx, objs, ApplyOptions{ForceConflicts: o.force, DryRun: o.dryRun})
	if err != nil {
		return err
	}
	if o.dryRun {
		fmt.Fprintf(stdout, "dry run: the API server accepted %d objects (%d would change); nothing was changed\n", len(res.Changed)+len(res.Unchanged), len(res.Changed))
		for _, r := range res.Changed {
			fmt.Fprintf(stdout, "  would configure %s\n", r)
		}
		for _, r := range res.Stale {
			fmt.Fprintf(stdout, "  would prune %s after the rollout\n", r)
		}
		return nil
	}
	fmt.Fprintf(stdout, "applied %d objects with server-side apply (field manager %s): %d changed, %d unchanged\n",
		len(objs), FieldManager, len(res.Changed), len(res.Unchanged))
	for _, r := range res.Changed {
		fmt.Fprintf(stdout, "  configured %s\n", r)
	}
	if !o.wait {
		for _, r := range res.Stale {
			fmt.Fprintf(stdout, "  kept %s until a later install sees the rollout done (--wait=false)\n", r)
		}
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, o.rolloutTimeout)
	defer wcancel()
	r, err := WaitRollout(wctx, c.Kube, cl.ns(), stdout, o.pollInterval)
	if err != nil {
		return err
	}
	if r.Desired == 0 {
		fmt.Fprintln(stdout, "rollout done, but no node matches the DaemonSet's node selector yet")
	} else {
		fmt.Fprintln(stdout, "rollout done")
	}
	pctx, pcancel := context.WithTimeout(ctx, o.timeout)
	defer pcancel()
	deleted, kept, err := cl.Prune(pctx, res.Stale)
	if err != nil {
		return err
	}
	for _, r := range deleted {
		fmt.Fprintf(stdout, "  pruned %s (no longer rendered)\n", r)
	}
	for _, r := range kept {
		fmt.Fprintf(stdout, "  left %s to the Helm release that adopted it\n", r)
	}
	return nil
}
