package install

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeletstandin"
	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/preflight"
	"github.com/caa-gcp-t4/gcp-t4/internal/testkey"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

const repoRoot = "../../.."

// docSteps reads docs/install.md's `<!-- step: NAME -->` blocks, as
// every test that runs a guide reads one (doccmd).
func docSteps(t *testing.T) (names []string, steps map[string][]doccmd.Command) {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	names, steps = doccmd.Marked(blocks, "step")
	return names, steps
}

// walk holds what the steps share.
type walk struct {
	e    *env
	fake *gcefake.Server
	vars map[string]string
	// home is the user's home directory: ~ in a command, where
	// ~/.kube/config is the control plane's kubeconfig.
	home    string
	workdir string
	out     map[string]string // step -> what its commands printed
	// roles and granted are the IAM grants preflight's fixes made: custom
	// role -> permissions, member -> the permissions its bindings give.
	roles, granted map[string][]string
	// preflightRuns is each preflight command's output, first and last
	// round.
	preflightRuns []preflightRun
	// keyFile is where the identity step wrote CAA's key.
	keyFile string
}

// preflightRun is one preflight command's output: its first round's
// table and stderr, and its last round's table.
type preflightRun struct{ first, firstErr, last string }

// viewerPermissions are what the person walking the guide holds: a
// project viewer (roles/viewer grants these gets and lists), not an owner,
// so none of the provider's create, delete or use permissions.
var viewerPermissions = []string{"compute.firewalls.list", "compute.networks.get", "compute.projects.get", "compute.regions.get",
	"compute.routers.list", "compute.subnetworks.get", "compute.images.get", "compute.instances.get", "compute.instances.list",
	"compute.acceleratorTypes.get", "compute.acceleratorTypes.list", "compute.instanceTemplates.get", "compute.zoneOperations.get",
	"resourcemanager.projects.get"}

