package install

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeletstandin"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/preflight"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

// runbookDoc is the guide testRunbook runs.
var runbookDoc = filepath.Join(repoRoot, "docs", "runbook-mistral-tp2.md")

// Why a runbook command is not run here. Every command the test does not
// run matches one of these rules, by name, and is logged with it; a
// command no rule names fails the test, so a new command is run or
// skipped on purpose, never silently.
const (
	skipCloudAccount = "needs a Google Cloud account with billing: the emulator's project stands in for the one it creates"
	skipGcloudConfig = "sets gcloud's own default project; every command here names the project"
	skipPodVMBuild   = "builds the podVM image (mkosi, many minutes): test/podvm/docs-test.sh runs these commands as written"
	skipGitHub       = "installs KubeRay from GitHub, which tests do not reach; test/kuberay decodes the example with KubeRay v1.6.2's types and validation"
	skipKubeRayCRDs  = "needs KubeRay's CRDs (RayService), which the skipped KubeRay install brings"
	skipRunningPods  = "needs pods running in GPU podVMs on Google Cloud: there is no kubelet, podVM or GPU here"
	skipOperator     = "waits for the KubeRay operator's pod, which the skipped install brings and no kubelet here would run"
	skipManagedProm  = "needs Google Cloud Managed Service for Prometheus's CRD (PodMonitoring), which GKE installs"
)

// runbookRule says how the test handles the commands matching re: skip
// names why it is not run; otherwise run runs it.
type runbookRule struct {
	re   *regexp.Regexp
	skip string
	run  func(r *runbook, t *testing.T, args []string)
	// unexpanded: run gets the command's text as its one argument, for a
	// command whose shell expansion (a command substitution) reads what
	// only the admin's machine has.
	unexpanded bool
}

// runbookRules, most specific first; the first match handles a command.
var runbookRules = []runbookRule{
	{re: regexp.MustCompile(`^make build$`), run: (*runbook).build},
	{re: regexp.MustCompile(`^export PATH=`), run: (*runbook).binOnPath},
	{re: regexp.MustCompile(`^export `), run: (*runbook).export},
	{re: regexp.MustCompile(`^gcloud projects create |^gcloud services enable `), skip: skipCloudAccount},
	{re: regexp.MustCompile(`^gcloud config set project `), skip: skipGcloudConfig},
	{re: regexp.MustCompile(`^gcloud compute networks create `), run: (*runbook).createNetwork},
	{re: regexp.MustCompile(`^gcloud compute networks subnets create `), run: (*runbook).createSubnet},
	{re: regexp.MustCompile(`^gcloud compute routers create `), run: (*runbook).createRouter},
	{re: regexp.MustCompile(`^gcloud compute routers nats create `), run: (*runbook).createNAT},
	{re: regexp.MustCompile(`^gcloud container clusters create `), run: (*runbook).createCluster},
	{re: regexp.MustCompile(`^gcloud container clusters get-credentials `), run: (*runbook).getCredentials},
	{re: regexp.MustCompile(`^make podvm-binaries$|^make podvm$`), skip: skipPodVMBuild},
	{re: regexp.MustCompile(`^GCE_[A-Z_]+=\S* .*podvm/scripts/gce-pack\.sh `), run: (*runbook).pack},
	{re: regexp.MustCompile(`^gcp-t4 install `), run: (*runbook).install},
	{re: regexp.MustCompile(`^gcp-t4 preflight `), run: (*runbook).preflight},
	{re: regexp.MustCompile(`^gcp-t4 plan serve `), run: (*runbook).planServe},
	{re: regexp.MustCompile(`^gcp-t4 plan -f `), run: (*runbook).planFile},
	{re: regexp.MustCompile(`^kubectl apply --server-side -k "?github\.com/`), skip: skipGitHub},
	{re: regexp.MustCompile(`^kubectl -n default rollout status deployment/kuberay-operator`), skip: skipOperator},
	{re: regexp.MustCompile(`^kubectl create namespace `), run: (*runbook).createNamespace},
	{re: regexp.MustCompile(`^kubectl (apply --server-side|delete) -k install/examples/mistral-tp2/nccl-check$`), run: (*runbook).kustomize},
	{re: regexp.MustCompile(`^kubectl (apply --server-side|delete) -k install/examples/mistral-tp2(/single-podvm)?$`), skip: skipKubeRayCRDs},
	{re: regexp.MustCompile(`^kubectl apply --server-side -k install/examples/mistral-tp2/monitoring$`), skip: skipManagedProm},
	{re: regexp.MustCompile(`^kubectl -n mistral-tp2 (wait|logs|exec|get|port-forward) |^HEAD=\$\(kubectl |^curl `), skip: skipRunningPods},
}

