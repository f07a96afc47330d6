package adaptor

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
)

// Recorder records which pod owns which podVM, as CAA does with PeerPod
// objects: Own after a create returned, Release after a delete succeeded.
// The reaper reads these records to tell a live sandbox's VM from a leak.
type Recorder interface {
	Own(ctx context.Context, namespace, pod, instanceID string) (record string, err error)
	Release(ctx context.Context, namespace, record string) error
}

// PeerPods is the Recorder on a real API server, the same calls CAA
// v0.22.0 makes (k8sops.PeerPodService): the pod is read for its UID, the
// PeerPod is created with it as controller owner and the finalizer.
type PeerPods struct {
	Pods     kubernetes.Interface
	PeerPods peerpod.Client
}

// Own creates the PeerPod of a pod's podVM.
func (r PeerPods) Own(ctx context.Context, namespace, pod, instanceID string) (string, error) {
	p, err := r.Pods.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading pod %s/%s to own its PeerPod: %w", namespace, pod, err)
	}
	return r.PeerPods.Own(ctx, p, instanceID)
}

// Release removes the PeerPod's finalizer.
func (r PeerPods) Release(ctx context.Context, namespace, record string) error {
	return r.PeerPods.Release(ctx, namespace, record)
}
