package install

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/preflight"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/kio"
)

const repoRoot = "../../.."

// docSteps reads docs/install.md's `<!-- step: NAME -->` blocks: the
// commands of each, continuation lines joined and comments dropped.
func docSteps(t *testing.T) (names []string, steps map[string][]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	steps = map[string][]string{}
	marker := regexp.MustCompile(`^<!-- step: ([a-z-]+) -->$`)
	sc := bufio.NewScanner(f)
	step, inBlock, cont := "", false, ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case marker.MatchString(line):
			step = marker.FindStringSubmatch(line)[1]
			names = append(names, step)
		case step != "" && !inBlock && line == "```sh":
			inBlock = true
		case inBlock && line == "```":
			inBlock, step = false, ""
		case inBlock:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if strings.HasSuffix(line, "\\") {
				cont += strings.TrimSuffix(line, "\\") + " "
				continue
			}
			if cmd := strings.TrimSpace(cont + line); cmd != "" {
				steps[step] = append(steps[step], cmd)
			}
			cont = ""
		}
	}
	return names, steps
}

// walk holds what the steps share.
type walk struct {
	e       *env
	fake    *gcefake.Server
	vars    map[string]string
	workdir string
	out     map[string]string // step -> what its commands printed
}

func (w *walk) expand(cmd string) []string {
	cmd = strings.ReplaceAll(cmd, "~/.kube/config", w.e.cp.Kubeconfig)
	cmd = os.Expand(cmd, func(k string) string { return w.vars[k] })
	return strings.Fields(cmd)
}

// path resolves a relative path of the walk-through: repository files from
// the repository, the user's own files (key.json) from the working dir.
func (w *walk) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	if _, err := os.Stat(filepath.Join(repoRoot, p)); err == nil {
		return filepath.Join(repoRoot, p)
	}
	return filepath.Join(w.workdir, p)
}

func (w *walk) fixPaths(args []string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		for _, flag := range []string{"--credentials-file", "--wif-credential-config", "-f"} {
			if a == flag && i+1 < len(out) {
				out[i+1] = w.path(out[i+1])
			}
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				out[i] = flag + "=" + w.path(v)
			}
		}
	}
	return out
}

// run executes one command of the walk-through.
func (w *walk) run(t *testing.T, step, cmd string) {
	t.Helper()
	args := w.fixPaths(w.expand(cmd))
	var stdout, stderr bytes.Buffer
	code := 0
	switch {
	case args[0] == "export":
		for _, kv := range args[1:] {
			k, v, _ := strings.Cut(kv, "=")
			if _, fixed := w.vars[k]; !fixed {
				w.vars[k] = v
			}
		}
		return
	case args[0] == "make" && strings.HasPrefix(args[1], "podvm"), args[0] == "docker":
		// make podvm-binaries and make podvm: test/podvm/docs-test.sh runs them.
		t.Logf("%s: not run here: %s", step, cmd)
		return
	case args[0] == "make" && args[1] == "image":
		c := exec.Command("make", "-n", "-C", repoRoot, args[1], args[2])
		out, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "scripts/upstream-patch/image.sh \""+w.vars["IMAGE"]+"\"") {
			t.Errorf("%s: make -n %v: %v\n%s", step, args[1:], err, out)
		}
		return
	case strings.Contains(cmd, "gce-pack.sh"):
		w.uploadImage(t, args)
		return
	case args[0] == "gcp-t4":
		main := map[string]func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) int{
			"install": func(c context.Context, a []string, o, e *bytes.Buffer) int {
				return Main(c, append([]string{"--kubeconfig=" + w.e.cp.Kubeconfig, "--timeout=60s"}, a...), o, e, nil)
			},
			"uninstall": func(c context.Context, a []string, o, e *bytes.Buffer) int {
				return MainUninstall(c, append([]string{"--kubeconfig=" + w.e.cp.Kubeconfig, "--timeout=60s"}, a...), o, e, nil)
			},
			"preflight": func(c context.Context, a []string, o, e *bytes.Buffer) int { return preflight.Main(c, a, o, e, nil) },
			"plan":      func(c context.Context, a []string, o, e *bytes.Buffer) int { return plan.Main(c, a, o, e, nil) },
		}[args[1]]
		if main == nil {
			t.Fatalf("%s: gcp-t4 %s is not a command the walk-through test knows", step, args[1])
		}
		if args[1] == "preflight" {
			w.preflightUntilClean(t, args[2:], main)
			return
		}
		code = main(t.Context(), args[2:], &stdout, &stderr)
	case args[0] == "kubectl" && (args[1] == "apply" || args[1] == "delete") && args[2] == "-f":
		w.kubectl(t, args[1], args[3])
	default:
		t.Fatalf("%s: the walk-through test cannot run %q; teach it, or move the command out of the step", step, cmd)
	}
	if code != 0 {
		t.Fatalf("%s: %s: exit %d\n%s\n%s", step, cmd, code, stdout.String(), stderr.String())
	}
	w.out[step] += stdout.String() + stderr.String()
}

