package preflight

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"google.golang.org/api/option"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// Main is `gcp-t4 preflight`: the provider's flags and env (as CAA reads
// them), plus the cluster to check. Exit 0 all pass (warnings allowed), 1
// any failure, 2 bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("gcp-t4 preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pf := providerflags.Register(fs)
	output := fs.String("o", "table", "output: table or json")
	kubeconfigPath := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to check as well (default $KUBECONFIG); empty checks the project only")
	nodeCIDRs := fs.String("node-cidrs", "", "worker node address ranges (the node pool's subnet) for the firewall checks, comma separated (default: the subnets holding the nodes' InternalIPs with -kubeconfig, else the podVM subnet)")
	nodeTags := fs.String("node-tags", "", "the worker nodes' network tags, comma separated, for firewall rules that target or admit them (default: read from the node VMs with -kubeconfig)")
	crmEndpoint := fs.String("resourcemanager-endpoint", "", "Cloud Resource Manager endpoint for testIamPermissions (default: Google's; GCP_ENDPOINT when that is a local emulator)")
	member := fs.String("member", "", "the IAM member CAA runs as, e.g. serviceAccount:caa@P.iam.gserviceaccount.com: its least-privilege grant is printed, and checked when preflight runs with its key (default: the account of -credentials-file / GCP_CREDENTIALS)")
	credentialsFile := fs.String("credentials-file", "", "a service account key file to run preflight with, as GCP_CREDENTIALS (CAA's own key checks CAA's permissions; gcp-t4 install --credentials-file takes the same file)")
	runtimeClass := fs.String("runtime-class", "kata-remote", "the peer-pods runtime class and containerd handler")
	namespace := new(string)
	fs.StringVar(namespace, "caa-namespace", defaultNamespace, "namespace of the CAA DaemonSet (with -kubeconfig and not given: the install's namespace, where its ClusterRoleBinding binds CAA, else this; a DaemonSet of that name elsewhere is ignored)")
	daemonSet := fs.String("caa-daemonset", "cloud-api-adaptor-daemonset", "name of the CAA DaemonSet")
	gkeCluster := fs.String("gke-cluster", "", "GKE cluster name, used in fix commands")
	remediate := fs.String("remediate-daemonset", RemediateDaemonSet, "name of the node sidecar's DaemonSet (gcp-t4-node remediate), in -caa-namespace")
	cat, err := startup.Load()
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 preflight: %v\n", err)
		return 2
	}
	// The default is kubelet's own bound, which GKE cannot raise: a
	// default preflight passes on a stock GKE node and still fails on
	// kata's 60 s; an admin who expects longer pulls says so and learns
	// whether the cluster allows them (gcp-t4 plan -f checks a workload).
	kubeletRow, _ := cat.Deadline(startup.KubeletRuntimeRequest)
	maxPull := fs.Duration("max-image-pull", kubeletRow.Default.Duration, "the longest in-guest image pull the cluster's workloads need: kubelet's runtimeRequestTimeout on every kata node and kata-remote's create_container_timeout must reach it (default: kubelet's default, which GKE cannot raise; a longer pull is retried, see gcp-t4 plan -f)")
	timeout := fs.Duration("timeout", 2*time.Minute, "limit for all checks together")
	fs.Usage = providerflags.Help{
		Synopsis: "gcp-t4 preflight [-kubeconfig FILE] [flags]",
		About: []string{"Checks the GCP project before deploying, each failure with the command that fixes it: the " +
			"provider's settings and credentials, GPU quota, accelerators in the zones, network, Cloud NAT, firewall, the " +
			"podVM image and permissions; with -kubeconfig also the cluster CAA is installed in, whose peer-pods-cm fills " +
			"the settings not given. Exits 0 when nothing failed (warnings allowed), 1 when a check failed. docs/preflight.md"},
	}.Usage(fs)
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return code
	}
	if *output != "table" && *output != "json" {
		return cli.Misuse(fs, stderr, "-o %q: use table or json", *output)
	}
	if _, _, err := gcpt4.ParseEndpoint("-resourcemanager-endpoint", *crmEndpoint); err != nil {
		return cli.Misuse(fs, stderr, "%v", err)
	}
	// Strictly, as the provider does at start: a value CAA's registrar
	// would quietly replace by its default is an error here too.
	if err := pf.CheckEnv(os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 preflight: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var kube kubernetes.Interface
	var prior []Result
	if *kubeconfigPath != "" {
		clients, err := caaconfig.Connect(*kubeconfigPath, "", "gcp-t4-preflight")
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 preflight: -kubeconfig %s: %v\n", *kubeconfigPath, err)
			return 2
		}
		kube = clients.Kube
		if *maxPull <= 0 {
			fmt.Fprintf(stderr, "gcp-t4 preflight: -max-image-pull %s: give a positive duration, e.g. 10m\n", *maxPull)
			return 2
		}
		// After an install, the settings CAA runs with are in the
		// cluster: what no flag or env var gives comes from there, so
		// `preflight -kubeconfig K` checks the project, image and network
		// CAA really uses (as gcp-t4 gc does).
		r, code := fromCluster(ctx, fs, kube, namespace, *daemonSet, stderr)
		if code != 0 {
			return code
		}
		prior = append(prior, r...)
	}
	cfg := pf.Config()
	if *credentialsFile != "" {
		if cfg.Credentials != "" {
			fmt.Fprintf(stderr, "gcp-t4 preflight: -credentials-file and GCP_CREDENTIALS are both set: give one\n")
			return 2
		}
		b, err := os.ReadFile(*credentialsFile)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 preflight: -credentials-file: %v\n", err)
			return 2
		}
		cfg.Credentials = string(b)
	}
	opts := Options{Cfg: cfg, Member: *member, CRMEndpoint: *crmEndpoint, KeyFile: *credentialsFile}
	for _, t := range strings.Split(*nodeTags, ",") {
		if t = strings.TrimSpace(t); t != "" {
			opts.NodeTags = append(opts.NodeTags, t)
		}
	}
	if *nodeCIDRs != "" {
		for _, s := range strings.Split(*nodeCIDRs, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				fmt.Fprintf(stderr, "gcp-t4 preflight: -node-cidrs %q: %v (e.g. 10.128.0.0/20)\n", s, err)
				return 2
			}
			opts.NodeCIDRs = append(opts.NodeCIDRs, p)
		}
	}
	if kube != nil {
		opts.Kube = kube
		opts.Cluster = &Cluster{RuntimeClass: *runtimeClass, Namespace: *namespace, DaemonSet: *daemonSet, GKECluster: *gkeCluster,
			MaxImagePull: *maxPull, Remediate: *remediate}
	}
	rs := append(prior, Run(ctx, opts, logger)...)
	if err := Print(stdout, *output, rs); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 preflight: %v\n", err)
		return 2
	}
	if Failed(rs) {
		return 1
	}
	return 0
}

