package peerpod

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// upstream is the PeerPod upstream CAA v0.22.0's k8sops.OwnPeerPod wrote
// through a real API server with our CRD (testdata, see its _comment).
func upstream(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile("testdata/upstream-v0.22.0-ownpeerpod.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Object map[string]any `json:"object"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: f.Object}
}

func TestReadsUpstreamsPeerPod(t *testing.T) {
	pp := fromUnstructured(upstream(t))
	want := PeerPod{Namespace: "ml", Name: "train-0-resource-wn76s", UID: "53ff55be-cad9-405c-a9ae-7ddb8749c5df",
		OwnerName: "train-0", OwnerUID: "479b79ed-d6e4-48f8-8926-a4849dd3581c",
		InstanceID: "zones/us-central1-a/instances/podvm-train-0-2222bbbb", CloudProvider: "gcp-t4", Finalized: true}
	want.Created = pp.Created
	if pp != want || pp.Created.IsZero() {
		t.Errorf("read %+v\nwant %+v", pp, want)
	}
}

// TestOwnWritesWhatUpstreamWrites: the adaptor's PeerPod has upstream's
// shape: owner reference, finalizer, spec keys, name pattern.
func TestOwnWritesWhatUpstreamWrites(t *testing.T) {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{GVR: "PeerPodList"})
	c := Client{Dynamic: dyn, CloudProvider: "gcp-t4"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ml", UID: "479b79ed-d6e4-48f8-8926-a4849dd3581c"}}
	name, err := c.Own(context.Background(), pod, "zones/us-central1-a/instances/podvm-train-0-2222bbbb")
	if err != nil {
		t.Fatal(err)
	}
	ours, err := dyn.Resource(GVR).Namespace("ml").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	up := upstream(t)
	if got, want := len(ours.GetName()), len(up.GetName()); got != want || ours.GetName()[:len("train-0-resource-")] != "train-0-resource-" {
		t.Errorf("name %q, upstream's pattern is like %q", ours.GetName(), up.GetName())
	}
	if !reflect.DeepEqual(ours.GetOwnerReferences(), up.GetOwnerReferences()) {
		t.Errorf("owner references %+v, upstream's %+v", ours.GetOwnerReferences(), up.GetOwnerReferences())
	}
	if !reflect.DeepEqual(ours.GetFinalizers(), up.GetFinalizers()) || !reflect.DeepEqual(ours.Object["spec"], up.Object["spec"]) {
		t.Errorf("finalizers %v spec %v, upstream's %v %v", ours.GetFinalizers(), ours.Object["spec"], up.GetFinalizers(), up.Object["spec"])
	}
	if err := c.Release(context.Background(), "ml", name); err != nil {
		t.Fatal(err)
	}
	released, _ := dyn.Resource(GVR).Namespace("ml").Get(context.Background(), name, metav1.GetOptions{})
	if len(released.GetFinalizers()) != 0 {
		t.Errorf("finalizers after Release: %v", released.GetFinalizers())
	}
}