// runbook is the state a reader of the runbook builds up: a walk (the
// emulator, the variables, the user's home) plus what the runbook's own
// commands created, which later commands must name.
type runbook struct {
	*walk
	section string
	// network and subnet are what §2 created; router its Cloud Router.
	network, subnet, router string
	// image is the podVM image the pack step created; cacheImage the cache
	// image §4's import created (runbook_cache_apiserver_test.go).
	image, cacheImage string
	// nodes are the cluster's nodes, as §3 asked for them.
	nodes    []string
	ran      map[string]bool // handler -> it ran
	skipped  []string
	kataDone bool
}

// testRunbook runs docs/runbook-mistral-tp2.md as written, in order, from
// a new user's state (no kubeconfig, an empty project on the emulator with
// no network of its own), every command that needs no cloud account, on
// the real API server and the GCE emulator. After each command it checks
// what the next step relies on. What cannot run here is skipped by a named
// rule (runbookRules) and logged.
func (e *env) testRunbook(t *testing.T) {
	ctx := t.Context()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	for _, k := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_CREDENTIALS", "KUBECONFIG", "GCP_SERVICE_ACCOUNT", "GOOGLE_APPLICATION_CREDENTIALS"} {
		t.Setenv(k, "")
	}
	// The emulator stands in for Google's API, the one thing a test sets
	// that the user's machine does not.
	t.Setenv("GCP_ENDPOINT", fake.URL())
	// A new user: a home with nothing in it. gcp-t4 install, run as
	// written, finds its kubeconfig there as kubectl does.
	home := t.TempDir()
	t.Setenv("HOME", home)
	// What a previous case left in the cluster is not the new user's.
	e.setNodes(t)
	t.Cleanup(func() { e.cleanupRunbook(t) })

	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	r := &runbook{walk: &walk{e: e, fake: fake, home: home, workdir: t.TempDir(), out: map[string]string{}, roles: map[string][]string{}, granted: map[string][]string{},
		// The project is the emulator's.
		vars: map[string]string{"PROJECT": fake.Project(),
			// The runbook runs from the checkout's root; PATH is the
			// reader's own.
			"PWD": root, "PATH": os.Getenv("PATH")}}, ran: map[string]bool{}}
	blocks, err := doccmd.File(runbookDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		r.section = b.Heading
		for _, c := range b.Commands {
			r.run(t, c)
		}
	}
	t.Logf("not run here (%d):\n%s", len(r.skipped), strings.Join(r.skipped, "\n"))

	// The runbook's own path through §4 ran, in full.
	for _, h := range []string{"build", "binOnPath", "createNetwork", "createSubnet", "createRouter", "createNAT", "createCluster", "getCredentials", "pack", "install", "preflight", "planServe", "planFile", "createNamespace", "kustomize", "createCacheImage", "cacheVerity", "setCacheImage"} {
		if !r.ran[h] {
			t.Errorf("no runbook command reached %s: the runbook lost a step, or the test its rule", h)
		}
	}
	if _, err := e.cs.CoreV1().Namespaces().Get(ctx, "mistral-tp2", metav1.GetOptions{}); err != nil {
		t.Errorf("§7 needs the namespace, after §6's clean-up: %v", err)
	}
}

