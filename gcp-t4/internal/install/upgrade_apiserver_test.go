package install

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/kyaml/kio"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// gkeAdmissionConfig limits system-node-critical pods to namespaces with a
// matching ResourceQuota, as GKE does; the configuration is the one
// Kubernetes documents ("Limit Priority Class consumption by default").
func gkeAdmissionConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admission.yaml")
	cfg := `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ResourceQuota
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: ResourceQuotaConfiguration
      limitedResources:
        - resource: pods
          matchScopes:
            - scopeName: PriorityClass
              operator: In
              values: ["system-node-critical", "system-cluster-critical"]
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// installArgs runs `gcp-t4 install` with only the given flags (and the
// kubeconfig): an upgrade names only what changes.
func (e *env) installArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, errb bytes.Buffer
	code = Main(t.Context(), append([]string{"--kubeconfig=" + e.cp.Kubeconfig, "--timeout=10m"}, args...), &o, &errb, nil)
	return code, o.String(), errb.String()
}

func (e *env) kubeSystemUID(t *testing.T) string {
	t.Helper()
	ns, err := e.cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) configMap(t *testing.T, ns string) map[string]string {
	t.Helper()
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s/%s: %v", ns, ConfigMapName, err)
	}
	return cm.Data
}

func noKeyIn(t *testing.T, what, s string) {
	t.Helper()
	var k struct {
		PrivateKey string `json:"private_key"`
	}
	_ = json.Unmarshal(testKey(), &k)
	for _, leak := range []string{"PRIVATE KEY", k.PrivateKey[40:80], base64.StdEncoding.EncodeToString(testKey())[:40]} {
		if strings.Contains(s, leak) {
			t.Errorf("%s shows key material", what)
		}
	}
}

// testUpgradeKeeps is the first report: install with an image and
// a key, then change one setting naming nothing else.
func (e *env) testUpgradeKeeps(t *testing.T) {
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	key := writeTemp(t, "key.json", testKey())
	if code, out, errs := e.install(t, "--image=ghcr.io/you/caa-gcp-t4:v1", "--credentials-file="+key, "--set=GCP_LABELS=team=ml"); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	hash0 := e.daemonSet(t).Spec.Template.Annotations[ConfigHashAnnotation]
	code, out, errs := e.installArgs(t, "--set", "GCP_ZONES=auto")
	if code != 0 {
		t.Fatalf("upgrade: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "upgrade stdout", out, `~ GCP_ZONES: "" → "auto"`, "keeping the service account key already installed", "other settings unchanged", "rollout done")
	noKeyIn(t, "upgrade output", out+errs)
	ds := e.daemonSet(t)
	if img := container(ds, "cloud-api-adaptor-con").Image; img != "ghcr.io/you/caa-gcp-t4:v1" {
		t.Errorf("image after upgrade %q", img)
	}
	if h := ds.Spec.Template.Annotations[ConfigHashAnnotation]; h == "" || h == hash0 {
		t.Errorf("config hash %q → %q: a settings change must roll the DaemonSet", hash0, h)
	}
	cm := e.configMap(t, Namespace)
	if cm["GCP_ZONES"] != "auto" || cm["GCP_PROJECT_ID"] != "demo-project" || cm["GCP_LABELS"] != "team=ml" || cm["CLOUD_CONFIG_VERIFY"] != "true" {
		t.Errorf("peer-pods-cm after upgrade %v", cm)
	}
	sec, err := e.cs.CoreV1().Secrets(Namespace).Get(t.Context(), SecretName, metav1.GetOptions{})
	if err != nil || !bytes.Equal(sec.Data[credentialsFile], testKey()) {
		t.Fatalf("key after upgrade: %v", err)
	}
	// The kept key is still a file, still in no environment variable.
	e.assertLiveKeyAsFile(t)

	// --dry-run shows the diff, has the API server check it, changes nothing.
	before := e.resourceVersions(t)
	code, out, errs = e.installArgs(t, "--dry-run", "--zone=us-central1-b")
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "dry-run stdout", out, `~ GCP_ZONE: "us-central1-a" → "us-central1-b"`, "dry run: the API server accepted", "nothing was changed")
	noKeyIn(t, "dry-run output", out+errs)
	if after := e.resourceVersions(t); !reflect.DeepEqual(before, after) {
		t.Errorf("--dry-run changed objects:\nbefore %v\nafter  %v", before, after)
	}
	// Removing a value takes --unset.
	if code, out, errs := e.installArgs(t, "--unset", "GCP_LABELS"); code != 0 || !strings.Contains(out, `~ GCP_LABELS: "team=ml" → ""`) {
		t.Fatalf("--unset: exit %d\n%s\n%s", code, out, errs)
	}
	if cm := e.configMap(t, Namespace); cm["GCP_LABELS"] != "" || cm["GCP_ZONES"] != "auto" {
		t.Errorf("after --unset GCP_LABELS: %v", cm)
	}
	e.uninstall(t)
	e.assertNothingLeft(t)
}

// testValidatedBeforeApply: what the provider would reject or silently
// default is refused before any object is written, in one message naming
// each key; a refused upgrade leaves everything as it was.
func (e *env) testValidatedBeforeApply(t *testing.T) {
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	for _, c := range []struct {
		args  []string
		code  int
		wants []string
	}{
		{[]string{"--zone=us-central1"}, 1, []string{`GCP_ZONE: "us-central1" is not a zone name`}},
		{[]string{"--set=ROOT_VOLUME_SIZE=abc", "--set=GCP_PROVISIONING_MODEL=SPOT", "--set=GCP_SPOT_FALLBACK=ture", "--set=GCP_MUTATIONS_PER_SECOND=fast"}, 1,
			[]string{`ROOT_VOLUME_SIZE (flag -root-volume-size): "abc" is not a whole number`, `GCP_SPOT_FALLBACK (flag -spot-fallback): "ture" is not a boolean`, `GCP_MUTATIONS_PER_SECOND (flag -mutations-per-second): "fast" is not a number`}},
		{[]string{"--credentials-file=" + writeTemp(t, "adc.json", []byte(`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`))}, 2, []string{`type "authorized_user" is not allowed`}},
		{[]string{"--set=INITDATA=not-base64"}, 1, []string{"INITDATA: not base64 of gzip data"}},
	} {
		code, out, errs := e.install(t, c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s\n%s", c.args, code, c.code, out, errs)
		}
		mustContain(t, "stderr", errs, c.wants...)
		// --render refuses it with the same message (no cluster, so the
		// cluster ID is given).
		var ro, re bytes.Buffer
		rargs := append(append([]string{"--render", "--set=GCP_CLUSTER_ID=" + e.kubeSystemUID(t)}, requiredFlags...), c.args...)
		if rcode := Main(t.Context(), rargs, &ro, &re, nil); rcode != c.code || !strings.Contains(re.String(), strings.TrimSpace(errs)) || ro.Len() != 0 {
			t.Errorf("--render %v: exit %d, stdout %d bytes, stderr %q; want exit %d and install's %q", c.args, rcode, ro.Len(), re.String(), c.code, errs)
		}
		if left := e.ours(t); len(left) > 0 {
			t.Fatalf("%v: a refused install created %v", c.args, left)
		}
	}
	if code, out, errs := e.install(t); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	before := e.resourceVersions(t)
	code, _, errs := e.installArgs(t, "--set=GCP_SPOT_FALLBACK=ture")
	if code != 1 || !strings.Contains(errs, "GCP_SPOT_FALLBACK") {
		t.Errorf("bad upgrade: exit %d, %s", code, errs)
	}
	if after := e.resourceVersions(t); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused upgrade changed objects")
	}
	e.uninstall(t)
	e.assertNothingLeft(t)
}

// testEveryCAAKey: CAA's own settings reach peer-pods-cm; custom
// certificates and TLS_SKIP_VERIFY=true are refused.
func (e *env) testEveryCAAKey(t *testing.T) {
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	tlsf := testTLS()
	initdata := gzipBase64("algorithm = \"sha384\"\nversion = \"0.1.0\"\n[data]\n\"policy.rego\" = '''\npackage agent_policy\ndefault CreateContainerRequest := true\n'''\n")
	sets := map[string]string{
		"INITDATA": initdata, "CLOUD_CONFIG_VERIFY": "true", "TLS_MIN_VERSION": "VersionTLS12",
		"TLS_CIPHER_SUITES":    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
		"ENABLE_SCRATCH_SPACE": "false", "PAUSE_IMAGE": "registry.k8s.io/pause:3.10", "PEERPODS_LIMIT_PER_NODE": "4",
		"PROXY_TIMEOUT": "10m", "EXTERNAL_NETWORK_VIA_PODVM": "false",
	}
	// Custom certificates are refused before anything is applied
	// (tls.go says why).
	tlsArgs := []string{"--tls-ca=" + writeTemp(t, "ca.crt", tlsf.CA), "--tls-cert=" + writeTemp(t, "client.crt", tlsf.Cert), "--tls-key=" + writeTemp(t, "client.key", tlsf.Key)}
	if code, out, errs := e.install(t, tlsArgs...); code == 0 || !strings.Contains(errs+out, "not supported") {
		t.Fatalf("install --tls-ca …: exit %d, want a refusal\n%s\n%s", code, out, errs)
	}
	var args []string
	for k, v := range sets {
		args = append(args, "--set="+k+"="+v)
	}
	if code, out, errs := e.install(t, args...); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	cm := e.configMap(t, Namespace)
	for k, v := range sets {
		if cm[k] != v {
			t.Errorf("peer-pods-cm %s = %q, want %q", k, cm[k], v)
		}
	}
	if cm["CACERT_FILE"] != "" || cm["CERT_FILE"] != "" || cm["CERT_KEY"] != "" {
		t.Errorf("TLS files in peer-pods-cm: %v", cm)
	}
	if _, err := e.cs.CoreV1().Secrets(Namespace).Get(t.Context(), tlsSecret, metav1.GetOptions{}); err == nil {
		t.Error("certs-for-tls installed")
	}
	// TLS_SKIP_VERIFY=true is refused.
	if code, out, errs := e.installArgs(t, "--set=TLS_SKIP_VERIFY=true"); code == 0 || !strings.Contains(errs+out, "TLS_SKIP_VERIFY") {
		t.Fatalf("--set TLS_SKIP_VERIFY=true: exit %d\n%s\n%s", code, out, errs)
	}
	e.uninstall(t)
	e.assertNothingLeft(t)
}

// kubectlApply does what `kubectl apply -k DIR` does on first use: builds
// with the kustomize CLI and creates every object with the
// last-applied-configuration annotation, as field manager
// kubectl-client-side-apply.
func (e *env) kubectlApply(t *testing.T, dir string) {
	t.Helper()
	nodes, err := kio.FromBytes(cliBuild(t, kustomizeCLI(t), dir))
	if err != nil {
		t.Fatal(err)
	}
	c := e.installer(t)
	for _, n := range nodes {
		data, err := n.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["kubectl.kubernetes.io/last-applied-configuration"] = string(data)
		u.SetAnnotations(ann)
		ri, err := c.resource(refOf(u))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Create(t.Context(), u, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
			t.Fatalf("kubectl apply: create %s: %v", refOf(u), err)
		}
	}
}

// testKubectlThenInstall: `kubectl apply -k` of the same settings, then
// `gcp-t4 install`, needs no --force-conflicts; and a kubectl-only install
// is uninstalled through the part-of label.
func (e *env) testKubectlThenInstall(t *testing.T) {
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	// A kubectl user sets GCP_CLUSTER_ID to the kube-system UID as
	// docs/install.md says; gcp-t4 install then finds the same value.
	kubeSystem, err := e.cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := Settings{Config: withRequired(ClusterIDKey, string(kubeSystem.UID))}
	dir, err := s.WriteTree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.kubectlApply(t, dir)
	// The fieldRef is atomic: without apiVersion spelled out, an apply
	// conflicts with what kubectl's create (defaulted) owns.
	ds := e.daemonSet(t)
	env := container(ds, "cloud-api-adaptor-con").Env
	probe := map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": DaemonSetName, "namespace": Namespace},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "cloud-api-adaptor"}}, "template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": "cloud-api-adaptor"}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "cloud-api-adaptor-con", "env": []any{map[string]any{
				"name": env[0].Name, "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}}}}}}}}}
	data, _ := json.Marshal(probe)
	_, err = e.cs.AppsV1().DaemonSets(Namespace).Patch(t.Context(), DaemonSetName, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "without-apiversion", DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "fieldRef") {
		t.Errorf("apply of a fieldRef without apiVersion: err = %v, want the conflict the manifests avoid", err)
	}
	if code, out, errs := e.install(t); code != 0 {
		t.Fatalf("gcp-t4 install after kubectl apply -k: exit %d\n%s\n%s", code, out, errs)
	}
	e.uninstall(t)
	e.assertNothingLeft(t)

	// kubectl apply -k alone: no inventory, found by label.
	e.kubectlApply(t, dir)
	out := e.uninstall(t)
	mustContain(t, "uninstall stdout", out, "no inventory", "removing the objects labelled", "deleted DaemonSet/"+Namespace+"/"+DaemonSetName)
	e.assertNothingLeft(t)
}

// testFailedInstallUninstalls: an install that fails on the last object
// (a DaemonSet another manager owns the image of) has written its
// inventory first, so uninstall removes what it did create.
func (e *env) testFailedInstallUninstalls(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	objs, err := Build(Settings{Config: withRequired()})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, func() error {
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
		return err
	})
	var ds *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			ds = o.DeepCopy()
		}
	}
	cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	cs[0].(map[string]any)["image"] = "someone/else:1"
	_ = unstructured.SetNestedSlice(ds.Object, cs, "spec", "template", "spec", "containers")
	ds.SetLabels(nil)
	data, _ := json.Marshal(ds.Object)
	if _, err := e.cs.AppsV1().DaemonSets(Namespace).Patch(ctx, DaemonSetName, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.install(t, "--image=ghcr.io/you/caa-gcp-t4:v1")
	if code != 1 || !strings.Contains(errs, "--force-conflicts") {
		t.Fatalf("install over a conflicting DaemonSet: exit %d\n%s\n%s", code, out, errs)
	}
	if len(e.ours(t)) == 0 {
		t.Fatal("the failed install created nothing; the test needs it to fail part way")
	}
	out = e.uninstall(t)
	if strings.Contains(out, "nothing to uninstall") {
		t.Fatalf("uninstall after a failed install:\n%s", out)
	}
	mustContain(t, "uninstall stdout", out, "deleted ServiceAccount/"+Namespace+"/cloud-api-adaptor", "keeping DaemonSet/"+Namespace+"/"+DaemonSetName+": it existed before install")
	e.assertNothingLeft(t)
	_ = e.cs.AppsV1().DaemonSets(Namespace).Delete(ctx, DaemonSetName, metav1.DeleteOptions{})
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{})
	e.waitNamespaceGone(t)
}

// caaCanIn asks RBAC whether namespace ns's CAA ServiceAccount may do verb.
func (e *env) caaCanIn(t *testing.T, ns, verb, group, resource, sub string) bool {
	t.Helper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + ns + ":cloud-api-adaptor",
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: sub},
	}}
	out, err := e.cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.Status.Allowed
}

// testNamespace: --namespace moves everything, RBAC subjects included, and
// upgrades and uninstall find it there.
func (e *env) testNamespace(t *testing.T) {
	const ns = "peer-pods"
	e.setNodes(t, gkeNode("gke-c-peer-1", "peer", "ubuntu", true))
	if code, out, errs := e.install(t, "--namespace="+ns); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	if _, err := e.cs.AppsV1().DaemonSets(ns).Get(t.Context(), DaemonSetName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ verb, group, res, sub string }{{"get", "", "pods", ""}, {"patch", "", "nodes", "status"}, {"create", "confidentialcontainers.org", "peerpods", ""}, {"get", "", "nodes", ""}} {
		if !e.caaCanIn(t, ns, c.verb, c.group, c.res, c.sub) {
			t.Errorf("CAA's ServiceAccount in %s may not %s %s/%s: the binding's subject did not follow", ns, c.verb, c.res, c.sub)
		}
	}
	if _, err := e.cs.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s created with --namespace %s: %v", Namespace, ns, err)
	}
	if code, out, errs := e.installArgs(t, "--set=GCP_ZONES=auto"); code != 0 || e.configMap(t, ns)["GCP_ZONES"] != "auto" {
		t.Fatalf("upgrade in place: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := e.installArgs(t, "--namespace=elsewhere"); code != 1 || !strings.Contains(errs, "CAA is installed in namespace peer-pods") {
		t.Errorf("install into a second namespace: exit %d, %s", code, errs)
	}
	out := e.uninstall(t)
	mustContain(t, "uninstall stdout", out, "deleted Namespace/"+ns)
	e.assertNothingLeft(t)
}

// testRuntimeClassAdoptable: --runtimeclass=on creates kata-remote with the
// ownership metadata Helm checks; once Helm wrote it, neither an upgrade
// nor uninstall deletes it.
func (e *env) testRuntimeClassAdoptable(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	if code, out, errs := e.install(t, "--runtimeclass=on"); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	rc, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Labels["app.kubernetes.io/managed-by"] != "Helm" || rc.Annotations[helmReleaseAnnotation] != "kata-deploy" || rc.Annotations[helmNamespaceAnnotation] != "kube-system" {
		t.Errorf("RuntimeClass metadata %v %v: not adoptable by the kata-deploy release", rc.Labels, rc.Annotations)
	}
	// An auto re-install keeps ours.
	if code, out, errs := e.install(t); code != 0 || strings.Contains(out, "pruned RuntimeClass") {
		t.Fatalf("re-install: exit %d\n%s\n%s", code, out, errs)
	}
	// Helm adopts it: its kube client updates the object as manager "helm".
	rc, _ = e.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassName, metav1.GetOptions{})
	rc.Labels["kata-deploy/instance"] = "default"
	if _, err := e.cs.NodeV1().RuntimeClasses().Update(ctx, rc, metav1.UpdateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.install(t)
	if code != 0 {
		t.Fatalf("re-install after the adoption: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "stdout", out, "left RuntimeClass/"+RuntimeClassName+" to the Helm release that adopted it")
	e.uninstall(t)
	if _, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassName, metav1.GetOptions{}); err != nil {
		t.Errorf("the adopted RuntimeClass was deleted: %v", err)
	}
	_ = e.cs.NodeV1().RuntimeClasses().Delete(ctx, RuntimeClassName, metav1.DeleteOptions{})
	e.assertNothingLeft(t)
}

// testCriticalPods: with the API server limiting system-node-critical as
// GKE does, a pod of the DaemonSet's template is admitted because of the
// quota install ships, and refused without it.
func (e *env) testCriticalPods(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	if code, out, errs := e.install(t); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	ds := e.daemonSet(t)
	spec := ds.Spec.Template.Spec
	if spec.PriorityClassName != "system-node-critical" {
		t.Fatalf("priorityClassName %q", spec.PriorityClassName)
	}
	caa := container(ds, "cloud-api-adaptor-con")
	if caa.Resources.Requests.Cpu().IsZero() || caa.Resources.Requests.Memory().IsZero() || caa.Resources.Limits.Memory().IsZero() {
		t.Errorf("CAA resources %+v", caa.Resources)
	}
	tolerated := false
	for _, tol := range spec.Tolerations {
		tolerated = tolerated || (tol.Key == SelectionLabel && tol.Operator == corev1.TolerationOpExists)
	}
	if !tolerated {
		t.Errorf("tolerations %+v: CAA must run on a tainted peer-pods pool", spec.Tolerations)
	}
	pod := func(name string) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}, Spec: *spec.DeepCopy()}
		p.Spec.NodeName = "worker-1"
		_, err := e.cs.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	e.waitQuotaStatus(t)
	if err := pod("caa-probe"); err != nil {
		t.Fatalf("a pod of the DaemonSet's template was refused: %v", err)
	}
	if err := e.cs.CoreV1().ResourceQuotas(Namespace).Delete(ctx, "caa-gcp-t4-critical-pods", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pod("caa-probe-2"); err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes") {
		t.Errorf("without the quota: err = %v, want the API server's refusal (so the test can fail)", err)
	}
	_ = e.cs.CoreV1().Pods(Namespace).Delete(ctx, "caa-probe", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	e.uninstall(t)
	e.assertNothingLeft(t)
}

// testPruneAfterRollout: objects the new settings drop (here the WIF
// ConfigMap when switching to ADC) stay until the rollout is done, so a
// pod of the old revision that restarts still starts.
func (e *env) testPruneAfterRollout(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	wif := writeTemp(t, "wif.json", testWIFConfig)
	if code, out, errs := e.install(t, "--wif-credential-config="+wif); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	e.dsController.Store(false)
	code, out, errs := e.installArgs(t, "--use-adc", "--rollout-timeout=1s")
	e.dsController.Store(true)
	if code != 1 || !strings.Contains(errs, "not finished") {
		t.Fatalf("rollout should time out: exit %d\n%s\n%s", code, out, errs)
	}
	if _, err := e.cs.CoreV1().ConfigMaps(Namespace).Get(ctx, wifConfigMap, metav1.GetOptions{}); err != nil {
		t.Fatalf("the old revision's ConfigMap was pruned before its rollout finished: %v", err)
	}
	code, out, errs = e.installArgs(t)
	if code != 0 {
		t.Fatalf("re-run: exit %d\n%s\n%s", code, out, errs)
	}
	mustContain(t, "stdout", out, "pruned ConfigMap/"+Namespace+"/"+wifConfigMap)
	if _, err := e.cs.CoreV1().ConfigMaps(Namespace).Get(ctx, wifConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("gcp-wif after the rollout: %v", err)
	}
	e.uninstall(t)
	e.assertNothingLeft(t)
}

// waitQuotaStatus waits for the stand-in quota controller: admission
// refuses pods a quota without status covers.
func (e *env) waitQuotaStatus(t *testing.T) {
	t.Helper()
	for range 300 {
		q, err := e.cs.CoreV1().ResourceQuotas(Namespace).Get(t.Context(), "caa-gcp-t4-critical-pods", metav1.GetOptions{})
		if err == nil && len(q.Status.Hard) > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the ResourceQuota got no status")
}

// testHelmReleaseRefused: a DaemonSet upstream's chart installed (Helm
// annotates every object it owns; test/helm shows the chart's does) is
// left to helm upgrade, untouched.
func (e *env) testHelmReleaseRefused(t *testing.T) {
	ctx := t.Context()
	e.setNodes(t, node("worker-1", map[string]string{labelWorker: ""}, "", "v1.33.1", "Ubuntu 24.04 LTS"))
	mustCreate(t, func() error {
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
		return err
	})
	labels := map[string]string{"app": "cloud-api-adaptor"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName, Namespace: Namespace, Annotations: map[string]string{helmReleaseAnnotation: "peerpods", helmNamespaceAnnotation: Namespace}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cloud-api-adaptor-con", Image: "ghcr.io/example/caa-gcp-t4:v1", Command: []string{"/usr/local/bin/entrypoint.sh"}}}}}}}
	mustCreate(t, func() error {
		_, err := e.cs.AppsV1().DaemonSets(Namespace).Create(ctx, ds, metav1.CreateOptions{})
		return err
	})
	code, _, errs := e.install(t)
	if code != 1 || !strings.Contains(errs, `belongs to Helm release "peerpods"`) || !strings.Contains(errs, "helm upgrade") {
		t.Errorf("install over a Helm release: exit %d, %s", code, errs)
	}
	var o, errb bytes.Buffer
	if e.uninstallMain(ctx, []string{"--kubeconfig=" + e.cp.Kubeconfig}, &o, &errb, nil) != 1 || !strings.Contains(errb.String(), "helm uninstall peerpods") {
		t.Errorf("uninstall of a Helm release: %s", errb.String())
	}
	if left := e.ours(t); len(left) > 0 {
		t.Errorf("objects written over a Helm release: %v", left)
	}
	_ = e.cs.AppsV1().DaemonSets(Namespace).Delete(ctx, DaemonSetName, metav1.DeleteOptions{})
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{})
	e.waitNamespaceGone(t)
}