// keyFor is a service account key for email, as `gcloud iam
// service-accounts keys create` writes one, with a key made for the test.
func keyFor(t *testing.T, email string) []byte {
	t.Helper()
	b, err := testkey.ServiceAccount(email, "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expand splits a command into words as the shell would, with the
// walk's variables and home; a variable the guide never set fails the
// test, as `set -u` would.
func (w *walk) expand(t *testing.T, step, cmd string) []string {
	t.Helper()
	args, err := doccmd.Fields(cmd, func(k string) (string, bool) {
		if k == "HOME" {
			return w.home, true
		}
		v, ok := w.vars[k]
		return v, ok
	})
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	return args
}

// newHome is a user's home whose ~/.kube/config is the control plane's,
// as `gcloud container clusters get-credentials` leaves it.
func newHome(t *testing.T, e *env) string {
	t.Helper()
	home := t.TempDir()
	b, err := os.ReadFile(e.cp.Kubeconfig)
	if err == nil {
		err = os.MkdirAll(filepath.Join(home, ".kube"), 0o700)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(home, ".kube", "config"), b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	return home
}

// path resolves a relative path of the walk-through: repository files from
// the repository, the user's own relative files from the working dir;
// an absolute path (the key under $KEYDIR) as it is.
func (w *walk) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	if _, err := os.Stat(filepath.Join(repoRoot, p)); err == nil {
		return filepath.Join(repoRoot, p)
	}
	return filepath.Join(w.workdir, p)
}

// userPath is a file the user creates: relative to the working dir.
func (w *walk) userPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(w.workdir, p)
}

// keyLeftTheRepository checks where the identity step put CAA's key: in no
// git work tree (not the repository's, where a `git add -A` would commit
// it), readable by the user alone, and accepted by install's own check.
func (w *walk) keyLeftTheRepository(t *testing.T) {
	t.Helper()
	if w.keyFile == "" {
		t.Fatal("identity: no command wrote CAA's key")
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if rel, err := filepath.Rel(root, w.keyFile); err == nil && !strings.HasPrefix(rel, "..") {
		t.Errorf("identity: the key is written inside the repository (%s): a `git add -A` there commits it", rel)
	}
	if !strings.HasPrefix(w.keyFile, w.home+string(filepath.Separator)) {
		t.Errorf("identity: the key %s is not under the user's home (%s)", w.keyFile, w.home)
	}
	for p, want := range map[string]os.FileMode{w.keyFile: 0o600, filepath.Dir(w.keyFile): 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("identity: %s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
	if err := refuseCommittableKey(t.Context(), "credentials-file", w.keyFile, nil); err != nil {
		t.Errorf("identity: install refuses the key where the guide puts it: %v", err)
	}
}

func (w *walk) fixPaths(args []string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		for _, flag := range []string{"--credentials-file", "-credentials-file", "--wif-credential-config", "-f", "-k"} {
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
	args := w.fixPaths(w.expand(t, step, cmd))
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
	case args[0] == "make" && strings.HasPrefix(args[1], "podvm"), args[0] == "docker", strings.Join(args, " ") == "gcloud auth application-default login":
		// make podvm-binaries and make podvm: test/podvm/docs-test.sh runs them.
		t.Logf("%s: not run here: %s", step, cmd)
		return
	case len(args) >= 5 && strings.Join(args[:4], " ") == "gcloud iam service-accounts create":
		// CAA's own account: nothing on the emulator models it beyond the
		// grants below.
		t.Logf("%s: service account %s", step, args[4])
		return
	case len(args) == 7 && strings.Join(args[:5], " ") == "gcloud iam service-accounts keys create":
		email, ok := strings.CutPrefix(args[6], "--iam-account=")
		if !ok || email != w.vars["CAA_SA"] {
			t.Fatalf("%s: %s: want --iam-account=$CAA_SA", step, cmd)
		}
		// As gcloud writes it: private to the user, into a directory that
		// must exist.
		if err := os.WriteFile(w.userPath(args[5]), keyFor(t, email), 0o600); err != nil {
			t.Fatalf("%s: %s: %v", step, cmd, err)
		}
		w.keyFile = w.userPath(args[5])
		return
	case len(args) == 5 && strings.Join(args[:4], " ") == "mkdir -p -m 700":
		if err := os.MkdirAll(w.userPath(args[4]), 0o700); err != nil {
			t.Fatal(err)
		}
		// -m sets the last directory's mode whatever the umask.
		if err := os.Chmod(w.userPath(args[4]), 0o700); err != nil {
			t.Fatal(err)
		}
		return
	case len(args) == 3 && args[0] == "chmod" && args[1] == "600":
		if err := os.Chmod(w.userPath(args[2]), 0o600); err != nil {
			t.Fatalf("%s: %s: %v", step, cmd, err)
		}
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
				return Main(c, append([]string{"--kubeconfig=" + w.e.cp.Kubeconfig, "--timeout=10m"}, a...), o, e, nil)
			},
			"uninstall": func(c context.Context, a []string, o, e *bytes.Buffer) int {
				return w.e.uninstallMain(c, append([]string{"--kubeconfig=" + w.e.cp.Kubeconfig, "--timeout=10m"}, a...), o, e, nil)
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
	// The script wants the bucket as a URL; the guides' variables hold the
	// bucket's name.
	if m == nil || env["GCE_IMAGE_NAME"] == "" || env["GCE_PROJECT"] != w.fake.Project() || !strings.HasPrefix(env["GCE_BUCKET"], "gs://") || strings.HasPrefix(env["GCE_BUCKET"], "gs://gs://") {
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
	c := w.e.installer(t)
	for _, n := range nodes {
		js, _ := n.MarshalJSON()
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		if u.GetNamespace() == "" {
			u.SetNamespace("default")
		}
		ri, err := c.resource(refOf(u))
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

var fixRE = regexp.MustCompile(`gcloud compute (firewall-rules create|routers create|routers nats create|networks subnets update|networks update) (\S+)((?: --[a-z-]+(?:=\S+)?)*)`)

// preflightUntilClean runs preflight, applies every fix it prints that
// the emulator can take (firewall rules, Cloud Router with NAT, Private
// Google Access), and runs it again, until nothing fails: the fixes must
// be right, not just printed.
func (w *walk) preflightUntilClean(t *testing.T, args []string, main func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) int) {
	t.Helper()
	// Who runs it: CAA's account with its key (the emulator's caller then
	// holds what the grants preflight printed gave it), else the person
	// walking the guide, a project viewer.
	caller := viewerPermissions
	for i, a := range args {
		if a == "-credentials-file" && i+1 < len(args) {
			var key struct {
				ClientEmail string `json:"client_email"`
			}
			b, err := os.ReadFile(args[i+1])
			if err != nil || json.Unmarshal(b, &key) != nil {
				t.Fatalf("preflight -credentials-file %s: %v", args[i+1], err)
			}
			caller = append(slices.Clone(viewerPermissions), w.granted["serviceAccount:"+key.ClientEmail]...)
		}
	}
	w.fake.SetPermissions(caller...)
	var run preflightRun
	for round := range 3 {
		var stdout, stderr bytes.Buffer
		code := main(t.Context(), append(args, "-o", "table"), &stdout, &stderr)
		if round == 0 {
			run.first, run.firstErr = stdout.String(), stderr.String()
		}
		run.last = stdout.String()
		w.out["preflight"] = stdout.String()
		w.applyGrant(t, stdout.String())
		if code == 0 {
			w.preflightRuns = append(w.preflightRuns, run)
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

var (
	roleCreateRE  = regexp.MustCompile(`gcloud iam roles create (\S+) --project=(\S+) --title="[^"]*" --stage=GA --permissions=(\S+)`)
	roleBindingRE = regexp.MustCompile(`gcloud projects add-iam-policy-binding (\S+) --member=(\S+) --role=projects/(\S+)/roles/(\S+) --condition='expression=([^,]+),title=`)
)

// applyGrant does what the grant preflight prints does, as IAM would:
// the custom role with its permissions, bound to the member (with the
// podvm-* condition, which the emulator's project-level testIamPermissions
// does not evaluate).
func (w *walk) applyGrant(t *testing.T, out string) {
	t.Helper()
	for _, m := range roleCreateRE.FindAllStringSubmatch(out, -1) {
		if m[2] != w.fake.Project() {
			t.Fatalf("grant creates role %s in project %s", m[1], m[2])
		}
		w.roles[m[1]] = strings.Split(m[3], ",")
	}
	for _, m := range roleBindingRE.FindAllStringSubmatch(out, -1) {
		perms, ok := w.roles[m[4]]
		if !ok || m[1] != w.fake.Project() || m[3] != w.fake.Project() {
			t.Fatalf("grant binds role %s/%s that it did not create", m[3], m[4])
		}
		if m[5] != preflight.PodVMCondition {
			t.Errorf("binding condition %q, want %q", m[5], preflight.PodVMCondition)
		}
		w.granted[m[2]] = perms
	}
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
		if p, err := strconv.Atoi(f["priority"]); err == nil {
			fw.Priority = proto.Int32(int32(p))
		}
		if f["action"] == "DENY" {
			// preflight's podVM↔podVM and catch-all denies.
			for _, a := range strings.Split(f["rules"], ",") {
				p, port, _ := strings.Cut(a, ":")
				fw.Denied = append(fw.Denied, &computepb.Denied{IPProtocol: proto.String(p), Ports: []string{port}})
			}
		}
		for _, a := range strings.Split(f["allow"], ",") {
			if f["action"] == "DENY" {
				break
			}
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
	case "networks update":
		mtu, err := strconv.Atoi(f["mtu"])
		if name != "default" || err != nil {
			t.Fatalf("preflight's MTU fix: network %s --mtu=%s", name, f["mtu"])
		}
		w.fake.SetNetworkMTU(int32(mtu))
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
	// The node's kubelet, which preflight reads through the node proxy:
	// a GKE node pool's 2m (which it cannot raise), as preflight's
	// -max-image-pull defaults to. At a Hostname address, which the API
	// server prefers, so the firewall checks keep the VM's InternalIP.
	if err := kubeletstandin.Start(t, "2m0s").Attach(ctx, e.cs, n.Name, corev1.NodeHostName); err != nil {
		t.Fatal(err)
	}
	// What kata-deploy's chart creates (a prerequisite of the page).
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: RuntimeClassName}, Handler: RuntimeClassName}
	mustCreate(t, func() error {
		_, err := e.cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = e.cs.NodeV1().RuntimeClasses().Delete(context.Background(), RuntimeClassName, metav1.DeleteOptions{})
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

	// The guide's own IMAGE, CAA_SA and the rest; only the project and
	// bucket are the emulator's.
	w := &walk{e: e, fake: fake, home: newHome(t, e), workdir: t.TempDir(), out: map[string]string{}, roles: map[string][]string{}, granted: map[string][]string{},
		vars: map[string]string{"PROJECT": fake.Project(), "BUCKET": "test-bucket"}}
	names, steps := docSteps(t)
	want := []string{"env", "podvm", "image", "identity", "preflight", "install", "gpu-pod", "upgrade", "uninstall"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("docs/install.md steps %v, want %v", names, want)
	}
	for _, step := range names {
		if len(steps[step]) == 0 {
			t.Fatalf("step %s has no commands", step)
		}
		if step == "uninstall" {
			w.reaperPodTerminating(t)
		}
		for _, cmd := range steps[step] {
			w.run(t, step, cmd.Text)
		}
		member := "serviceAccount:" + w.vars["CAA_SA"]
		switch step {
		case "env":
			if w.vars["IMAGE"] == "" || w.vars["CAA_SA"] != "caa@"+fake.Project()+".iam.gserviceaccount.com" {
				t.Fatalf("env: IMAGE %q CAA_SA %q", w.vars["IMAGE"], w.vars["CAA_SA"])
			}
		case "identity":
			w.keyLeftTheRepository(t)
		case "preflight":
			if len(w.preflightRuns) != 2 {
				t.Fatalf("preflight ran %d times, want the guide's two commands", len(w.preflightRuns))
			}
			// As the person (a viewer): the MTU fails with its fix, and the
			// grant for CAA's account is printed, never "pass" for it.
			first, byKey := w.preflightRuns[0], w.preflightRuns[1]
			mustContain(t, "preflight as the user, first round", first.first, "fail  mtu default", "VPC MTU 1460 is too small for the pod tunnel",
				"gcloud compute networks update default --project="+fake.Project()+" --mtu=1500",
				"warn  permissions "+member, "not checked: testIamPermissions answers only for the caller",
				"gcloud iam roles create caaGcpT4 --project="+fake.Project(), "--member="+member+" --role=projects/"+fake.Project()+"/roles/caaGcpT4")
			if strings.Contains(first.last, "pass  permissions") {
				t.Errorf("preflight run by someone else reported CAA's permissions as passing:\n%s", first.last)
			}
			mustContain(t, "preflight as the user, after its fixes", first.last, "0 failed", "pass  mtu default", "pass  firewall tcp:15150 nodes→podVMs", "allowed by caa-nodes-to-podvms", "image podvm-t4")
			if got := w.granted[member]; !slices.Equal(got, preflight.ProviderPermissions(gcpt4.Config{ImageName: "podvm-t4", Subnetwork: "default", NetworkTags: []string{gcpt4.DefaultNetworkTag}}, nil)) {
				t.Errorf("the printed grant gives %s %v", member, got)
			}
			// With CAA's key, after the grant: CAA's own permissions pass.
			mustContain(t, "preflight with CAA's key", byKey.last, "pass  permissions "+member, member+" (the credentials preflight runs with) holds the", "pass  mtu default", "0 failed")
		case "install":
			mustContain(t, "install", w.out[step], "settings (new install):", "service account key for "+w.vars["CAA_SA"], "rollout done",
				"cost guard: on (default for a new install")
			// The cost guard is on without a flag: the example pod of the
			// next step is admitted under it (1 GPU, the default limit).
			for _, name := range []string{CostGuardPolicy, CostGuardAnnotationsPolicy} {
				if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
					t.Errorf("the install step left out the cost guard: binding %s: %v", name, err)
				}
			}
			ds := e.daemonSet(t)
			if img := container(ds, "cloud-api-adaptor-con").Image; img != w.vars["IMAGE"] {
				t.Errorf("image %s", img)
			}
			ks, err := e.cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if id := e.configMap(t, Namespace)[ClusterIDKey]; id == "" || id != string(ks.UID) {
				t.Errorf("GCP_CLUSTER_ID %q, want kube-system's UID %s", id, ks.UID)
			}
			w.vars["_reaperHash"] = w.reaperHash(t)
			e.assertLiveKeyAsFile(t)
		case "gpu-pod":
			mustContain(t, "plan", w.out[step], "n1-standard-4", "nvidia-tesla-t4")
			if _, err := e.cs.CoreV1().Pods("default").Get(ctx, "cuda-vectoradd", metav1.GetOptions{}); err != nil {
				t.Fatalf("the example pod: %v", err)
			}
			w.createPlannedPodVM(t)
			// The scheduler's and the kubelet's part: the pod ran on the
			// peer-pods node and completed, as the guide says, so the
			// next step's roll of CAA restarts no peer pod.
			w.podCompleted(t, "default", "cuda-vectoradd", n.Name)
		case "upgrade":
			mustContain(t, "upgrade", w.out[step], `~ GCP_ZONES: "" → "auto"`, "dry run: the API server accepted", "keeping the service account key already installed", "rollout done",
				"would configure ConfigMap/"+Namespace+"/peer-pods-cm", "would configure DaemonSet/"+Namespace+"/"+DaemonSetName, "would configure Deployment/"+Namespace+"/"+ReaperName,
				"CAA restarts on every node (its pod template changes); no kata-remote pod is running or starting, so no peer pod restarts")
			if strings.Contains(w.out[step], "(0 would change)") {
				t.Errorf("the dry run reports nothing would change:\n%s", w.out[step])
			}
			if h := w.reaperHash(t); h == "" || h == w.vars["_reaperHash"] {
				t.Errorf("reaper config hash %q → %q: a settings change must roll the reaper", w.vars["_reaperHash"], h)
			}
			noKeyIn(t, "upgrade", w.out[step])
			e.assertLiveKeyAsFile(t)
			if cm := e.configMap(t, Namespace); cm["GCP_ZONES"] != "auto" || cm["GCP_PROJECT_ID"] != fake.Project() {
				t.Errorf("peer-pods-cm after the upgrade %v", cm)
			}
		case "uninstall":
			e.assertNothingLeft(t)
			mustContain(t, "uninstall", w.out[step], "deleted Namespace/"+Namespace)
			if _, err := e.cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("namespace %s after uninstall: %v; want it gone", Namespace, err)
			}
		}
		t.Logf("step %s:\n%s", step, strings.TrimSpace(w.out[step]))
	}
}

// podCompleted binds the pod to node and reports it Succeeded.
func (w *walk) podCompleted(t *testing.T, ns, name, node string) {
	t.Helper()
	ctx := t.Context()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := w.e.cs.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind pod %s/%s to %s: %v", ns, name, node, err)
	}
	p, err := w.e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := w.e.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s/%s status: %v", ns, name, err)
	}
}

// reaperHash is the reaper Deployment's config hash.
func (w *walk) reaperHash(t *testing.T) string {
	t.Helper()
	d, err := w.e.cs.AppsV1().Deployments(Namespace).Get(t.Context(), ReaperName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Annotations[ConfigHashAnnotation]
}

// reaperPodTerminating is the ReplicaSet controller's and the kubelet's
// part: the reaper Deployment's pod, on a node, deleted and still in its
// grace period (no kubelet confirms it) when uninstall looks at the
// namespace.
func (w *walk) reaperPodTerminating(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	rs := ReaperName + "-5d8f9c7b6"
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rs + "-x2k4q", Namespace: Namespace, Labels: map[string]string{"app": ReaperName},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: "0b0b0b0b-0000-4000-8000-000000000003", Controller: new(bool)}}},
		Spec: corev1.PodSpec{NodeName: "gke-c-peer-1", ServiceAccountName: ReaperName, Containers: []corev1.Container{{Name: "reaper", Image: w.vars["IMAGE"]}}}}
	*p.OwnerReferences[0].Controller = true
	if _, err := w.e.cs.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grace := int64(30)
	if err := w.e.cs.CoreV1().Pods(Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	got, err := w.e.cs.CoreV1().Pods(Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("the reaper's pod is not terminating: %v", err)
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