// uploadImage stands in for gce-pack.sh's upload: the image it names, with
// the guest OS features the script passes to `gcloud compute images
// create`, read from the script.
func (w *walk) uploadImage(t *testing.T, args []string) {
	t.Helper()
	env := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "GCE_") {
			env[k] = v
		}
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "podvm/scripts/gce-pack.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^features=(\S+)$`).FindSubmatch(script)
	if m == nil || env["GCE_IMAGE_NAME"] == "" || env["GCE_PROJECT"] != w.fake.Project() {
		t.Fatalf("podvm: gce-pack.sh invocation %v / features %q", env, m)
	}
	img := &computepb.Image{Name: proto.String(env["GCE_IMAGE_NAME"]), Family: proto.String("caa-gcp-t4-podvm"), DiskSizeGb: proto.Int64(20)}
	for _, f := range strings.Split(string(m[1]), ",") {
		img.GuestOsFeatures = append(img.GuestOsFeatures, &computepb.GuestOsFeature{Type: proto.String(f)})
	}
	w.fake.AddImage(w.fake.Project(), img)
}

// kubectl applies or deletes a manifest through the API server.
func (w *walk) kubectl(t *testing.T, verb, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := kio.FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClients(w.e.cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		js, _ := n.MarshalJSON()
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		if u.GetNamespace() == "" {
			u.SetNamespace("default")
		}
		ri, err := c.cluster.resource(refOf(u))
		if err != nil {
			t.Fatal(err)
		}
		if verb == "apply" {
			_, err = ri.Create(t.Context(), u, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
		} else {
			err = ri.Delete(t.Context(), u.GetName(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		if err != nil && !(verb == "delete" && apierrors.IsNotFound(err)) {
			t.Fatalf("kubectl %s -f %s: %s: %v", verb, file, refOf(u), err)
		}
	}
}

var fixRE = regexp.MustCompile(`gcloud compute (firewall-rules create|routers create|routers nats create|networks subnets update) (\S+)((?: --[a-z-]+(?:=\S+)?)*)`)

// preflightUntilClean runs preflight, applies every fix it prints that
// the emulator can take (firewall rules, Cloud Router with NAT, Private
// Google Access), and runs it again, until nothing fails: the fixes must
// be right, not just printed.
func (w *walk) preflightUntilClean(t *testing.T, args []string, main func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) int) {
	t.Helper()
	for round := range 3 {
		var stdout, stderr bytes.Buffer
		code := main(t.Context(), append(args, "-o", "table"), &stdout, &stderr)
		w.out["preflight"] = stdout.String()
		if code == 0 {
			return
		}
		if round == 2 {
			break
		}
		done := map[string]bool{}
		for _, m := range fixRE.FindAllStringSubmatch(stdout.String(), -1) {
			if key := m[1] + " " + m[2]; !done[key] { // several checks print the same fix
				done[key] = true
				w.applyFix(t, m[1], m[2], m[3])
			}
		}
	}
	t.Fatalf("preflight still fails after applying its own fixes:\n%s", w.out["preflight"])
}

func flagsOf(s string) map[string]string {
	f := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, _ := strings.Cut(strings.TrimPrefix(kv, "--"), "=")
		f[k] = v
	}
	return f
}

func (w *walk) applyFix(t *testing.T, what, name, rest string) {
	t.Helper()
	f := flagsOf(rest)
	switch what {
	case "firewall-rules create":
		fw := &computepb.Firewall{Name: proto.String(name), Network: proto.String("global/networks/" + f["network"]), Direction: proto.String(f["direction"])}
		for _, a := range strings.Split(f["allow"], ",") {
			p, port, _ := strings.Cut(a, ":")
			al := &computepb.Allowed{IPProtocol: proto.String(p)}
			if port != "" {
				al.Ports = []string{port}
			}
			fw.Allowed = append(fw.Allowed, al)
		}
		split := func(k string) []string {
			if f[k] == "" {
				return nil
			}
			return strings.Split(f[k], ",")
		}
		fw.SourceRanges, fw.SourceTags, fw.TargetTags = split("source-ranges"), split("source-tags"), split("target-tags")
		if err := w.fake.AddFirewall(fw); err != nil {
			t.Fatalf("preflight's fix %s: %v", name, err)
		}
	case "routers create":
		w.vars["_router"] = name
	case "routers nats create":
		r := &computepb.Router{Name: proto.String(f["router"]), Network: proto.String("global/networks/default"), Nats: []*computepb.RouterNat{{
			Name: proto.String(name), NatIpAllocateOption: proto.String("AUTO_ONLY"), SourceSubnetworkIpRangesToNat: proto.String("LIST_OF_SUBNETWORKS"),
			Subnetworks: []*computepb.RouterNatSubnetworkToNat{{Name: proto.String("regions/" + f["region"] + "/subnetworks/" + f["nat-custom-subnet-ip-ranges"])}},
		}}}
		if err := w.fake.AddRouter(f["region"], r); err != nil {
			t.Fatalf("preflight's NAT fix: %v", err)
		}
	case "networks subnets update":
		if _, ok := f["enable-private-ip-google-access"]; ok {
			w.fake.SetPrivateGoogleAccess(f["region"], true)
		}
	}
}

// nodeVM creates a GKE node's VM, with its network tag, on the emulator.
func nodeVM(t *testing.T, fake *gcefake.Server, name, tag string) string {
	t.Helper()
	c, err := compute.NewInstancesRESTClient(context.Background(), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	op, err := c.Insert(context.Background(), &computepb.InsertInstanceRequest{Project: fake.Project(), Zone: "us-central1-a", InstanceResource: &computepb.Instance{
		Name: proto.String(name), MachineType: proto.String("zones/us-central1-a/machineTypes/n1-standard-4"), Tags: &computepb.Tags{Items: []string{tag}},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/" + fake.Project() + "/global/images/podvm-t4")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"), Subnetwork: proto.String("regions/us-central1/subnetworks/default")}},
	}})
	if err == nil {
		err = op.Wait(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	inst, err := c.Get(context.Background(), &computepb.GetInstanceRequest{Project: fake.Project(), Zone: "us-central1-a", Instance: name})
	if err != nil {
		t.Fatal(err)
	}
	return inst.GetNetworkInterfaces()[0].GetNetworkIP()
}

// testWalkthrough runs docs/install.md from zero on a hardened project
// (GCE's defaults without default-allow-internal) and a GKE-like cluster
// with kata-deploy's RuntimeClass.
func (e *env) testWalkthrough(t *testing.T) {
	ctx := t.Context()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	if err := fake.DeleteFirewall("default-allow-internal"); err != nil {
		t.Fatal(err)
	}
	ip := nodeVM(t, fake, "gke-c-peer-1", "gke-c-1234-node")
	n := gkeNode("gke-c-peer-1", "peer", "ubuntu", true)
	n.Spec.ProviderID = "gce://" + fake.Project() + "/us-central1-a/gke-c-peer-1"
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	n.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc"}, {Name: "kata-remote"}}
	e.setNodes(t, n)
	// What kata-deploy's chart creates (a prerequisite of the page).
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: runtimeClassName}, Handler: runtimeClassName}
	mustCreate(t, func() error {
		_, err := e.cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = e.cs.NodeV1().RuntimeClasses().Delete(context.Background(), runtimeClassName, metav1.DeleteOptions{})
	})
	for _, k := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_CREDENTIALS", "KUBECONFIG", "GCP_SERVICE_ACCOUNT", "GOOGLE_APPLICATION_CREDENTIALS"} {
		t.Setenv(k, "")
	}
	t.Setenv("GCP_ENDPOINT", fake.URL())
	// The ServiceAccount controller's part: every namespace has "default",
	// which admission needs for a pod.
	if _, err := e.cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	w := &walk{e: e, fake: fake, workdir: t.TempDir(), out: map[string]string{},
		vars: map[string]string{"PROJECT": fake.Project(), "IMAGE": "ghcr.io/example/caa-gcp-t4:v1", "BUCKET": "gs://test-bucket"}}
	if err := os.WriteFile(filepath.Join(w.workdir, "key.json"), testKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	names, steps := docSteps(t)
	want := []string{"env", "podvm", "image", "preflight", "install", "gpu-pod", "upgrade", "uninstall"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("docs/install.md steps %v, want %v", names, want)
	}
	for _, step := range names {
		if len(steps[step]) == 0 {
			t.Fatalf("step %s has no commands", step)
		}
		for _, cmd := range steps[step] {
			w.run(t, step, cmd)
		}
		switch step {
		case "preflight":
			mustContain(t, "preflight", w.out[step], "0 failed", "pass  firewall tcp:15150 nodes→podVMs", "allowed by caa-nodes-to-podvms", "image podvm-t4")
		case "install":
			mustContain(t, "install", w.out[step], "settings (new install):", "service account key for caa@p.iam.gserviceaccount.com", "rollout done")
			ds := e.daemonSet(t)
			if img := container(ds, "cloud-api-adaptor-con").Image; img != w.vars["IMAGE"] {
				t.Errorf("image %s", img)
			}
		case "gpu-pod":
			mustContain(t, "plan", w.out[step], "n1-standard-4", "nvidia-tesla-t4")
			if _, err := e.cs.CoreV1().Pods("default").Get(ctx, "cuda-vectoradd", metav1.GetOptions{}); err != nil {
				t.Fatalf("the example pod: %v", err)
			}
			w.createPlannedPodVM(t)
		case "upgrade":
			mustContain(t, "upgrade", w.out[step], `~ GCP_ZONES: "" → "auto"`, "dry run: the API server accepted", "keeping the service account key already installed", "rollout done")
			noKeyIn(t, "upgrade", w.out[step])
			if cm := e.configMap(t, Namespace); cm["GCP_ZONES"] != "auto" || cm["GCP_PROJECT_ID"] != fake.Project() {
				t.Errorf("peer-pods-cm after the upgrade %v", cm)
			}
		case "uninstall":
			e.assertNothingLeft(t)
		}
	}
}

