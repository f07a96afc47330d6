package gc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// kube is one real cluster: an API server with the PeerPod CRD the
// install deploys (install/components/reaper/peerpod-crd.yaml).
type kube struct {
	cp  *controlplane.ControlPlane
	cs  kubernetes.Interface
	dyn dynamic.Interface
	uid string
}

func startKube(t *testing.T) *kube {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{})
	k := &kube{cp: cp, cs: kubernetes.NewForConfigOrDie(cp.Config()), dyn: dynamic.NewForConfigOrDie(cp.Config())}
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "install", "components", "reaper", "peerpod-crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		t.Fatal(err)
	}
	crds := k.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the PeerPod CRD: %v", err)
	}
	// The CRD serves once established; wait for that condition.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := k.dyn.Resource(peerpod.GVR).Namespace("default").List(t.Context(), metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PeerPods not served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ks, err := k.cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k.uid = string(ks.UID)
	return k
}

func (k *kube) namespace(t *testing.T, ns string) {
	t.Helper()
	_, err := k.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller-manager makes the default ServiceAccount admission
	// looks up.
	_, err = k.cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func (k *kube) pod(t *testing.T, ns, name string) {
	t.Helper()
	k.namespace(t, ns)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := k.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (k *kube) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := k.cs.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
}

func (k *kube) finish(t *testing.T, ns, name string) {
	t.Helper()
	p, err := k.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := k.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// adaptorFlags point `gcp-t4 adaptor` at a fake and at this cluster, as
// the DaemonSet's environment does.
func (k *kube) adaptorFlags(fake *gcefake.Server, dir string) []string {
	return []string{"-socket", filepath.Join(dir, "hypervisor.sock"), "-pods-dir", filepath.Join(dir, "pods"),
		"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-network", "global/networks/default", "-subnetwork", "default",
		"-cluster-id", k.uid, "-node-name", "worker-1", "-kubeconfig", k.cp.Kubeconfig}
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// node is a running `gcp-t4 adaptor` and the kata shim in front of it.
type node struct {
	srv  *adaptor.Server
	shim *shimclient.Client
}

func (k *kube) startNode(t *testing.T, fake *gcefake.Server) *node {
	t.Helper()
	dir := shortTempDir(t)
	srv, err := adaptor.Start(k.adaptorFlags(fake, dir), "test", os.Stderr, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return &node{srv: srv, shim: shimclient.New(srv.SocketPath(), 0)}
}

func (n *node) run(t *testing.T, sid, ns, pod string) {
	t.Helper()
	if _, err := n.shim.CreateVM(t.Context(), sid, "", shimclient.Sandbox{Name: pod, Namespace: ns, VCPUs: 3, MemoryMiB: 12288, GPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := n.shim.StartVM(t.Context(), sid, 0); err != nil {
		t.Fatal(err)
	}
}

// reap runs one deleting pass of this cluster's reaper an hour later, as
// `gcp-t4 reaper` would with its provider and its clients.
func (k *kube) reap(t *testing.T, fake *gcefake.Server) Pass {
	t.Helper()
	if err := VerifyClusterID(t.Context(), k.cs, k.uid); err != nil {
		t.Fatal(err)
	}
	c := &Collector{VMs: newProvider(t, fake, k.uid), Cluster: KubeCluster{Client: k.cs, PeerPods: peerpod.Client{Dynamic: k.dyn}},
		Policy: DefaultPolicy(), Delete: true, Now: func() time.Time { return time.Now().Add(time.Hour) }, Log: quiet()}
	p, err := c.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func vmOfSandbox(fake *gcefake.Server, sid string) string {
	for _, vm := range fake.Instances() {
		for _, it := range vm.GetMetadata().GetItems() {
			if it.GetKey() == gcpt4.SandboxMetadata && it.GetValue() == sid {
				return gcpt4.InstanceID("us-central1-a", vm.GetName())
			}
		}
	}
	return ""
}

// outcome checks a scenario's acceptance and prints its counts: every
// live VM still there, every orphan gone, nothing else deleted.
func outcome(t *testing.T, name string, fake *gcefake.Server, live, orphans []string) {
	t.Helper()
	have := map[string]bool{}
	for _, vm := range fake.Instances() {
		have[gcpt4.InstanceID("us-central1-a", vm.GetName())] = true
	}
	liveDeleted, orphansLeft := 0, 0
	for _, id := range live {
		if !have[id] {
			liveDeleted++
			t.Errorf("%s: live VM %s was deleted", name, id)
		}
	}
	for _, id := range orphans {
		if have[id] {
			orphansLeft++
			t.Errorf("%s: orphan %s was left", name, id)
		}
	}
	if n := len(have) - (len(live) - liveDeleted); n != orphansLeft {
		t.Errorf("%s: %d VMs are neither live nor the expected orphans", name, n-orphansLeft)
	}
	t.Logf("reaper scenario %q: live VMs deleted %d (of %d); orphans left %d (of %d)", name, liveDeleted, len(live), orphansLeft, len(orphans))
}

const (
	sidA = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
	sidB = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
	sidC = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"
	sidD = "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4"
)

// leakOnStop makes the sandbox's StopVM fail and stops the adaptor, so its
// VM stays behind with its PeerPod still held, as when upstream CAA's
// delete fails (it then forgets the sandbox).
func leakOnStop(t *testing.T, fake *gcefake.Server, n *node, sid string) {
	t.Helper()
	fake.FailNext("DELETE", "instances.delete", 400, 1)
	if err := n.shim.StopVM(t.Context(), sid); err == nil {
		t.Fatal("StopVM with a failing delete succeeded")
	}
	if err := n.srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestScenariosOnARealAPIServer(t *testing.T) {
	a := startKube(t)

	// The name-based gc kept an orphan alive whenever a pod of that name
	// lived anywhere: here b/train-0 is gone and a/train-0 lives.
	t.Run("SamePodNameInTwoNamespaces", func(t *testing.T) {
		fake := gcefake.New()
		defer fake.Close()
		a.pod(t, "team-a", "train-0")
		a.pod(t, "team-b", "train-0")
		n := a.startNode(t, fake)
		n.run(t, sidA, "team-a", "train-0")
		n.run(t, sidB, "team-b", "train-0")
		live, orphan := vmOfSandbox(fake, sidA), vmOfSandbox(fake, sidB)
		leakOnStop(t, fake, n, sidB)
		a.deletePod(t, "team-b", "train-0")
		p := a.reap(t, fake)
		outcome(t, "same pod name in two namespaces", fake, []string{live}, []string{orphan})
		if len(p.Released) != 1 || !strings.HasPrefix(p.Released[0], "team-b/train-0-resource-") {
			t.Errorf("released %v, want team-b/train-0's PeerPod", p.Released)
		}
	})

	// A Job's pod that Succeeded stays in the API; its VM must not.
	t.Run("CompletedJobPod", func(t *testing.T) {
		fake := gcefake.New()
		defer fake.Close()
		a.pod(t, "batch", "job-0")
		a.pod(t, "batch", "server-0")
		n := a.startNode(t, fake)
		n.run(t, sidC, "batch", "job-0")
		n.run(t, sidD, "batch", "server-0")
		job, live := vmOfSandbox(fake, sidC), vmOfSandbox(fake, sidD)
		leakOnStop(t, fake, n, sidC)
		a.finish(t, "batch", "job-0")
		a.reap(t, fake)
		outcome(t, "completed Job pod", fake, []string{live}, []string{job})
	})

	// Two clusters, one project, the same pod names: each reaper deletes
	// its own cluster's leak and nothing of the other's.
	t.Run("TwoClustersShareAProject", func(t *testing.T) {
		b := startKube(t)
		fake := gcefake.New()
		defer fake.Close()
		var live, orphans []string
		for i, k := range []*kube{a, b} {
			ns := fmt.Sprintf("shared-%d", i)
			k.pod(t, ns, "train-0")
			k.pod(t, ns, "gone-0")
			n := k.startNode(t, fake)
			s1, s2 := strings.Repeat(string(rune('e'+2*i)), 64), strings.Repeat(string(rune('f'+2*i)), 64)
			n.run(t, s1, ns, "train-0")
			n.run(t, s2, ns, "gone-0")
			live = append(live, vmOfSandbox(fake, s1))
			orphans = append(orphans, vmOfSandbox(fake, s2))
			leakOnStop(t, fake, n, s2)
			k.deletePod(t, ns, "gone-0")
		}
		// Cluster A's reaper first: B's leak and B's live VM are not its.
		pa := a.reap(t, fake)
		if pa.OtherClusters != 2 || pa.Count(Deleted) != 1 {
			t.Errorf("cluster A's pass: %d deleted, %d other clusters' VMs seen; want 1 and 2", pa.Count(Deleted), pa.OtherClusters)
		}
		b.reap(t, fake)
		outcome(t, "two clusters share a project", fake, live, orphans)
	})
}
