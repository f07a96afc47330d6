// Package peerpod reads and writes upstream CAA's PeerPod objects
// (confidentialcontainers.org/v1alpha1), the record that a pod owns a
// podVM. CAA v0.22.0 creates one after each successful CreateInstance, with
// the pod as controller owner and the finalizer peer.pod/finalizer, and
// removes the finalizer after a successful DeleteInstance
// (src/cloud-api-adaptor/pkg/adaptor/k8sops/peerpod.go, OwnPeerPod and
// ReleasePeerPod, called from pkg/adaptor/cloud/cloud.go StartVM/StopVM,
// 38d0fcf7). The API types are src/peerpod-ctrl/api/v1alpha1 there; the
// module proxy does not serve that module, so this package speaks the same
// JSON through the dynamic client.
package peerpod

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
)

// Upstream's names for the API and the finalizer.
const (
	Group     = "confidentialcontainers.org"
	Version   = "v1alpha1"
	Kind      = "PeerPod"
	Resource  = "peerpods"
	Finalizer = "peer.pod/finalizer"
	// CRDName is the CustomResourceDefinition's name.
	CRDName = Resource + "." + Group
)

// GVR is the PeerPod resource.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// ErrNoCRD is returned when the API server does not serve PeerPods.
var ErrNoCRD = errors.New("the PeerPod CRD (" + CRDName + ") is not installed")

// PeerPod is the part of a PeerPod object clean-up reads.
type PeerPod struct {
	Namespace, Name string
	UID             types.UID
	// Owner is the pod that controls it (CAA sets exactly one).
	OwnerName string
	OwnerUID  types.UID
	// InstanceID and CloudProvider are its spec.
	InstanceID    string
	CloudProvider string
	Created       time.Time
	// Deleting is set once the object has a deletion timestamp (its pod
	// is gone and the garbage collector deleted it).
	Deleting bool
	// Finalized is set while it carries peer.pod/finalizer: nobody has
	// confirmed the VM deleted yet.
	Finalized bool
}

// Client is PeerPod access through the dynamic client.
type Client struct {
	Dynamic dynamic.Interface
	// CloudProvider is what Own writes in spec.cloudProvider (CAA writes
	// its CLOUD_PROVIDER).
	CloudProvider string
}

// List returns every PeerPod in the cluster, page by page.
func (c Client) List(ctx context.Context) ([]PeerPod, error) {
	var out []PeerPod
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := c.Dynamic.Resource(GVR).Namespace("").List(ctx, opts)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("listing PeerPods: %w", ErrNoCRD)
			}
			return nil, fmt.Errorf("listing PeerPods (needs RBAC list on %s): %w", CRDName, err)
		}
		for i := range list.Items {
			out = append(out, fromUnstructured(&list.Items[i]))
		}
		if list.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = list.GetContinue()
	}
}

func fromUnstructured(u *unstructured.Unstructured) PeerPod {
	pp := PeerPod{
		Namespace: u.GetNamespace(),
		Name:      u.GetName(),
		UID:       u.GetUID(),
		Created:   u.GetCreationTimestamp().Time,
		Deleting:  u.GetDeletionTimestamp() != nil,
	}
	for _, f := range u.GetFinalizers() {
		pp.Finalized = pp.Finalized || f == Finalizer
	}
	for _, o := range u.GetOwnerReferences() {
		if o.Kind == "Pod" && o.Controller != nil && *o.Controller {
			pp.OwnerName, pp.OwnerUID = o.Name, o.UID
		}
	}
	pp.InstanceID, _, _ = unstructured.NestedString(u.Object, "spec", "instanceID")
	pp.CloudProvider, _, _ = unstructured.NestedString(u.Object, "spec", "cloudProvider")
	return pp
}

// Own records that pod owns the podVM instanceID, as CAA's OwnPeerPod
// does: named <pod>-resource-<5 random characters>, the pod as controller
// owner blocking its deletion, and the finalizer. It returns the name.
func (c Client) Own(ctx context.Context, pod *corev1.Pod, instanceID string) (string, error) {
	name := pod.Name + "-resource-" + utilrand.String(5)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	u.SetNamespace(pod.Namespace)
	u.SetName(name)
	u.SetFinalizers([]string{Finalizer})
	ref := metav1.NewControllerRef(pod, corev1.SchemeGroupVersion.WithKind("Pod"))
	u.SetOwnerReferences([]metav1.OwnerReference{*ref})
	_ = unstructured.SetNestedField(u.Object, instanceID, "spec", "instanceID")
	_ = unstructured.SetNestedField(u.Object, c.CloudProvider, "spec", "cloudProvider")
	if _, err := c.Dynamic.Resource(GVR).Namespace(pod.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PeerPod %s/%s for podVM %s: %w", pod.Namespace, name, instanceID, err)
	}
	return name, nil
}

// Release removes the finalizer, as CAA's ReleasePeerPod does (a JSON
// patch removing /metadata/finalizers): the VM is confirmed gone. A
// PeerPod that is already gone is success.
func (c Client) Release(ctx context.Context, namespace, name string) error {
	patch := []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)
	_, err := c.Dynamic.Resource(GVR).Namespace(namespace).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
		// Invalid: there was no finalizers field left to remove.
		return fmt.Errorf("removing %s from PeerPod %s/%s: %w", Finalizer, namespace, name, err)
	}
	return nil
}
