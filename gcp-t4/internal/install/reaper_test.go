package install

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"

	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
)

func rendered(t *testing.T, s Settings) []*unstructured.Unstructured {
	t.Helper()
	m, err := Render(s)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(m)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (o.GetName() == name || strings.HasPrefix(o.GetName(), name+"-")) {
			return o
		}
	}
	return nil
}

func asDeployment(t *testing.T, u *unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestReaperIsAlwaysInstalledWithLeastPrivilege: the overlay always
// carries the reaper and the PeerPod CRD; the reaper runs as its own
// ServiceAccount with no host access, reads the same settings as CAA, and
// the CAA DaemonSet's termination grace covers the provider's longest
// call.
func TestReaperIsAlwaysInstalledWithLeastPrivilege(t *testing.T) {
	objs := rendered(t, Settings{})
	if find(objs, "CustomResourceDefinition", "peerpods.confidentialcontainers.org") == nil {
		t.Error("no PeerPod CRD: CAA's OwnPeerPod would fail")
	}
	u := find(objs, "Deployment", ReaperName)
	if u == nil {
		t.Fatal("no reaper Deployment")
	}
	d := asDeployment(t, u)
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	if ps.ServiceAccountName != ReaperName || ps.HostNetwork || ps.HostPID {
		t.Errorf("reaper pod: sa %q hostNetwork %v hostPID %v; want its own SA and no host access", ps.ServiceAccountName, ps.HostNetwork, ps.HostPID)
	}
	// Its one volume is its own optional key (never a host path).
	if len(ps.Volumes) != 1 || ps.Volumes[0].Secret == nil || ps.Volumes[0].Secret.SecretName != gc.ReaperCredentialsSecret {
		t.Errorf("reaper volumes %+v: want only its own key's Secret %s", ps.Volumes, gc.ReaperCredentialsSecret)
	}
	sc := c.SecurityContext
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("reaper security context %+v / %+v: want non-root, read-only root, all capabilities dropped", ps.SecurityContext, sc)
	}
	if strings.Join(c.Command, " ") != "/usr/local/bin/gcp-t4 reaper" || c.Image != ImageName+":latest" {
		t.Errorf("reaper runs %v from %s", c.Command, c.Image)
	}
	ds := find(objs, "DaemonSet", DaemonSetName)
	dsCM, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	cmName := ""
	for _, e := range dsCM[0].(map[string]any)["envFrom"].([]any) {
		if ref, ok := e.(map[string]any)["configMapRef"]; ok {
			cmName = ref.(map[string]any)["name"].(string)
		}
	}
	got := ""
	for _, e := range c.EnvFrom {
		if e.ConfigMapRef != nil {
			got = e.ConfigMapRef.Name
		}
	}
	if got == "" || got != cmName {
		t.Errorf("reaper reads ConfigMap %q, CAA reads %q: they must share one", got, cmName)
	}
	cm := find(objs, "ConfigMap", ConfigMapName)
	for _, k := range []string{ClusterIDKey, "GCP_CLUSTER_NAME", "REAPER_INTERVAL", "REAPER_GRACE"} {
		if _, ok, _ := unstructured.NestedString(cm.Object, "data", k); !ok {
			t.Errorf("peer-pods-cm lacks %s", k)
		}
	}
	grace, _, _ := unstructured.NestedInt64(ds.Object, "spec", "template", "spec", "terminationGracePeriodSeconds")
	if need := int64(gcpt4.LongestCall.Seconds()); grace < need+30 {
		t.Errorf("DaemonSet terminationGracePeriodSeconds %d: a create in flight can run %d s (gcpt4.LongestCall); SIGKILL would orphan its VM", grace, need)
	}
}