// Options is everything one preflight run needs.
type Options struct {
	Cfg         gcpt4.Config
	Member      string
	CRMEndpoint string
	NodeCIDRs   []netip.Prefix
	NodeTags    []string
	// KeyFile is the file the credentials came from (-credentials-file),
	// for fixes that name it.
	KeyFile string
	// Kube and Cluster are set for the cluster checks.
	Kube    kubernetes.Interface
	Cluster *Cluster
	// Extra client options (a test server's HTTP client).
	Extra []option.ClientOption
}

// Run runs the project checks and, with a cluster, the cluster checks.
func Run(ctx context.Context, o Options, logger *slog.Logger) []Result {
	var rs []Result
	var nodeIPs []netip.Addr
	var nodeVMs []NodeVM
	if o.Cluster != nil {
		o.Cluster.Client = o.Kube
		var err error
		if nodeIPs, nodeVMs, err = o.Cluster.Nodes(ctx); err != nil {
			logger.Warn("reading nodes for the firewall checks", "err", err)
		}
	}
	cat, err := catalog.New(o.Cfg.ProfilesFile, o.Cfg.Profiles)
	if err != nil {
		rs = append(rs, fail("profiles", "fix GCP_PROFILES / GCP_PROFILES_FILE as the message says", "%v", err))
	} else {
		// The settings and the credentials are checked apart, so a run
		// with neither reports both instead of the first.
		cfgRs := checkConfig(o.Cfg, o.Cluster != nil)
		rs = append(rs, cfgRs...)
		g := &GCE{Cfg: o.Cfg, Catalog: cat, NodeCIDRs: o.NodeCIDRs, NodeTags: o.NodeTags, NodeIPs: nodeIPs, NodeVMs: nodeVMs, Member: o.Member, KeyFile: o.KeyFile}
		g.Caller = callerAccount(o.Cfg.Credentials, os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"))
		if g.Member == "" {
			g.Member = memberFromCredentials(o.Cfg.Credentials)
		}
		// The provider's own options: on a plain-HTTP endpoint (a local
		// emulator) they carry no credentials, while the key above still
		// says who the caller is.
		opts := append(o.Cfg.ClientOptions(), o.Extra...)
		iamEndpoint := ""
		if notGoogle(o.CRMEndpoint) {
			iamEndpoint = o.CRMEndpoint // a local emulator serves both
		}
		switch err := g.Connect(ctx, opts, append(crmOptions(o.Cfg, o.CRMEndpoint), o.Extra...), append(crmOptions(o.Cfg, iamEndpoint), o.Extra...)); {
		case err != nil:
			rs = append(rs, fail("credentials", g.credentialsFix(0), "%v", err))
		case Failed(cfgRs):
			// Every check below needs the project and zones.
			g.Close()
		default:
			rs = append(rs, g.Run(ctx)...)
			g.Close()
		}
	}
	if o.Cluster != nil {
		rs = append(rs, o.Cluster.Run(ctx)...)
	}
	return rs
}

// notGoogle is whether an endpoint gets no credentials by the provider's
// rule (gcpt4.ParseEndpoint: anything but https under googleapis.com, http
// in any letter case included): a local emulator or test server. An
// endpoint the rule refuses counts as not Google's, so it never gets them.
func notGoogle(endpoint string) bool {
	if endpoint == "" {
		return false
	}
	_, credentials, err := gcpt4.ParseEndpoint("endpoint", endpoint)
	return err != nil || !credentials
}

// crmOptions point Resource Manager at the flag's endpoint, or at a local
// emulator that GCP_ENDPOINT names (which serves both APIs). Credentials
// go only where the provider's rule sends them (gcpt4.ParseEndpoint).
func crmOptions(cfg gcpt4.Config, endpoint string) []option.ClientOption {
	var opts []option.ClientOption
	if endpoint == "" && notGoogle(cfg.Endpoint) {
		endpoint = cfg.Endpoint
	}
	if endpoint != "" {
		if canonical, _, err := gcpt4.ParseEndpoint("endpoint", endpoint); err == nil {
			endpoint = canonical
		}
		// The discovery-based client joins paths to an endpoint ending in "/".
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(endpoint, "/")+"/"))
		if notGoogle(endpoint) {
			return append(opts, option.WithoutAuthentication())
		}
	}
	if cfg.Credentials != "" {
		opts = append(opts, cfg.CredentialsOption())
	}
	return opts
}

// callerAccount is the member preflight's calls run as when a service
// account key says so: GCP_CREDENTIALS (as the provider uses it), else the
// key file GOOGLE_APPLICATION_CREDENTIALS names. Anything else (gcloud's
// user credentials, a metadata server, federation) is unknown here.
func callerAccount(creds, adcFile string) string {
	if creds != "" {
		return memberFromCredentials(creds)
	}
	if adcFile == "" {
		return ""
	}
	b, err := os.ReadFile(adcFile)
	if err != nil {
		return ""
	}
	return memberFromCredentials(string(b))
}

func memberFromCredentials(creds string) string {
	var key struct {
		ClientEmail string `json:"client_email"`
	}
	if json.Unmarshal([]byte(creds), &key) == nil && key.ClientEmail != "" {
		return "serviceAccount:" + key.ClientEmail
	}
	return ""
}