// run runs one command by the first rule that matches it.
func (r *runbook) run(t *testing.T, c doccmd.Command) {
	t.Helper()
	for _, rule := range slices.Concat(cacheRunbookRules, runbookRules) {
		if !rule.re.MatchString(c.Text) {
			continue
		}
		if rule.skip != "" {
			r.skipped = append(r.skipped, fmt.Sprintf("  %s (line %d): %s\n    %s", r.section, c.Line, c.Text, rule.skip))
			return
		}
		if rule.unexpanded {
			rule.run(r, t, []string{c.Text})
			return
		}
		args := r.fixPaths(r.expand(t, r.section, c.Text))
		rule.run(r, t, args)
		t.Logf("%s (line %d): ran %s", r.section, c.Line, c.Text)
		return
	}
	t.Fatalf("%s (line %d): the runbook test has no rule for %q: run it (a handler in runbookRules) or skip it by a named reason", r.section, c.Line, c.Text)
}

func (r *runbook) mark(name string) { r.ran[name] = true }

// build stands in for `make build`, which the test does not run (its
// gcp-t4 runs in process): make must build cmd/gcp-t4 into bin/, the
// directory the next command puts on PATH.
func (r *runbook) build(t *testing.T, args []string) {
	r.mark("build")
	out, err := exec.Command("make", "-n", "-C", repoRoot, "build").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "./cmd/gcp-t4 ") || !strings.Contains(string(out), "-o ../bin/") {
		t.Fatalf("%s: make -n build does not build ./cmd/gcp-t4 into bin/: %v\n%s", r.section, err, out)
	}
}

// binOnPath checks the runbook's PATH: the checkout's bin/, where make
// build wrote gcp-t4, ahead of the reader's own, so that every `gcp-t4`
// after it is the one built.
func (r *runbook) binOnPath(t *testing.T, args []string) {
	r.mark("binOnPath")
	v, ok := strings.CutPrefix(args[1], "PATH=")
	dirs := filepath.SplitList(v)
	if len(args) != 2 || !ok || len(dirs) < 2 || dirs[0] != filepath.Join(r.vars["PWD"], "bin") || strings.Join(dirs[1:], string(filepath.ListSeparator)) != r.vars["PATH"] {
		t.Fatalf("%s: %v: want the checkout's bin/ (%s) before the reader's PATH", r.section, args, filepath.Join(r.vars["PWD"], "bin"))
	}
	r.vars["PATH"] = v
}

// flags reads --name=value and --name value pairs (and bare --name).
func flags(args []string) map[string]string {
	f := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			v = args[i+1]
			i++
		}
		f[k] = v
	}
	return f
}

func (r *runbook) export(t *testing.T, args []string) {
	for _, kv := range args[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("%s: export %s: not NAME=VALUE", r.section, kv)
		}
		// The emulator's project stands in for the reader's.
		if _, fixed := r.vars[k]; !fixed || k != "PROJECT" {
			r.vars[k] = v
		}
	}
}

