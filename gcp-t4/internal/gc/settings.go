package gc

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
)

// caaDaemonSet is the DaemonSet every install path names CAA's: its
// envFrom names the peer-pods-cm CAA reads.
const caaDaemonSet = caaconfig.DaemonSet

// FromCluster fills the provider flags (and -grace) that neither the
// command line nor the environment set from the peer-pods-cm the
// installed CAA DaemonSet reads, as `gcp-t4 uninstall` does, so `gcp-t4 gc
// -kubeconfig K` judges exactly the VMs CAA and the reaper create: the
// same project, zones, network and cluster ID. A GCP_CLUSTER_ID still
// empty then is this cluster's own, the kube-system namespace's UID
// (what VerifyClusterID requires anyway). It returns what it filled, for
// the user to see; with no CAA installed it fills nothing but the ID.
// `gcp-t4 status -gce` asks GCE with the same settings.
func FromCluster(ctx context.Context, fs *flag.FlagSet, cs kubernetes.Interface, namespace string) (filled []string, source string, err error) {
	in, err := caaconfig.Read(ctx, cs, namespace, caaDaemonSet)
	if err != nil {
		return nil, "", err
	}
	source = in.Source()
	keys := append(gcpt4.Keys(), gcpt4.Key{Env: "REAPER_GRACE", Flag: "grace"})
	if filled, err = caaconfig.Fill(fs, os.Getenv, in.Data, keys, source); err != nil {
		return nil, "", err
	}
	if f := fs.Lookup("cluster-id"); f != nil && f.Value.String() == "" {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil {
			return nil, "", fmt.Errorf("GCP_CLUSTER_ID is not set (-cluster-id, or peer-pods-cm) and reading namespace kube-system for it failed (needs RBAC get on it): %w", err)
		}
		if err := fs.Set("cluster-id", string(ns.UID)); err != nil {
			return nil, "", err
		}
		filled = append(filled, "GCP_CLUSTER_ID (kube-system's UID)")
	}
	sort.Strings(filled)
	return filled, source, nil
}
