package preflight

import (
	"bytes"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// TestPreflightReadsTheInstalledSettings: after an install, `gcp-t4
// preflight -kubeconfig K` checks the settings CAA runs with, read from
// the peer-pods-cm its DaemonSet names, wherever CAA is installed; a flag
// or env var overrides one; without CAA installed every missing setting
// is named at once; a value the provider refuses is an error naming the
// ConfigMap and the key.
func TestPreflightReadsTheInstalledSettings(t *testing.T) {
	clearProviderEnv(t)
	cp := controlplane.StartForTest(t, controlplane.Options{})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	c := t.Context()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	// The emulator stands in for Google's API: the endpoint is the one
	// thing the user's environment gives.
	t.Setenv("GCP_ENDPOINT", fake.URL())
	run := func(args ...string) (int, string, []Result) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Main(c, append([]string{"-kubeconfig", cp.Kubeconfig, "-o", "json"}, args...), &out, &errOut, quiet())
		if code == 2 {
			return code, errOut.String(), nil
		}
		return code, errOut.String(), decodeResults(t, out.String())
	}

	// Nothing installed: every missing setting at once, with the cluster
	// checks beside them.
	_, stderr, rs := run()
	var missing []string
	for _, r := range rs {
		if r.Check == "config" && r.Status == Fail {
			missing = append(missing, r.Detail)
		}
	}
	if len(missing) != 4 || !strings.Contains(missing[0], "GCP_PROJECT_ID (-gcp-project-id) is required") || !strings.Contains(missing[1], "GCP_ZONE (-zone) is required") ||
		!strings.Contains(missing[2], "PODVM_IMAGE_NAME (-image-name) is required") || !strings.Contains(missing[3], "GCP_NETWORK (-network) is required") {
		t.Errorf("with nothing installed, config failures %q; want the four missing settings", missing)
	}
	if _, ok := find(rs, "daemonset "+defaultNamespace+"/"); !ok || strings.Contains(stderr, "settings from") {
		t.Errorf("with nothing installed: no daemonset check, or settings claimed read: %s %v", stderr, rs)
	}

	// CAA installed in a namespace of the admin's choosing.
	const caaNS = "peer-pods"
	if _, err := cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: caaNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "peer-pods-cm", Namespace: caaNS}, Data: map[string]string{
		"CLOUD_PROVIDER": "gcp-t4", "GCP_PROJECT_ID": fake.Project(), "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4",
		"GCP_NETWORK": "global/networks/default", "GCP_SUBNETWORK": "default", "ROOT_VOLUME_SIZE": "150", "VXLAN_PORT": "4789",
	}}
	if _, err := cs.CoreV1().ConfigMaps(caaNS).Create(c, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "cloud-api-adaptor"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: dsName, Namespace: caaNS}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "cloud-api-adaptor-con", Image: "caa-gcp-t4:v1",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "peer-pods-cm"}}}},
		}}}},
	}}
	if _, err := cs.AppsV1().DaemonSets(caaNS).Create(c, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What names peer-pods as the install's namespace: the ClusterRoleBinding
	// install gives CAA's ServiceAccount there, which only a cluster admin
	// can write.
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "caa-gcp-t4-cloud-api-adaptor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "caa-gcp-t4-cloud-api-adaptor"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "cloud-api-adaptor", Namespace: caaNS}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(c, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A tenant's DaemonSet of CAA's name in its own namespace, reading a
	// peer-pods-cm of its own that names another project: passed over,
	// and named on stderr.
	const tenantNS = "team-a"
	if _, err := cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tcm := cm.DeepCopy()
	tcm.Namespace, tcm.ResourceVersion, tcm.Data["GCP_PROJECT_ID"] = tenantNS, "", "tenant-proj"
	if _, err := cs.CoreV1().ConfigMaps(tenantNS).Create(c, tcm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lookAlike := ds.DeepCopy()
	lookAlike.Namespace, lookAlike.ResourceVersion = tenantNS, ""
	if _, err := cs.AppsV1().DaemonSets(tenantNS).Create(c, lookAlike, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, stderr, rs = run()
	t.Logf("preflight -kubeconfig K:\n%s", stderr)
	if want := "gcp-t4 preflight: ignored DaemonSet " + tenantNS + "/" + dsName + ": namespace " + tenantNS + " is not the install's"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if want := "settings from " + caaNS + "/peer-pods-cm, which CAA reads: GCP_NETWORK, GCP_PROJECT_ID, GCP_SUBNETWORK, GCP_ZONE, PODVM_IMAGE_NAME, ROOT_VOLUME_SIZE"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	expect(t, rs, "config", Pass, "project "+fake.Project()+", zones us-central1-a", "")
	expect(t, rs, "image podvm-t4", Pass, "READY", "")
	if _, ok := find(rs, "daemonset "+caaNS+"/"+dsName); !ok {
		t.Errorf("the cluster checks did not look where CAA is installed: %v", rs)
	}

	// A flag and an env var win over the ConfigMap.
	t.Setenv("PODVM_IMAGE_NAME", "podvm-from-env")
	_, stderr, rs = run("-zone", "us-central1-b")
	expect(t, rs, "config", Pass, "zones us-central1-b", "")
	expect(t, rs, "image podvm-from-env", Fail, "not found", "GCE_IMAGE_NAME=podvm-from-env")
	if strings.Contains(stderr, "GCP_ZONE") || strings.Contains(stderr, "PODVM_IMAGE_NAME") {
		t.Errorf("stderr says a setting given as a flag or env var came from the cluster: %s", stderr)
	}
	t.Setenv("PODVM_IMAGE_NAME", "")

	// -caa-namespace given: only there.
	if _, _, rs = run("-caa-namespace", defaultNamespace); len(rs) == 0 {
		t.Fatal("no results")
	} else if r, _ := find(rs, "config"); r.Status != Fail {
		t.Errorf("-caa-namespace %s read the settings of %s: %v", defaultNamespace, caaNS, r)
	}

	// What the provider refuses at start, preflight refuses too, naming
	// where it came from.
	cm.Data["ROOT_VOLUME_SIZE"] = "abc"
	if _, err := cs.CoreV1().ConfigMaps(caaNS).Update(c, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, stderr, _ := run(); code != 2 || !strings.Contains(stderr, caaNS+"/peer-pods-cm ROOT_VOLUME_SIZE") || !strings.Contains(stderr, "gcp-t4 install --set") {
		t.Errorf("a refused ROOT_VOLUME_SIZE in peer-pods-cm: exit %d, %s", code, stderr)
	}
}