// TestReaperGetsItsOwnWIFToken: with Workload Identity Federation the
// reaper gets the credential configuration and a token of its own
// ServiceAccount, so GCE can grant it only list and delete.
func TestReaperGetsItsOwnWIFToken(t *testing.T) {
	wif := []byte(`{"type":"external_account","audience":"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k","subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":"https://sts.googleapis.com/v1/token","credential_source":{"file":"` + WIFTokenPath + `"}}`)
	d := asDeployment(t, find(rendered(t, Settings{WIFCredentialConfig: wif}), "Deployment", ReaperName))
	ps := d.Spec.Template.Spec
	var projected *corev1.ProjectedVolumeSource
	for _, v := range ps.Volumes {
		if v.Name == "gcp-wif" {
			projected = v.Projected
		}
	}
	if projected == nil || projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("reaper volumes %+v: want the projected WIF token", ps.Volumes)
	}
	env := map[string]string{}
	for _, e := range ps.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["GOOGLE_APPLICATION_CREDENTIALS"] != wifDir+"/"+reaperWIFConfigFile {
		t.Errorf("reaper env %v: want GOOGLE_APPLICATION_CREDENTIALS at the reaper's own WIF configuration", env)
	}
}

// TestReaperHasNoAccessToCAAsKey: with a key file, CAA's Secret reaches
// CAA only; the reaper reads peer-pods-cm and an optional Secret of its
// own.
func TestReaperHasNoAccessToCAAsKey(t *testing.T) {
	objs := rendered(t, Settings{Credentials: testKey()})
	d := asDeployment(t, find(objs, "Deployment", ReaperName))
	c := d.Spec.Template.Spec.Containers[0]
	var secrets []string
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			secrets = append(secrets, e.SecretRef.Name)
			if e.SecretRef.Optional == nil || !*e.SecretRef.Optional {
				t.Errorf("the reaper's Secret %s is not optional: without a key the reaper uses its ServiceAccount's principal", e.SecretRef.Name)
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secrets = append(secrets, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
			if v.Secret.Optional == nil || !*v.Secret.Optional {
				t.Errorf("the reaper's Secret %s is not optional: without a key the reaper uses its ServiceAccount's principal", v.Secret.SecretName)
			}
		}
	}
	if strings.Join(secrets, ",") != "caa-gcp-t4-reaper-credentials" {
		t.Errorf("the reaper reads Secrets %v, want only caa-gcp-t4-reaper-credentials (never %s)", secrets, SecretName)
	}
}

// TestReaperWIFDoesNotImpersonateCAA: CAA's credential configuration may
// impersonate CAA's Google service account; the reaper's never does.
func TestReaperWIFDoesNotImpersonateCAA(t *testing.T) {
	var caa map[string]any
	if err := json.Unmarshal(testWIFConfig, &caa); err != nil {
		t.Fatal(err)
	}
	caa["service_account_impersonation_url"] = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/caa@p.iam.gserviceaccount.com:generateAccessToken"
	wif, _ := json.Marshal(caa)
	cm := find(rendered(t, Settings{WIFCredentialConfig: wif}), "ConfigMap", wifConfigMap)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if !strings.Contains(data[wifConfigFile], "caa@p.iam") {
		t.Errorf("CAA's configuration lost its impersonation: %s", data[wifConfigFile])
	}
	var reaper map[string]any
	if err := json.Unmarshal([]byte(data[reaperWIFConfigFile]), &reaper); err != nil {
		t.Fatalf("reaper's configuration %q: %v", data[reaperWIFConfigFile], err)
	}
	if _, ok := reaper["service_account_impersonation_url"]; ok || reaper["audience"] != caa["audience"] || reaper["credential_source"] == nil {
		t.Errorf("reaper's configuration %v: want CAA's pool and token source without impersonation", reaper)
	}
	p, err := ReaperPrincipal(caa["audience"].(string))
	if err != nil || p != "principal://iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/caa/subject/system:serviceaccount:confidential-containers-system:caa-gcp-t4-reaper" {
		t.Errorf("ReaperPrincipal = %q, %v", p, err)
	}
}
