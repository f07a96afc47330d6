package status

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
)

// caaIn is a DaemonSet of CAA's name in ns, as the install paths write
// it, reading a peer-pods-cm that names project.
func caaIn(ns, project, clusterID string) []runtime.Object {
	labels := map[string]string{"app": "cloud-api-adaptor"}
	return []runtime.Object{
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: caaconfig.DaemonSet, Namespace: ns}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:    "cloud-api-adaptor-con",
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: caaconfig.ConfigMap}}}},
			}}}},
		}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: caaconfig.ConfigMap, Namespace: ns}, Data: map[string]string{
			"GCP_PROJECT_ID": project, "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4", "GCP_CLUSTER_ID": clusterID,
			"GCP_NETWORK": "global/networks/default", "GCP_SUBNETWORK": "default",
		}},
	}
}

// status asks GCE with the settings of the install's CAA, never those of
// a tenant's DaemonSet of the same name in its own namespace, which it
// names in a warning; with the look-alike alone it asks nothing.
func TestStatusIgnoresALookAlikeCAA(t *testing.T) {
	clearGCPEnv(t)
	gce := gcefake.New()
	t.Cleanup(gce.Close)
	t.Setenv("GCP_ENDPOINT", gce.URL())
	const uid = "5e2f3c1a-0000-4000-8000-000000000002"
	lookAlike := caaIn("team-a", "tenant-proj", uid)
	ask := func(objs ...runtime.Object) (gceResult, string) {
		t.Helper()
		var log bytes.Buffer
		res, err := askGCE(t.Context(), fake.NewClientset(objs...), autoBool{}, slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return res, log.String()
	}
	res, log := ask(append(lookAlike, caaIn(caaconfig.DefaultNamespace, gce.Project(), uid)...)...)
	if want := "project " + gce.Project() + ", settings from " + caaconfig.DefaultNamespace + "/peer-pods-cm"; !res.Asked || res.Note != want {
		t.Errorf("with a look-alike beside CAA: %+v, want asked, %q", res, want)
	}
	if !strings.Contains(log, "ignored DaemonSet team-a/"+caaconfig.DaemonSet) {
		t.Errorf("no warning names the look-alike:\n%s", log)
	}
	res, log = ask(lookAlike...)
	if res.Asked || strings.Contains(res.Note, "tenant-proj") || !strings.Contains(log, "ignored DaemonSet team-a/") {
		t.Errorf("the look-alike alone: %+v, log %s; want GCE not asked", res, log)
	}
}
