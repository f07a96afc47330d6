package preflight

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestClusterIDCheck: the installed peer-pods-cm's GCP_CLUSTER_ID must be
// kube-system's UID; empty (kubectl apply -k of the shipped overlay) or
// another cluster's fails with the command that sets the right one.
func TestClusterIDCheck(t *testing.T) {
	const uid = "5e2f3c1a-0000-4000-8000-000000000001"
	for _, c := range []struct {
		id     string
		status Status
		detail string
	}{
		{uid, Pass, "is this cluster's"},
		{"", Fail, "is empty: the provider refuses every podVM"},
		{"0f0f0f0f-0000-4000-8000-000000000002", Fail, "is not this cluster's ID"},
	} {
		ds := caaDaemonSet(2, 2, 2)
		ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "cloud-api-adaptor-con", EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "peer-pods-cm"}}}}}}
		objs := append(readyCluster()[:4], ds,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(uid)}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "peer-pods-cm", Namespace: ns}, Data: map[string]string{"GCP_CLUSTER_ID": c.id}})
		fix := ""
		if c.status == Fail {
			fix = `kubectl -n confidential-containers-system patch configmap peer-pods-cm --type=merge -p '{"data":{"GCP_CLUSTER_ID":"` + uid + `"}}'`
		}
		expect(t, clusterChecks(t, objs...), "cluster id", c.status, c.detail, fix)
	}
}
