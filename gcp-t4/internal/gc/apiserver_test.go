package gc

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestCollectorOnARealAPIServer reads pods from a real kube-apiserver: the
// VM of a live pod stays, the VM whose pod was deleted goes.
func TestCollectorOnARealAPIServer(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	kube, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager runs here to make the namespace's default
	// service account, which pod admission looks up.
	if _, err := kube.CoreV1().ServiceAccounts("ml").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"live-0", "gone-0"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}},
		}
		if _, err := kube.CoreV1().Pods("ml").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The VMs are made after their pods, as CAA makes them.
	clock := time.Now().Add(2 * time.Second)
	fake := gcefake.New(gcefake.WithClock(func() time.Time { return clock }))
	defer fake.Close()
	cfg := gcpt4.Config{ProjectID: "demo-project", Zone: "us-central1-a", ImageName: "podvm-t4", Network: "default",
		DiskType: "pd-balanced", RootVolumeSize: 50, ProvisioningModel: gcpt4.ProvisioningStandard}
	prov, err := gcpt4.NewProvider(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Teardown()
	for i, name := range []string{"live-0", "gone-0"} {
		if _, err := prov.CreateInstance(ctx, name, strings.Repeat(string(rune('a'+i)), 64), &cloudinit.CloudConfig{}, provider.InstanceTypeSpec{GPUs: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := kube.CoreV1().Pods("ml").Delete(ctx, "gone-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}

	c := &Collector{VMs: prov, Pods: KubePods{Client: kube}, Grace: 10 * time.Minute, Skew: 2 * time.Minute, Delete: true,
		Now: func() time.Time { return clock.Add(time.Hour) }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	findings, err := c.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Verdict{}
	for _, f := range findings {
		got[f.VM.Pod] = f.Verdict
	}
	if got["live-0"] != InUse || got["gone-0"] != Deleted {
		t.Fatalf("verdicts = %v, want live-0 in use and gone-0 deleted", got)
	}
	left := fake.Instances()
	if len(left) != 1 || left[0].GetLabels()[gcpt4.PodLabel] != "live-0" {
		t.Fatalf("instances left: %d, want only live-0's", len(left))
	}
}