// The emulator models one VPC network, "default", with a subnet in every
// region: the runbook's network and subnet are that network under the
// emulator's name. A VPC network created with --subnet-mode=custom has
// no firewall rules, so the default network's are removed: the firewall
// checks see the runbook's network as it is (GKE's own rules for the
// cluster are not modelled; preflight's fixes then create what they
// would have allowed).
func (r *runbook) createNetwork(t *testing.T, args []string) {
	r.mark("createNetwork")
	f := flags(args[5:])
	r.network = args[4]
	mtu, err := strconv.Atoi(f["mtu"])
	if err != nil || f["subnet-mode"] != "custom" {
		t.Fatalf("%s: networks create %v: want --subnet-mode=custom and an --mtu", r.section, args)
	}
	r.fake.SetNetworkMTU(int32(mtu))
	for _, fw := range []string{"default-allow-icmp", "default-allow-internal", "default-allow-rdp", "default-allow-ssh"} {
		if err := r.fake.DeleteFirewall(fw); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *runbook) createSubnet(t *testing.T, args []string) {
	r.mark("createSubnet")
	f := flags(args[6:])
	if f["network"] != r.network || f["region"] != r.vars["REGION"] {
		t.Fatalf("%s: subnet %s on network %q in %q; §2 created network %q, REGION is %q", r.section, args[5], f["network"], f["region"], r.network, r.vars["REGION"])
	}
	r.subnet = args[5]
	_, pga := f["enable-private-ip-google-access"]
	r.fake.SetPrivateGoogleAccess(f["region"], pga)
}

func (r *runbook) createRouter(t *testing.T, args []string) {
	r.mark("createRouter")
	f := flags(args[5:])
	if f["network"] != r.network || f["region"] != r.vars["REGION"] {
		t.Fatalf("%s: router %s on network %q in %q; want %q in %q", r.section, args[4], f["network"], f["region"], r.network, r.vars["REGION"])
	}
	r.router = args[4]
}

func (r *runbook) createNAT(t *testing.T, args []string) {
	r.mark("createNAT")
	f := flags(args[6:])
	if f["router"] != r.router || f["region"] != r.vars["REGION"] {
		t.Fatalf("%s: NAT %s on router %q in %q; §2 created router %q in %q", r.section, args[5], f["router"], f["region"], r.router, r.vars["REGION"])
	}
	nat := &computepb.RouterNat{Name: proto.String(args[5]), NatIpAllocateOption: proto.String("AUTO_ONLY")}
	if _, all := f["nat-all-subnet-ip-ranges"]; all {
		nat.SourceSubnetworkIpRangesToNat = proto.String("ALL_SUBNETWORKS_ALL_IP_RANGES")
	} else {
		t.Fatalf("%s: the test models --nat-all-subnet-ip-ranges only: %v", r.section, args)
	}
	if err := r.fake.AddRouter(f["region"], &computepb.Router{Name: proto.String(r.router), Network: proto.String("global/networks/default"), Nats: []*computepb.RouterNat{nat}}); err != nil {
		t.Fatal(err)
	}
}

// emulatorName is the emulator's name for the runbook's network or
// subnet, which must be the ones §2 created.
func (r *runbook) emulatorName(t *testing.T, what, name string) string {
	t.Helper()
	want := r.subnet
	if what == "network" {
		want = r.network
		name = strings.TrimPrefix(name, "global/networks/")
	}
	if name != want || want == "" {
		t.Fatalf("%s: %s %q is not the one §2 created (%q)", r.section, what, name, want)
	}
	return "default"
}

// createCluster stands in for GKE: the nodes the command asks for (count,
// machine type, zone, image type, node labels) as VMs on the emulator
// with a GKE node's network tag, and as Nodes with a GKE node's labels and
// a kubelet behind the node proxy (GKE's runtimeRequestTimeout, 2m).
func (r *runbook) createCluster(t *testing.T, args []string) {
	r.mark("createCluster")
	ctx := t.Context()
	name, f := args[4], flags(args[5:])
	r.emulatorName(t, "network", f["network"])
	r.emulatorName(t, "subnetwork", f["subnetwork"])
	if f["zone"] != r.vars["ZONE"] {
		t.Fatalf("%s: cluster in zone %q, ZONE is %q", r.section, f["zone"], r.vars["ZONE"])
	}
	n, err := strconv.Atoi(f["num-nodes"])
	if err != nil || n < 1 {
		t.Fatalf("%s: --num-nodes %q", r.section, f["num-nodes"])
	}
	osDist := map[string]string{"UBUNTU_CONTAINERD": "ubuntu", "COS_CONTAINERD": "cos"}[f["image-type"]]
	if osDist == "" {
		t.Fatalf("%s: the test knows image types UBUNTU_CONTAINERD and COS_CONTAINERD, not %q", r.section, f["image-type"])
	}
	osImage := map[string]string{"ubuntu": "Ubuntu 22.04.5 LTS", "cos": "Container-Optimized OS from Google"}[osDist]
	labels := map[string]string{labelGKENodePool: "default-pool", labelGKEOS: osDist, "cloud.google.com/gke-container-runtime": "containerd"}
	for _, kv := range strings.Split(f["node-labels"], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			labels[k] = v
		}
	}
	tag := "gke-" + name + "-5f3a9c1e-node"
	var nodes []*corev1.Node
	for i := range n {
		vm := fmt.Sprintf("gke-%s-default-pool-5f3a9c1e-%c", name, 'a'+i)
		ip := gkeNodeVM(t, r.fake, f["zone"], f["machine-type"], vm, tag)
		nd := node(vm, maps.Clone(labels), "gce://"+r.fake.Project()+"/"+f["zone"]+"/"+vm, "v1.33.2-gke.1240000", osImage)
		nd.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		nodes = append(nodes, nd)
		r.nodes = append(r.nodes, vm)
	}
	r.e.setNodes(t, nodes...)
	for _, vm := range r.nodes {
		if err := kubeletstandin.Start(t, "2m0s").Attach(ctx, r.e.cs, vm, corev1.NodeHostName); err != nil {
			t.Fatal(err)
		}
	}
}