// createPlannedPodVM creates, with the installed settings, the podVM CAA
// would create for the example pod (the webhook's annotations: 2 vCPU,
// 8 GiB, one GPU), on the emulator.
func (w *walk) createPlannedPodVM(t *testing.T) {
	t.Helper()
	cm := w.e.configMap(t, Namespace)
	cfg, err := gcpt4.ConfigFromEnv(func(k string) (string, bool) { v, ok := cm[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Endpoint = w.fake.URL()
	p, err := gcpt4.NewProvider(t.Context(), cfg, nil, w.fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Teardown()
	cc := &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: "{}"}}}
	inst, err := p.CreateInstance(t.Context(), "cuda-vectoradd", strings.Repeat("c", 64), cc, provider.InstanceTypeSpec{GPUs: 1, VCPUs: 2, Memory: 8192})
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range w.fake.Instances() {
		if vm.GetName() != inst.Name {
			continue
		}
		if !strings.HasSuffix(vm.GetMachineType(), "/n1-standard-4") || len(vm.GetGuestAccelerators()) != 1 ||
			!strings.HasSuffix(vm.GetGuestAccelerators()[0].GetAcceleratorType(), "/nvidia-tesla-t4") ||
			len(vm.GetNetworkInterfaces()[0].GetAccessConfigs()) != 0 || !strings.Contains(strings.Join(vm.GetTags().GetItems(), ","), gcpt4.DefaultNetworkTag) {
			t.Errorf("podVM %s: %s %v tags %v access %v", vm.GetName(), vm.GetMachineType(), vm.GetGuestAccelerators(), vm.GetTags().GetItems(), vm.GetNetworkInterfaces()[0].GetAccessConfigs())
		}
	}
	if err := p.DeleteInstance(t.Context(), inst.ID); err != nil {
		t.Fatal(err)
	}
}
