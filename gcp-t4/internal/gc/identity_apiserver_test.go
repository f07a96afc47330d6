package gc

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

const caaNamespace = "confidential-containers-system"

// applyRBAC creates the ServiceAccounts, ClusterRoles and bindings of a
// committed manifest as kubectl apply would, in caaNamespace.
func (k *kube) applyRBAC(t *testing.T, rel string) {
	t.Helper()
	k.namespace(t, caaNamespace)
	data, err := os.ReadFile(filepath.Join("..", "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvr := map[string]schema.GroupVersionResource{
			"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
			"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
			"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
			"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
			"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		}[obj.GetKind()]
		if gvr.Resource == "" {
			t.Fatalf("%s: unexpected kind %s", rel, obj.GetKind())
		}
		var err error
		switch obj.GetKind() {
		case "ClusterRole", "ClusterRoleBinding":
			_, err = k.dyn.Resource(gvr).Create(t.Context(), obj, metav1.CreateOptions{})
		default:
			obj.SetNamespace(caaNamespace)
			_, err = k.dyn.Resource(gvr).Namespace(caaNamespace).Create(t.Context(), obj, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: creating %s %s: %v", rel, obj.GetKind(), obj.GetName(), err)
		}
	}
}

// podAPI is what the kubelet mounts for a pod of ServiceAccount sa: its
// token (a TokenRequest, as the projected volume gets) and the cluster's CA.
func (k *kube) podAPI(t *testing.T, sa string) gcpt4.ClusterAPI {
	t.Helper()
	tok, err := k.cs.CoreV1().ServiceAccounts(caaNamespace).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return gcpt4.ClusterAPI{URL: k.cp.URL, Token: tok.Status.Token, CAPEM: k.cp.Config().CAData, Namespace: caaNamespace}
}

// startCAA is CAA's start path with gcp-t4: the Manager in upstream's
// provider table parses the DaemonSet's settings (peer-pods-cm) and
// NewProvider runs with the pod's own cluster API.
func startCAA(t *testing.T, fake *gcefake.Server, clusterID string, api gcpt4.ClusterAPI, extra ...string) (*gcpt4.Provider, error) {
	t.Helper()
	var m gcpt4.Manager
	fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse(append([]string{"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-network", "global/networks/default", "-subnetwork", "default",
		"-cluster-id", clusterID, "-node-name", "worker-b"}, extra...)); err != nil {
		t.Fatal(err)
	}
	p, err := m.Start(t.Context(), func() (gcpt4.ClusterAPI, error) { return api, nil })
	if p != nil {
		t.Cleanup(func() { _ = p.Teardown() })
	}
	return p, err
}

// printOutcome is the acceptance line of the identity scenarios.
func printOutcome(t *testing.T, name string, live []string, fake *gcefake.Server) int {
	t.Helper()
	have := map[string]bool{}
	for _, vm := range fake.Instances() {
		have[gcpt4.InstanceID("us-central1-a", vm.GetName())] = true
	}
	deleted := 0
	for _, id := range live {
		if !have[id] {
			deleted++
			t.Errorf("%s: live VM %s was deleted", name, id)
		}
	}
	t.Logf("reaper scenario %q: live VMs deleted %d (of %d)", name, deleted, len(live))
	return deleted
}

// TestScenarioCopiedClusterID: two clusters, one project, B's
// peer-pods-cm copied from A. B's CAA (the provider's start path, with
// B's own ServiceAccount and the RBAC install/base grants) refuses to
// start and says the fix; started with the fix, its VMs survive both
// reapers. Before the start-time check, B created its VMs under A's ID
// and A's reaper deleted every one of them.
func TestScenarioCopiedClusterID(t *testing.T) {
	a, b := startKube(t), startKube(t)
	fake := gcefake.New()
	defer fake.Close()
	// A's own sandbox, live.
	a.pod(t, "team-a", "train-0")
	n := a.startNode(t, fake)
	n.run(t, sidA, "team-a", "train-0")
	live := []string{vmOfSandbox(fake, sidA)}

	b.applyRBAC(t, "install/base/rbac.yaml")
	api := b.podAPI(t, "cloud-api-adaptor")
	inserts := fake.CountCalls("instances.insert")
	caa, err := startCAA(t, fake, a.uid, api) // the copied config
	switch {
	case errors.Is(err, gcpt4.ErrForeignClusterID):
		fix := fmt.Sprintf("set GCP_CLUSTER_ID=%s in peer-pods-cm", b.uid)
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("the refusal does not give the fix %s: %v", fix, err)
		}
		t.Logf("B's CAA with A's ID: %v", err)
		if n := fake.CountCalls("instances.insert") - inserts; n != 0 {
			t.Errorf("the refused start inserted %d VMs", n)
		}
		if caa, err = startCAA(t, fake, b.uid, api); err != nil {
			t.Fatalf("B's CAA with its own ID: %v", err)
		}
	case err != nil:
		t.Fatalf("B's CAA with A's ID failed otherwise: %v", err)
	default:
		t.Errorf("B's CAA started with cluster A's ID %s", a.uid)
	}
	for i := range 3 {
		pod := fmt.Sprintf("serve-%d", i)
		b.pod(t, "team-b", pod)
		inst, err := caa.CreateInstance(t.Context(), pod, strings.Repeat(fmt.Sprint(i+5), 64), cloudConfigFor("team-b", pod), provider.InstanceTypeSpec{GPUs: 1, VCPUs: 3, Memory: 12288})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, inst.ID)
	}
	// A's reaper an hour later: B's VMs are not its. B's reaper with
	// the copied ID would refuse (VerifyClusterID); with its own it keeps
	// the VMs of its live pods.
	pa := a.reap(t, fake)
	if err := VerifyClusterID(t.Context(), b.cs, a.uid); err == nil {
		t.Error("B's reaper accepted A's ID")
	}
	pb := b.reap(t, fake)
	t.Logf("cluster A's pass: %d deleted, %d other clusters' VMs; cluster B's: %d deleted, %d unowned", pa.Count(Deleted), pa.OtherClusters, pb.Count(Deleted), pb.Count(Unowned))
	printOutcome(t, "copied cluster ID", live, fake)
}