// gkeNodeVM creates a GKE node's VM on the emulator and returns its IP.
func gkeNodeVM(t *testing.T, fake *gcefake.Server, zone, machineType, name, tag string) string {
	t.Helper()
	c, err := compute.NewInstancesRESTClient(context.Background(), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	op, err := c.Insert(context.Background(), &computepb.InsertInstanceRequest{Project: fake.Project(), Zone: zone, InstanceResource: &computepb.Instance{
		Name: proto.String(name), MachineType: proto.String("zones/" + zone + "/machineTypes/" + machineType), Tags: &computepb.Tags{Items: []string{tag}},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/" + fake.Project() + "/global/images/podvm-t4")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"), Subnetwork: proto.String("regions/" + zone[:strings.LastIndex(zone, "-")] + "/subnetworks/default")}},
	}})
	if err == nil {
		err = op.Wait(context.Background())
	}
	if err != nil {
		t.Fatalf("node VM %s (%s in %s): %v", name, machineType, zone, err)
	}
	inst, err := c.Get(context.Background(), &computepb.GetInstanceRequest{Project: fake.Project(), Zone: zone, Instance: name})
	if err != nil {
		t.Fatal(err)
	}
	return inst.GetNetworkInterfaces()[0].GetNetworkIP()
}

// getCredentials writes ~/.kube/config for the cluster, as gcloud does.
// Commands that take no kubeconfig flag read it there, as kubectl does;
// KUBECONFIG names that same file for them, because client-go fixes the
// home directory's path when the process starts.
func (r *runbook) getCredentials(t *testing.T, args []string) {
	r.mark("getCredentials")
	path := filepath.Join(r.home, ".kube", "config")
	b, err := os.ReadFile(r.e.cp.Kubeconfig)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o700)
	}
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
}

// pack stands in for gce-pack.sh's upload (test/podvm/docs-test.sh runs
// the script on these commands): the image it names, with the script's
// guest OS features.
func (r *runbook) pack(t *testing.T, args []string) {
	r.mark("pack")
	r.uploadImage(t, args)
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "GCE_IMAGE_NAME="); ok {
			r.image = v
		}
	}
}

// kataDeploy does what the runbook's prose asks before install (kata-deploy
// as install.md shows it): the kata-remote RuntimeClass, the remote shim's
// runtime handler on each node, and kata-deploy's node label.
func (r *runbook) kataDeploy(t *testing.T) {
	ctx := t.Context()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: RuntimeClassName}, Handler: RuntimeClassName}
	if _, err := r.e.cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, name := range r.nodes {
		n, err := r.e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels[labelKataRuntime] = "true"
		if n, err = r.e.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc"}, {Name: RuntimeClassName}}
		if _, err := r.e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.kataDone = true
}

