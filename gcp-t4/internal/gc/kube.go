package gc

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
)

// KubeCluster is Cluster on a real API server: pods through the typed
// client, page by page so a large cluster does not make one huge
// response, and PeerPods through the dynamic client.
type KubeCluster struct {
	Client   kubernetes.Interface
	PeerPods peerpod.Client
}

// ListPods returns every pod's identity, phase, creation time and whether
// it is being deleted.
func (k KubeCluster) ListPods(ctx context.Context) ([]Pod, error) {
	var out []Pod
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := k.Client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing pods in all namespaces (needs RBAC list on pods): %w", err)
		}
		for _, p := range list.Items {
			out = append(out, Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Phase: p.Status.Phase, Created: p.CreationTimestamp.Time,
				Deleting: p.DeletionTimestamp != nil})
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// ListPeerPods lists PeerPods.
func (k KubeCluster) ListPeerPods(ctx context.Context) ([]peerpod.PeerPod, error) {
	return k.PeerPods.List(ctx)
}

// ReleasePeerPod removes a PeerPod's finalizer.
func (k KubeCluster) ReleasePeerPod(ctx context.Context, namespace, name string) error {
	return k.PeerPods.Release(ctx, namespace, name)
}

// VerifyClusterID checks that id is this cluster's: the UID of its
// kube-system namespace. A ConfigMap copied from another cluster would
// otherwise let this reaper judge that cluster's VMs by this one's pods.
func VerifyClusterID(ctx context.Context, cs kubernetes.Interface, id string) error {
	if id == "" {
		return fmt.Errorf("GCP_CLUSTER_ID is not set: without it no podVM is this cluster's and nothing can be collected; `gcp-t4 install` sets it to the kube-system namespace's UID")
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("cannot read namespace kube-system to check GCP_CLUSTER_ID (needs RBAC get on it): %w", err)
	}
	if err != nil {
		return fmt.Errorf("reading namespace kube-system to check GCP_CLUSTER_ID: %w", err)
	}
	if string(ns.UID) != id {
		return fmt.Errorf("GCP_CLUSTER_ID %s is not this cluster's ID (kube-system's UID is %s): the ConfigMap was copied from another cluster? Set GCP_CLUSTER_ID=%s (gcp-t4 install does)", id, ns.UID, ns.UID)
	}
	return nil
}
