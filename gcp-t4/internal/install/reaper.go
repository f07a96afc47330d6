package install

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The reaper (components/reaper): always rendered with the overlay.
const (
	componentReaper = "components/reaper"
	ReaperName      = "caa-gcp-t4-reaper"
	// ClusterIDKey is the peer-pods-cm key CAA's provider labels every
	// podVM with and the reaper compares.
	ClusterIDKey = "GCP_CLUSTER_ID"
)

// setClusterID fills GCP_CLUSTER_ID with the cluster's ID, the UID of its
// kube-system namespace, and refuses a different one given with --set: a
// wrong ID would label this cluster's VMs as another's.
func setClusterID(ctx context.Context, cs kubernetes.Interface, s *Settings) error {
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading namespace kube-system for the cluster's ID (%s): %w", ClusterIDKey, err)
	}
	uid := string(ns.UID)
	if given := s.Config[ClusterIDKey]; given != "" && given != uid {
		return fmt.Errorf("--set %s=%s is not this cluster's ID: its kube-system namespace's UID is %s; drop the setting (install fills it)", ClusterIDKey, given, uid)
	}
	if s.Config == nil {
		s.Config = map[string]string{}
	}
	s.Config[ClusterIDKey] = uid
	return nil
}