// install runs gcp-t4 install as written (its kubeconfig from the user's
// home), after kata-deploy's part, and then does the DaemonSet
// controller's and kubelets' part for the node sidecar: a Ready pod on
// each selected node.
func (r *runbook) install(t *testing.T, args []string) {
	r.mark("install")
	ctx := t.Context()
	f := flags(args[2:])
	if f["podvm-image"] != r.image {
		t.Errorf("%s: install names podVM image %q; §4.1 created %q", r.section, f["podvm-image"], r.image)
	}
	args = slices.Clone(args)
	for i, a := range args {
		switch {
		case a == "--network" && i+1 < len(args):
			args[i+1] = "global/networks/" + r.emulatorName(t, "network", args[i+1])
		case a == "--subnetwork" && i+1 < len(args):
			args[i+1] = r.emulatorName(t, "subnetwork", args[i+1])
		}
	}
	if !r.kataDone {
		r.kataDeploy(t)
	}
	var stdout, stderr bytes.Buffer
	code := Main(ctx, args[2:], &stdout, &stderr, nil)
	out := stdout.String() + stderr.String()
	t.Logf("gcp-t4 install:\n%s", out)
	if code != 0 {
		t.Fatalf("%s: gcp-t4 install: exit %d\n%s", r.section, code, out)
	}
	if strings.Contains(out, "no node carries "+SelectionLabel) {
		t.Errorf("%s: install selects no node of the cluster §3 created:\n%s", r.section, out)
	}
	// install waited for the rollout: the DaemonSet controller has
	// scheduled CAA where install selected.
	if got := r.e.daemonSet(t).Status.DesiredNumberScheduled; got != int32(len(r.nodes)) {
		t.Errorf("%s: CAA's DaemonSet runs on %d of the cluster's %d nodes", r.section, got, len(r.nodes))
	}
	side, err := r.e.cs.AppsV1().DaemonSets(Namespace).Get(ctx, RemediationDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: the node sidecar: %v", r.section, err)
	}
	for _, name := range r.nodes {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: side.Name + "-" + name[len(name)-1:], Namespace: Namespace, Labels: side.Spec.Template.Labels},
			Spec: *side.Spec.Template.Spec.DeepCopy()}
		p.Spec.NodeName = name
		p, err := r.e.cs.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the node sidecar's pod on %s: %v", name, err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := r.e.cs.CoreV1().Pods(Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// preflight runs the runbook's preflight until its own fixes leave nothing
// failing, and holds the first run to what the runbook says: the settings
// come from the cluster, and on §2's network only firewall rules fail.
func (r *runbook) preflight(t *testing.T, args []string) {
	r.mark("preflight")
	n := len(r.preflightRuns)
	r.preflightUntilClean(t, args[2:], func(c context.Context, a []string, o, e *bytes.Buffer) int {
		return preflight.Main(c, a, o, e, testLogger(t))
	})
	run := r.preflightRuns[n]
	t.Logf("gcp-t4 preflight, first run:\n%s%s\nlast run:\n%s", run.firstErr, run.first, run.last)
	mustContain(t, "preflight's note of the settings it read", run.firstErr, "settings from "+Namespace+"/"+ConfigMapName+", which CAA reads: ",
		"GCP_NETWORK", "GCP_PROJECT_ID", "GCP_SUBNETWORK", "GCP_ZONE", "PODVM_IMAGE_NAME", "ROOT_VOLUME_SIZE")
	mustContain(t, "preflight's first run", run.first, "pass  config ", "pass  image "+r.image, "pass  mtu default", "pass  private google access on default",
		"pass  cloud nat in "+r.vars["REGION"], "pass  daemonset "+Namespace+"/"+DaemonSetName, "pass  kata-remote create_container_timeout")
	for _, l := range strings.Split(run.first, "\n") {
		if strings.HasPrefix(l, "fail  ") && !strings.HasPrefix(l, "fail  firewall ") {
			t.Errorf("on the runbook's network preflight fails more than firewall rules: %s", l)
		}
	}
	mustContain(t, "preflight's last run", run.last, " 0 failed")
}

