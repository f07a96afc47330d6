package uninstall

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/test/controlplane"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// finalizeNamespaces stands in for the namespace controller's last step,
// which uninstall waits on.
func finalizeNamespaces(ctx context.Context, cs kubernetes.Interface) {
	for ctx.Err() == nil {
		if nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
			for i := range nss.Items {
				if ns := &nss.Items[i]; ns.DeletionTimestamp != nil && len(ns.Spec.Finalizers) > 0 {
					ns.Spec.Finalizers = nil
					_, _ = cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type guardEnv struct {
	cp   *controlplane.ControlPlane
	cs   kubernetes.Interface
	dyn  dynamic.Interface
	fake *gcefake.Server
	uid  string
}

func (g *guardEnv) run(t *testing.T, main func(context.Context, []string, io.Writer, io.Writer, *slog.Logger) int, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := main(t.Context(), append([]string{"--kubeconfig=" + g.cp.Kubeconfig}, args...), &out, &out, nil)
	return code, out.String()
}

func (g *guardEnv) install(t *testing.T) {
	t.Helper()
	if code, out := g.run(t, install.Main, "--project="+g.fake.Project(), "--zone=us-central1-a", "--podvm-image=podvm-t4",
		"--network=global/networks/default", "--timeout=10m", "--wait=false", "--set=GCP_ENDPOINT="+g.fake.URL()); code != 0 {
		t.Fatalf("install: exit %d\n%s", code, out)
	}
	in, err := caaconfig.InNamespace(t.Context(), g.cs, install.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if cm := in.Data; cm[install.ClusterIDKey] != g.uid {
		t.Fatalf("install set %s=%q, want kube-system's UID %s", install.ClusterIDKey, in.Data[install.ClusterIDKey], g.uid)
	}
}

// podVM creates a VM as CAA on this cluster (or another) would.
func (g *guardEnv) podVM(t *testing.T, cluster, ns, pod, sandbox string) string {
	t.Helper()
	cfg := gcpt4.Config{ProjectID: g.fake.Project(), Zone: "us-central1-a", ImageName: "podvm-t4", Network: "global/networks/default",
		DiskType: "pd-balanced", RootVolumeSize: 50, ProvisioningModel: setting.ProvisioningStandard, ClusterID: cluster, NodeName: "worker-1"}
	p, err := gcpt4.NewProvider(t.Context(), cfg, log.New(io.Discard, "", 0), g.fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Teardown()
	cc := &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: `{"pod-namespace":"` + ns + `","pod-name":"` + pod + `"}`}}}
	inst, err := p.CreateInstance(t.Context(), pod, sandbox, cc, provider.InstanceTypeSpec{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	return inst.ID
}

func (g *guardEnv) vms() map[string]bool {
	out := map[string]bool{}
	for _, vm := range g.fake.Instances() {
		out[gcpt4.InstanceID("us-central1-a", vm.GetName())] = true
	}
	return out
}

func (g *guardEnv) kataPod(t *testing.T, ns, name string) {
	t.Helper()
	rc := install.RuntimeClassName
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{RuntimeClassName: &rc, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := g.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (g *guardEnv) installed(t *testing.T) bool {
	t.Helper()
	_, err := g.cs.AppsV1().DaemonSets(install.Namespace).Get(t.Context(), install.DaemonSetName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestUninstallGuardWithLivePodVMs: uninstall refuses while a kata-remote
// pod runs and while this cluster's podVMs are left, naming them;
// --delete-podvms deletes exactly this cluster's and waits; --force
// uninstalls anyway. Another cluster's VM in the same project and an
// unidentified one are never touched.
func TestUninstallGuardWithLivePodVMs(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	g := &guardEnv{cp: cp, cs: kubernetes.NewForConfigOrDie(cp.Config()), dyn: dynamic.NewForConfigOrDie(cp.Config()), fake: gcefake.New()}
	t.Cleanup(g.fake.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); finalizeNamespaces(ctx, g.cs) }()
	t.Cleanup(func() { cancel(); <-done })
	ks, err := g.cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.uid = string(ks.UID)
	for _, ns := range []string{"ml"} {
		if _, err := g.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := g.cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	g.install(t)
	// kata-deploy's chart makes the RuntimeClass, not we (the handler and
	// the managed-by label as its templates/runtimeclasses.yaml renders
	// them for shim "remote", kata-containers cf82bb35c803).
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: install.RuntimeClassName, Labels: map[string]string{"app.kubernetes.io/managed-by": "kata-deploy"}}, Handler: "kata-remote"}
	if _, err := g.cs.NodeV1().RuntimeClasses().Create(t.Context(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	other := g.podVM(t, "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", "ml", "train-0", strings.Repeat("b", 64))
	g.fake.AddInstance("us-central1-a", &computepb.Instance{Name: proto.String("podvm-old-0-cccccccc"), MachineType: proto.String("n1-standard-4"),
		Labels: map[string]string{gcpt4.ManagedByLabel: gcpt4.ManagedByValue, gcpt4.PodLabel: "old-0"}})
	unidentified := gcpt4.InstanceID("us-central1-a", "podvm-old-0-cccccccc")
	g.kataPod(t, "ml", "train-0")
	ours := g.podVM(t, g.uid, "ml", "train-0", strings.Repeat("a", 64))

	// A live kata-remote pod: refused, the pod and the VM named.
	code, out := g.run(t, Main, "--timeout=10m")
	if code != 1 || !strings.Contains(out, "pod ml/train-0") || !strings.Contains(out, "podVM "+ours) || strings.Contains(out, "podVM "+other+" ") || !strings.Contains(out, "nothing was deleted") {
		t.Fatalf("with a live pod: exit %d, want 1 naming the pod and this cluster's VM only:\n%s", code, out)
	}
	if !g.installed(t) || len(g.vms()) != 3 {
		t.Fatalf("a refused uninstall changed something: installed=%v, %d VMs", g.installed(t), len(g.vms()))
	}

	// The pod is gone but its VM is left: refused, --delete-podvms named.
	if err := g.cs.CoreV1().Pods("ml").Delete(t.Context(), "train-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	code, out = g.run(t, Main, "--timeout=10m")
	if code != 1 || !strings.Contains(out, "podVM "+ours) || !strings.Contains(out, "--delete-podvms") {
		t.Fatalf("with a podVM left: exit %d, want 1 naming it and --delete-podvms:\n%s", code, out)
	}

	// --delete-podvms: exactly this cluster's VM goes, then everything.
	code, out = g.run(t, Main, "--timeout=10m", "--delete-podvms")
	if code != 0 || !strings.Contains(out, "deleted podVM "+ours) {
		t.Fatalf("--delete-podvms: exit %d\n%s", code, out)
	}
	left := g.vms()
	liveDeleted := 0
	for _, id := range []string{other, unidentified} {
		if !left[id] {
			liveDeleted++
			t.Errorf("uninstall deleted %s, which is not this cluster's", id)
		}
	}
	orphans := 0
	if left[ours] {
		orphans++
		t.Errorf("this cluster's podVM %s survived --delete-podvms", ours)
	}
	if g.installed(t) {
		t.Error("still installed after --delete-podvms")
	}
	t.Logf("uninstall scenario: other clusters' and unidentified VMs deleted: %d; this cluster's podVMs left: %d (refused twice first, nothing deleted then)", liveDeleted, orphans)

	// --force: uninstalls with a live pod and its VM, saying what is left.
	g.install(t)
	g.kataPod(t, "ml", "train-1")
	kept := g.podVM(t, g.uid, "ml", "train-1", strings.Repeat("d", 64))
	code, out = g.run(t, Main, "--timeout=10m", "--force")
	if code != 0 || !strings.Contains(out, "--force") || !strings.Contains(out, kept) || g.installed(t) || !g.vms()[kept] {
		t.Fatalf("--force: exit %d, installed=%v, VM kept=%v\n%s", code, g.installed(t), g.vms()[kept], out)
	}
}
