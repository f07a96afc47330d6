package preflight

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
)

// checkClusterID: the peer-pods-cm the installed DaemonSet reads carries
// this cluster's ID, its kube-system namespace's UID. The provider labels
// every podVM with it and refuses to create without it; the reaper
// refuses to start with none or another cluster's. `gcp-t4 install` sets
// it; a `kubectl apply -k` overlay or a Helm release must, and this says
// how. Not installed yet: nothing to check.
func (c *Cluster) checkClusterID(ctx context.Context) (Result, bool) {
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.DaemonSet, metav1.GetOptions{})
	if err != nil {
		return Result{}, false
	}
	check := "cluster id"
	in, err := caaconfig.Of(ctx, c.Client, ds)
	if err != nil {
		return fail(check, "", "%v", err), true
	}
	if len(in.Missing) > 0 {
		return fail(check, "", "ConfigMap %s/%s, which the DaemonSet reads, does not exist", c.Namespace, in.Missing[0]), true
	}
	if len(in.ConfigMaps) == 0 {
		return Result{}, false
	}
	// The value CAA gets is the last ConfigMap's that sets it; the fix
	// patches the one it reads last.
	cmName := in.ConfigMaps[len(in.ConfigMaps)-1]
	uid, err := caaconfig.ClusterID(ctx, c.Client)
	if err != nil {
		return fail(check, "", "%v", err), true
	}
	got := in.Data["GCP_CLUSTER_ID"]
	if got == uid {
		return pass(check, "GCP_CLUSTER_ID in %s/%s is this cluster's (kube-system's UID %s)", c.Namespace, cmName, uid), true
	}
	fix := fmt.Sprintf(`kubectl -n %[1]s patch configmap %[2]s --type=merge -p '{"data":{"GCP_CLUSTER_ID":"%[3]s"}}' && kubectl -n %[1]s rollout restart daemonset/%[4]s deployment/caa-gcp-t4-reaper   # with kubectl apply -k: GCP_CLUSTER_ID=%[3]s in your overlay's peer-pods-cm; with Helm: --set providerConfigs.gcp-t4.GCP_CLUSTER_ID=%[3]s`, c.Namespace, cmName, uid, c.DaemonSet)
	if got == "" {
		return fail(check, fix, "GCP_CLUSTER_ID in %s/%s is empty: the provider refuses every podVM and the reaper refuses to start", c.Namespace, cmName), true
	}
	return fail(check, fix, "GCP_CLUSTER_ID %s in %s/%s is not this cluster's ID (kube-system's UID is %s): a ConfigMap copied from another cluster would label this cluster's podVMs as that one's", got, c.Namespace, cmName, uid), true
}