// planServe runs step 1's calculator; the runbook goes on because it fits.
func (r *runbook) planServe(t *testing.T, args []string) {
	r.mark("planServe")
	var stdout, stderr bytes.Buffer
	if code := plan.Main(t.Context(), args[2:], &stdout, &stderr, testLogger(t)); code != 0 || !regexp.MustCompile(`(?m)^verdict\s+FITS`).MatchString(stdout.String()) {
		t.Errorf("%s: gcp-t4 plan serve: exit %d, want 0 and FITS\n%s%s", r.section, code, stdout.String(), stderr.String())
	}
}

// planFile runs plan on an example: its podVMs are N1 with T4s, and an
// exit 1 is the deadline the runbook explains (NOT MET, retried).
func (r *runbook) planFile(t *testing.T, args []string) {
	r.mark("planFile")
	var stdout, stderr bytes.Buffer
	code := plan.Main(t.Context(), args[2:], &stdout, &stderr, testLogger(t))
	out := stdout.String() + stderr.String()
	if code > 1 || code == 1 && !strings.Contains(out, "NOT MET") || !strings.Contains(out, "n1-standard-8") || !strings.Contains(out, "nvidia-tesla-t4") {
		t.Errorf("%s: gcp-t4 plan %v: exit %d\n%s", r.section, args[2:], code, out)
	}
}

func (r *runbook) createNamespace(t *testing.T, args []string) {
	r.mark("createNamespace")
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: args[3]}}
	if _, err := r.e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s: kubectl create namespace %s: %v", r.section, args[3], err)
	}
	// The ServiceAccount controller's part: admission needs "default"
	// for a pod.
	if _, err := r.e.cs.CoreV1().ServiceAccounts(args[3]).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// kustomize applies (server-side) or deletes a kustomization, as kubectl
// -k does, through the API server with what install put there (the cost
// guard admits or refuses the pods).
func (r *runbook) kustomize(t *testing.T, args []string) {
	r.mark("kustomize")
	ctx := t.Context()
	dir := args[len(args)-1]
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("%s: kustomize build %s: %v", r.section, dir, err)
	}
	c := r.e.installer(t)
	var names []string
	for _, res := range rm.Resources() {
		m, err := res.Map()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		ri, err := c.resource(refOf(u))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, u.GetKind()+"/"+u.GetName())
		if args[1] == "delete" {
			if err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("%s: kubectl delete -k %s: %s: %v", r.section, dir, refOf(u), err)
			}
			continue
		}
		if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubectl"}); err != nil {
			t.Fatalf("%s: kubectl apply --server-side -k %s: %s refused: %v", r.section, dir, refOf(u), err)
		}
	}
	t.Logf("%s -k %s: %s", args[1], dir, strings.Join(names, ", "))
}

// testLogger is the commands' log, in the test's.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, nil))
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// cleanupRunbook removes what the runbook created, for the next case.
func (e *env) cleanupRunbook(t *testing.T) {
	ctx := context.Background()
	// The node sidecar's pods have no kubelet to confirm their end, which
	// uninstall waits for: they go at once.
	_ = e.cs.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
	var o, errb bytes.Buffer
	e.uninstallMain(ctx, []string{"--kubeconfig=" + e.cp.Kubeconfig, "--timeout=10m", "--force"}, &o, &errb, nil)
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, "mistral-tp2", metav1.DeleteOptions{})
	_ = e.cs.NodeV1().RuntimeClasses().Delete(ctx, RuntimeClassName, metav1.DeleteOptions{})
	_ = e.cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}
