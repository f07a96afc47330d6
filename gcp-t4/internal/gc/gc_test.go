package gc

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

func pod(name string, created time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: metav1.NewTime(created)}}
}

func TestCollectsOnlyOrphans(t *testing.T) {
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	fake := gcefake.New(gcefake.WithClock(now))
	defer fake.Close()
	cfg := gcpt4.Config{ProjectID: "demo-project", Zone: "us-central1-a", ImageName: "podvm-t4", Network: "default",
		DiskType: "pd-balanced", RootVolumeSize: 50, ProvisioningModel: gcpt4.ProvisioningStandard}
	prov, err := gcpt4.NewProvider(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Teardown()
	create := func(podName, sid string, at time.Time) {
		clock = at
		if _, err := prov.CreateInstance(context.Background(), podName, sid, &cloudinit.CloudConfig{}, provider.InstanceTypeSpec{GPUs: 1}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	create("live-0", strings.Repeat("a", 64), t0)                       // pod exists, older than VM
	create("gone-0", strings.Repeat("b", 64), t0)                       // pod deleted
	create("llm-0", strings.Repeat("c", 64), t0)                        // StatefulSet pod recreated later
	create("fresh-0", strings.Repeat("d", 64), t0.Add(115*time.Minute)) // pod not visible yet, within grace
	clock = t0.Add(2 * time.Hour)

	kube := kubefake.NewClientset(
		pod("live-0", t0.Add(-time.Minute)),
		pod("llm-0", t0.Add(time.Hour)),
	)
	c := &Collector{VMs: prov, Pods: KubePods{Client: kube}, Grace: 10 * time.Minute, Skew: 2 * time.Minute, Now: now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	findings, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Verdict{}
	for _, f := range findings {
		got[f.VM.Pod] = f.Verdict
	}
	want := map[string]Verdict{"live-0": InUse, "gone-0": Orphan, "llm-0": Orphan, "fresh-0": TooYoung}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: verdict %s, want %s (all: %v)", k, got[k], v, got)
		}
	}
	if n := len(fake.Instances()); n != 4 {
		t.Fatalf("a dry run deleted something: %d instances", n)
	}

	c.Delete = true
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, vm := range fake.Instances() {
		left[vm.GetLabels()[gcpt4.PodLabel]] = true
	}
	if len(left) != 2 || !left["live-0"] || !left["fresh-0"] {
		t.Fatalf("after delete, VMs left for pods %v; want live-0 and fresh-0", left)
	}
}

type failingPods struct{}

func (failingPods) ListPods(context.Context) ([]Pod, error) { return nil, io.ErrUnexpectedEOF }

type recordingVMs struct{ deleted []string }

func (r *recordingVMs) ListManaged(context.Context) ([]gcpt4.ManagedVM, error) {
	return []gcpt4.ManagedVM{{ID: "zones/z/instances/old", Pod: "gone", Created: time.Unix(0, 0)}}, nil
}
func (r *recordingVMs) DeleteInstance(_ context.Context, id string) error {
	r.deleted = append(r.deleted, id)
	return nil
}

func TestNothingDeletedWhenPodsCannotBeListed(t *testing.T) {
	vms := &recordingVMs{}
	c := &Collector{VMs: vms, Pods: failingPods{}, Delete: true, Now: time.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing deleted") {
		t.Fatalf("want an error saying nothing was deleted, got %v", err)
	}
	if len(vms.deleted) != 0 {
		t.Fatalf("deleted %v without knowing the pods", vms.deleted)
	}
}