// TestScenarioHandDeletedPeerPod: `kubectl delete peerpod` while its pod
// and sandbox live. The finalizer holds the PeerPod; the reaper keeps the
// VM and deletes it (then releases the PeerPod) once the pod is gone.
func TestScenarioHandDeletedPeerPod(t *testing.T) {
	a := startKube(t)
	fake := gcefake.New()
	defer fake.Close()
	a.pod(t, "ml", "llm-0")
	n := a.startNode(t, fake)
	n.run(t, sidB, "ml", "llm-0")
	vm := vmOfSandbox(fake, sidB)
	pps, err := (peerpod.Client{Dynamic: a.dyn}).List(t.Context())
	if err != nil || len(pps) != 1 {
		t.Fatalf("PeerPods %v, %v: want the one CAA recorded", pps, err)
	}
	if err := a.dyn.Resource(peerpod.GVR).Namespace("ml").Delete(t.Context(), pps[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := a.reap(t, fake)
	if len(p.Findings) != 1 || p.Findings[0].Verdict != InUse {
		t.Errorf("findings %+v: want the VM in use", p.Findings)
	}
	if printOutcome(t, "hand-deleted PeerPod of a live pod", []string{vm}, fake) != 0 {
		return
	}
	// The bounded outcome: the pod ends, the VM goes, the PeerPod too.
	a.deletePod(t, "ml", "llm-0")
	p = a.reap(t, fake)
	if p.Count(Deleted) != 1 || len(p.Released) != 1 {
		t.Errorf("after the pod: %d deleted, released %v; want the VM deleted and its PeerPod released", p.Count(Deleted), p.Released)
	}
	if _, err := a.dyn.Resource(peerpod.GVR).Namespace("ml").Get(t.Context(), pps[0].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the PeerPod is still there: %v", err)
	}
}

// TestReaperCanOnlyWhatItNeeds runs `kubectl auth can-i --list` as the
// reaper's ServiceAccount against a real API server with the reaper's
// committed RBAC: exactly the rules docs/reaper.md records, and no Secret.
func TestReaperCanOnlyWhatItNeeds(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed to check the reaper's RBAC as a user would: %v", err)
	}
	a := startKube(t)
	a.applyRBAC(t, "install/components/reaper/rbac.yaml")
	api := a.podAPI(t, "caa-gcp-t4-reaper")
	kc := filepath.Join(t.TempDir(), "reaper.kubeconfig")
	if err := a.cp.WriteKubeconfig(kc, api.Token); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		out, err := exec.CommandContext(t.Context(), kubectl, append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "no") {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := run("auth", "can-i", "--list", "-n", caaNamespace)
	t.Logf("kubectl auth can-i --list -n %s as system:serviceaccount:%s:caa-gcp-t4-reaper:\n%s", caaNamespace, caaNamespace, list)
	// Columns: Resources, Non-Resource URLs, Resource Names, Verbs; a
	// verb list may hold spaces ([list patch]).
	rules, names := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n")[1:] {
		f := strings.Fields(line)
		i := strings.LastIndex(line, "[")
		rules[f[0]] = line[i:]
		if len(f) > 2 {
			names[f[0]] = f[2]
		}
	}
	if names["namespaces"] != "[kube-system]" {
		t.Errorf("namespaces: resource names %q, want [kube-system] only", names["namespaces"])
	}
	if names["secrets"] != "[gcp-t4-event-key]" {
		t.Errorf("secrets: resource names %q, want [gcp-t4-event-key] only", names["secrets"])
	}
	want := map[string]string{
		"events":                              "[create list]",
		"pods":                                "[list]",
		"peerpods.confidentialcontainers.org": "[list patch]",
		"namespaces":                          "[get]",
		"secrets":                             "[get]",
		"selfsubjectreviews.authentication.k8s.io":      "[create]",
		"selfsubjectaccessreviews.authorization.k8s.io": "[create]",
		"selfsubjectrulesreviews.authorization.k8s.io":  "[create]",
		// What every authenticated user gets (ClusterRoles
		// system:basic-user, system:discovery, system:public-info-viewer,
		// and the trust bundles kube-apiserver v1.37 grants to all).
		"clustertrustbundles.certificates.k8s.io": "[get list watch]",
	}
	for res, verbs := range want {
		if rules[res] != verbs {
			t.Errorf("%s: %q, want %s", res, rules[res], verbs)
		}
	}
	for res := range rules {
		if _, ok := want[res]; !ok && !strings.HasPrefix(res, "[") {
			t.Errorf("the reaper may also act on %s %s", res, rules[res])
		}
	}
	for _, q := range [][]string{{"get", "secret/peer-pods-secret"}, {"list", "secrets"}, {"get", "namespace/default"}, {"delete", "pods"}, {"create", "peerpods.confidentialcontainers.org"}} {
		out := strings.TrimSpace(run(append([]string{"auth", "can-i", "-n", caaNamespace}, q...)...))
		if out = out[strings.LastIndex(out, "\n")+1:]; out != "no" {
			t.Errorf("kubectl auth can-i %v: %q, want no", q, out)
		}
	}
}
