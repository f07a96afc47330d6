package preflight

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	cmName := ""
	for _, ct := range ds.Spec.Template.Spec.Containers {
		for _, e := range ct.EnvFrom {
			if e.ConfigMapRef != nil && strings.HasPrefix(e.ConfigMapRef.Name, "peer-pods-cm") {
				cmName = e.ConfigMapRef.Name
			}
		}
	}
	if cmName == "" {
		return Result{}, false
	}
	check := "cluster id"
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return fail(check, "", "reading namespace kube-system, whose UID is the cluster's ID: %v", err), true
	}
	cm, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, cmName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fail(check, "", "ConfigMap %s/%s, which the DaemonSet reads, does not exist", c.Namespace, cmName), true
	} else if err != nil {
		return fail(check, "", "reading %s/%s: %v", c.Namespace, cmName, err), true
	}
	uid, got := string(ns.UID), cm.Data["GCP_CLUSTER_ID"]
	if got == uid {
		return pass(check, "GCP_CLUSTER_ID in %s/%s is this cluster's (kube-system's UID %s)", c.Namespace, cmName, uid), true
	}
	fix := fmt.Sprintf(`kubectl -n %[1]s patch configmap %[2]s --type=merge -p '{"data":{"GCP_CLUSTER_ID":"%[3]s"}}' && kubectl -n %[1]s rollout restart daemonset/%[4]s deployment/caa-gcp-t4-reaper   # with kubectl apply -k: GCP_CLUSTER_ID=%[3]s in your overlay's peer-pods-cm; with Helm: --set providerConfigs.gcp-t4.GCP_CLUSTER_ID=%[3]s`, c.Namespace, cmName, uid, c.DaemonSet)
	if got == "" {
		return fail(check, fix, "GCP_CLUSTER_ID in %s/%s is empty: the provider refuses every podVM and the reaper refuses to start", c.Namespace, cmName), true
	}
	return fail(check, fix, "GCP_CLUSTER_ID %s in %s/%s is not this cluster's ID (kube-system's UID is %s): a ConfigMap copied from another cluster would label this cluster's podVMs as that one's", got, c.Namespace, cmName, uid), true
}
