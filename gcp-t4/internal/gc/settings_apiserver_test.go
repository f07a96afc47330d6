package gc

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
)

// TestGCReadsPeerPodsCM runs docs/reaper.md's command as written,
// `gcp-t4 gc -kubeconfig K --gcp-project-id P`, against a cluster where
// CAA is installed: the image, network, zone, grace and cluster ID come
// from the peer-pods-cm CAA's DaemonSet reads (as uninstall reads it), so
// gc judges this cluster's VM as this cluster's and lists the orphan;
// with no CAA installed the cluster ID is still this cluster's own.
func TestGCReadsPeerPodsCM(t *testing.T) {
	k := startKube(t)
	fake := gcefake.New()
	defer fake.Close()
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_CREDENTIALS", "GCP_CLUSTER_ID", "REAPER_GRACE", "REAPER_INTERVAL", "KUBECONFIG"} {
		t.Setenv(v, "")
	}
	t.Setenv("GCP_ENDPOINT", fake.URL())
	gc := func() (int, string) {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), []string{"-kubeconfig", k.cp.Kubeconfig, "--gcp-project-id", fake.Project()}, &out, &errOut, quiet())
		return code, out.String() + errOut.String()
	}

	// No CAA installed: the settings gc needs are missing, and it says which.
	if code, out := gc(); code != 2 || !strings.Contains(out, "PODVM_IMAGE_NAME") && !strings.Contains(out, "GCP_ZONE") {
		t.Errorf("gc with no CAA installed: exit %d, want 2 naming the missing setting\n%s", code, out)
	}

	ns := "confidential-containers-system"
	k.namespace(t, ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "peer-pods-cm", Namespace: ns}, Data: map[string]string{
		"CLOUD_PROVIDER": "gcp-t4", "GCP_PROJECT_ID": fake.Project(), "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4",
		"GCP_NETWORK": "global/networks/default", "GCP_SUBNETWORK": "default", "GCP_CLUSTER_ID": k.uid, "REAPER_GRACE": "0s", "REAPER_INTERVAL": "1m",
	}}
	if _, err := k.cs.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "cloud-api-adaptor"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: caaconfig.DaemonSet, Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "cloud-api-adaptor-con", Image: "caa-gcp-t4:latest",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "peer-pods-cm"}}}},
		}}}},
	}}
	if _, err := k.cs.AppsV1().DaemonSets(ns).Create(t.Context(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// This cluster's podVM whose pod is gone (CAA's delete failed).
	k.pod(t, "team-a", "train-0")
	n := k.startNode(t, fake)
	n.run(t, sidA, "team-a", "train-0")
	orphan := vmOfSandbox(fake, sidA)
	leakOnStop(t, fake, n, sidA)
	k.deletePod(t, "team-a", "train-0")

	// A tenant's DaemonSet of CAA's name in its own namespace, reading a
	// peer-pods-cm that names another cluster ID: passed over and named,
	// never read (before, gc refused two "installs" or took the tenant's).
	k.namespace(t, "tenant")
	tcm := cm.DeepCopy()
	tcm.Namespace, tcm.ResourceVersion, tcm.Data["GCP_CLUSTER_ID"] = "tenant", "", "5e2f3c1a-0000-4000-8000-00000000dead"
	if _, err := k.cs.CoreV1().ConfigMaps("tenant").Create(t.Context(), tcm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lookAlike := ds.DeepCopy()
	lookAlike.Namespace, lookAlike.ResourceVersion = "tenant", ""
	if _, err := k.cs.AppsV1().DaemonSets("tenant").Create(t.Context(), lookAlike, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	code, out := gc()
	t.Logf("gcp-t4 gc -kubeconfig K --gcp-project-id %s:\n%s", fake.Project(), out)
	if want := "ignored DaemonSet tenant/" + caaconfig.DaemonSet + ": namespace tenant is not the install's"; !strings.Contains(out, want) {
		t.Errorf("gc does not name the look-alike (%q):\n%s", want, out)
	}
	if code != 1 || !strings.Contains(out, "settings from "+ns+"/peer-pods-cm: ") || !strings.Contains(out, orphan) || strings.Contains(out, "other clusters") {
		t.Errorf("gc: exit %d, want 1 listing this cluster's orphan %s, with the settings read from peer-pods-cm\n%s", code, orphan, out)
	}
	for _, key := range []string{"GCP_CLUSTER_ID", "PODVM_IMAGE_NAME", "GCP_NETWORK", "REAPER_GRACE"} {
		if !strings.Contains(out, key) {
			t.Errorf("gc's note does not name %s\n%s", key, out)
		}
	}

	// A peer-pods-cm without the ID (kubectl apply -k as shipped): the ID is
	// this cluster's own, never empty.
	cm.Data["GCP_CLUSTER_ID"] = ""
	if _, err := k.cs.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out := gc(); code != 1 || !strings.Contains(out, "GCP_CLUSTER_ID (kube-system's UID)") || !strings.Contains(out, orphan) {
		t.Errorf("gc with an empty GCP_CLUSTER_ID: exit %d\n%s", code, out)
	}
}
