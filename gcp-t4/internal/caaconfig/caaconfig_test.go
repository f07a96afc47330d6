package caaconfig

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
)

const ns = "confidential-containers-system"

// caaDaemonSet is CAA's DaemonSet as the kustomize base writes it: the
// Secret, then the ConfigMaps, through envFrom.
func caaDaemonSet(namespace string, configMaps ...string) *appsv1.DaemonSet {
	from := []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "peer-pods-secret"}}}}
	for _, n := range configMaps {
		from = append(from, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	labels := map[string]string{"app": "cloud-api-adaptor"}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonSet, Namespace: namespace, Labels: labels}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cloud-api-adaptor-con", EnvFrom: from}}}},
	}}
}

// caaBinding is the ClusterRoleBinding an install path gives CAA's
// ServiceAccount in namespace.
func caaBinding(name, namespace string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: ServiceAccount, Namespace: namespace}}}
}

func configMap(namespace, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: data}
}

func kubeSystem(uid string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(uid)}}
}

// TestReadFollowsEnvFrom: the ConfigMaps CAA reads are the ones its
// DaemonSet's envFrom names (a kustomize-hashed name included), a later
// one winning; another ConfigMap in the namespace is not read.
func TestReadFollowsEnvFrom(t *testing.T) {
	cs := fake.NewClientset(
		caaDaemonSet(ns, "peer-pods-cm-7h2k9", "peer-pods-cm-extra"),
		configMap(ns, "peer-pods-cm-7h2k9", map[string]string{"GCP_ZONE": "us-central1-a", "GCP_PROJECT_ID": "p-one"}),
		configMap(ns, "peer-pods-cm-extra", map[string]string{"GCP_PROJECT_ID": "p-two"}),
		configMap(ns, "peer-pods-cm", map[string]string{"GCP_NETWORK": "not-read"}),
	)
	in, err := Read(t.Context(), cs, "", DaemonSet)
	if err != nil {
		t.Fatal(err)
	}
	if in.Namespace != ns || in.DaemonSet == nil || in.Source() != ns+"/peer-pods-cm-7h2k9,peer-pods-cm-extra" {
		t.Errorf("found %q, source %q", in.Namespace, in.Source())
	}
	if want := map[string]string{"GCP_ZONE": "us-central1-a", "GCP_PROJECT_ID": "p-two"}; !reflect.DeepEqual(in.Data, want) {
		t.Errorf("data %v, want %v", in.Data, want)
	}
}

func TestReadNothingInstalled(t *testing.T) {
	in, err := Read(t.Context(), fake.NewClientset(), "", DaemonSet)
	if err != nil || in.Source() != "" || in.DaemonSet != nil || in.Data == nil || len(in.Data) != 0 {
		t.Errorf("nothing installed: %+v, %v", in, err)
	}
	if cfg, err := in.Config(); err != nil || cfg.DiskType != "pd-balanced" || cfg.RootVolumeSize != 50 {
		t.Errorf("nothing installed: the provider's defaults, got %+v, %v", cfg, err)
	}
}

func TestReadRefusesTwoInstalls(t *testing.T) {
	cs := fake.NewClientset(caaDaemonSet("a", ConfigMap), caaDaemonSet("b", ConfigMap),
		caaBinding("caa-gcp-t4-cloud-api-adaptor", "a"), caaBinding("caa-gcp-t4-provider", "b"))
	if _, err := Read(t.Context(), cs, "", DaemonSet); err == nil || !strings.Contains(err.Error(), "several namespaces (a, b)") {
		t.Errorf("two installs: %v", err)
	}
}

// A DaemonSet of CAA's name is CAA's only in the install's namespace (the
// default, or the one the install's cluster-scoped ClusterRoleBinding
// names) and selecting the install's pods: a tenant's look-alike in its
// own namespace, whose peer-pods-cm would name another project, is passed
// over and named (control characters escaped); the real one is read.
func TestReadIgnoresALookAlike(t *testing.T) {
	tenant := configMap("team-a", ConfigMap, map[string]string{"GCP_PROJECT_ID": "tenant-proj"})
	lookAlike := caaDaemonSet("team-a", ConfigMap)
	real := configMap(ns, ConfigMap, map[string]string{"GCP_PROJECT_ID": "caa-proj"})

	in, err := Read(t.Context(), fake.NewClientset(lookAlike, tenant, caaDaemonSet(ns, ConfigMap), real), "", DaemonSet)
	if err != nil || in.Namespace != ns || in.Data["GCP_PROJECT_ID"] != "caa-proj" {
		t.Fatalf("look-alike beside the real one: %+v, %v; want %s's", in, err, ns)
	}
	if len(in.Ignored) != 1 || !strings.Contains(in.Ignored[0], "ignored DaemonSet team-a/"+DaemonSet+": namespace team-a is not the install's") {
		t.Errorf("Ignored %q, want the look-alike named", in.Ignored)
	}

	// The look-alike alone: nothing installed, never the tenant's project.
	in, err = Read(t.Context(), fake.NewClientset(lookAlike, tenant), "", DaemonSet)
	if err != nil || in.DaemonSet != nil || len(in.Data) != 0 || len(in.Ignored) != 1 {
		t.Errorf("look-alike alone: %+v, %v; want nothing read and it named", in, err)
	}

	// CAA in a namespace of the admin's choosing, named by the Helm
	// path's binding; a look-alike in the default namespace that selects
	// other pods is passed over too.
	other := caaDaemonSet(ns, ConfigMap)
	other.Spec.Selector.MatchLabels = map[string]string{"app": "mine"}
	cs := fake.NewClientset(caaDaemonSet("peerpods", ConfigMap), configMap("peerpods", ConfigMap, map[string]string{"GCP_PROJECT_ID": "helm-proj"}),
		caaBinding("caa-gcp-t4-provider", "peerpods"), other, real)
	in, err = Read(t.Context(), cs, "", DaemonSet)
	if err != nil || in.Namespace != "peerpods" || in.Data["GCP_PROJECT_ID"] != "helm-proj" {
		t.Fatalf("Helm install in peerpods: %+v, %v", in, err)
	}
	if len(in.Ignored) != 1 || !strings.Contains(in.Ignored[0], ns+"/"+DaemonSet+": it does not select the install's pods (label app=cloud-api-adaptor)") {
		t.Errorf("Ignored %q", in.Ignored)
	}

	// A name that is no namespace a real API server allows, printed safe.
	in, err = Read(t.Context(), fake.NewClientset(caaDaemonSet("x\x1b]52;c;AA\x07", ConfigMap)), "", DaemonSet)
	if err != nil || len(in.Ignored) != 1 || strings.ContainsAny(in.Ignored[0], "\x1b\x07") || !strings.Contains(in.Ignored[0], `x\x1b]52;c;AA\a/`) {
		t.Errorf("control characters: %q, %v", in.Ignored, err)
	}

	// A namespace the admin names is read as named.
	in, err = Read(t.Context(), fake.NewClientset(lookAlike, tenant), "team-a", DaemonSet)
	if err != nil || in.Data["GCP_PROJECT_ID"] != "tenant-proj" || len(in.Ignored) != 0 {
		t.Errorf("-caa-namespace team-a: %+v, %v", in, err)
	}
}

// A ConfigMap the DaemonSet names and that is not there stops CAA's pods:
// Read refuses it, Of lists it.
func TestMissingConfigMap(t *testing.T) {
	ds := caaDaemonSet(ns, ConfigMap)
	cs := fake.NewClientset(ds)
	if _, err := Read(t.Context(), cs, ns, DaemonSet); err == nil || !strings.Contains(err.Error(), ns+"/peer-pods-cm, the ConfigMap CAA reads, does not exist") {
		t.Errorf("Read: %v", err)
	}
	in, err := Of(t.Context(), cs, ds)
	if err != nil || !slices.Equal(in.Missing, []string{ConfigMap}) || len(in.ConfigMaps) != 0 {
		t.Errorf("Of: %+v, %v", in, err)
	}
}

// InNamespace falls back to the ConfigMap install writes when no
// DaemonSet names one: a first install that failed half way.
func TestInNamespaceWithoutDaemonSet(t *testing.T) {
	cs := fake.NewClientset(configMap(ns, ConfigMap, map[string]string{"GCP_PROJECT_ID": "p"}))
	in, err := InNamespace(t.Context(), cs, ns)
	if err != nil || in.Data["GCP_PROJECT_ID"] != "p" || in.DaemonSet != nil || in.Source() != ns+"/peer-pods-cm" {
		t.Errorf("%+v, %v", in, err)
	}
	in, err = InNamespace(t.Context(), fake.NewClientset(), ns)
	if err != nil || !slices.Equal(in.Missing, []string{ConfigMap}) {
		t.Errorf("neither: %+v, %v", in, err)
	}
	cs = fake.NewClientset(caaDaemonSet(ns, "peer-pods-cm-abc"), configMap(ns, "peer-pods-cm-abc", map[string]string{"GCP_PROJECT_ID": "hashed"}),
		configMap(ns, ConfigMap, map[string]string{"GCP_PROJECT_ID": "fixed"}))
	if in, err = InNamespace(t.Context(), cs, ns); err != nil || in.Data["GCP_PROJECT_ID"] != "hashed" {
		t.Errorf("with the DaemonSet: %+v, %v", in, err)
	}
}

// Config is what CAA builds: strict, the key and its fix named after
// where the value came from.
func TestConfigIsStrict(t *testing.T) {
	in := Installed{Namespace: ns, ConfigMaps: []string{ConfigMap}, Data: map[string]string{"ROOT_VOLUME_SIZE": "abc", "GCP_SPOT_FALLBACK": "ture"}}
	_, err := in.Config()
	for _, want := range []string{ns + "/peer-pods-cm: ", "ROOT_VOLUME_SIZE (flag -root-volume-size)", "GCP_SPOT_FALLBACK (flag -spot-fallback)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

// ConfigWith: the environment completes what Data leaves to the default
// and never replaces what it sets; a bad value is named as the
// environment's or Data's, where it came from.
func TestConfigWith(t *testing.T) {
	in := Installed{Namespace: ns, ConfigMaps: []string{ConfigMap}, Data: map[string]string{"GCP_PROJECT_ID": "from-cm", "GCP_ENDPOINT": ""}}
	env := map[string]string{"GCP_PROJECT_ID": "from-env", "GCP_ENDPOINT": "http://127.0.0.1:8089/", "GCP_ZONE": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := in.ConfigWith(lookup)
	if err != nil || cfg.ProjectID != "from-cm" || cfg.Endpoint != env["GCP_ENDPOINT"] || cfg.DiskType != "pd-balanced" {
		t.Errorf("%+v, %v", cfg, err)
	}
	env["ROOT_VOLUME_SIZE"] = "big"
	if _, err := in.ConfigWith(lookup); err == nil || !strings.Contains(err.Error(), "the environment, for a key "+ns+"/peer-pods-cm does not set: ROOT_VOLUME_SIZE") {
		t.Errorf("bad env value: %v", err)
	}
	in.Data["GCP_MAX_GPUS_TOTAL"] = "many"
	if _, err := in.ConfigWith(lookup); err == nil || !strings.HasPrefix(err.Error(), ns+"/peer-pods-cm: GCP_MAX_GPUS_TOTAL") {
		t.Errorf("bad ConfigMap value: %v", err)
	}
}

// providerFlags is a command's provider flags, parsed from args, as gc,
// preflight and status register them.
func providerFlags(t *testing.T, args ...string) (*flag.FlagSet, *providerflags.Flags) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pf := providerflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs, pf
}

// clearProviderEnv unsets every provider variable, so the flags default
// to the provider's hard-coded values.
func clearProviderEnv(t *testing.T) {
	t.Helper()
	for _, k := range gcpt4.Keys() {
		t.Setenv(k.Env, "")
	}
}

// TestFillAsCAAReadsIt: a value is filled as CAA parses it, not as Go's
// flag parser would (an int with a leading zero, a boolean in capitals
// with a space), and one CAA refuses is refused, every one named; a flag
// or an environment variable wins over the ConfigMap.
func TestFillAsCAAReadsIt(t *testing.T) {
	clearProviderEnv(t)
	in := Installed{Namespace: ns, ConfigMaps: []string{ConfigMap}, Data: map[string]string{
		"GCP_MAX_GPUS_PER_POD": "010", "GCP_SPOT_FALLBACK": "TRUE ", "GCP_UNAVAILABLE_OFFERING_TTL": " 90s",
		"GCP_LABELS": "team=ml, env=dev", "GCP_ZONE": "us-central1-a", "GCP_PROJECT_ID": "from-cm", "PODVM_IMAGE_NAME": "from-cm",
		"REAPER_GRACE": "2m",
	}}
	fs, pf := providerFlags(t, "-gcp-project-id", "from-flag")
	var grace string
	fs.StringVar(&grace, "grace", "", "")
	env := map[string]string{"PODVM_IMAGE_NAME": "from-env"}
	filled, err := in.Fill(fs, func(k string) string { return env[k] }, setting.Key{Env: "REAPER_GRACE", Flag: "grace"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"GCP_LABELS", "GCP_MAX_GPUS_PER_POD", "GCP_SPOT_FALLBACK", "GCP_UNAVAILABLE_OFFERING_TTL", "GCP_ZONE", "REAPER_GRACE"}
	if !slices.Equal(filled, want) {
		t.Errorf("filled %v, want %v", filled, want)
	}
	cfg := pf.Config()
	caa, err := in.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxGPUsPerPod != 10 || !cfg.SpotFallback || cfg.UnavailableTTL.String() != "1m30s" || cfg.Labels["env"] != "dev" || cfg.Zone != "us-central1-a" {
		t.Errorf("filled config %+v", cfg)
	}
	if cfg.MaxGPUsPerPod != caa.MaxGPUsPerPod || cfg.SpotFallback != caa.SpotFallback || !reflect.DeepEqual(cfg.Labels, caa.Labels) {
		t.Errorf("the command's config %+v is not CAA's %+v", cfg, caa)
	}
	if cfg.ProjectID != "from-flag" || grace != "2m" {
		t.Errorf("project %q (the flag wins), grace %q", cfg.ProjectID, grace)
	}

	in.Data = map[string]string{"ROOT_VOLUME_SIZE": "abc", "GCP_SPOT_FALLBACK": "ture", "REAPER_GRACE": "soon"}
	fs, _ = providerFlags(t)
	fs.Duration("grace", 0, "")
	_, err = in.Fill(fs, os.Getenv, setting.Key{Env: "REAPER_GRACE", Flag: "grace"})
	for _, want := range []string{ns + "/peer-pods-cm ROOT_VOLUME_SIZE (flag -root-volume-size): \"abc\" is not a whole number",
		ns + "/peer-pods-cm GCP_SPOT_FALLBACK (flag -spot-fallback)", ns + "/peer-pods-cm REAPER_GRACE: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

// FromCluster fills the cluster ID from kube-system when nothing gives
// it, and says so.
func TestFromClusterFillsClusterID(t *testing.T) {
	clearProviderEnv(t)
	const uid = "5e2f3c1a-0000-4000-8000-000000000001"
	cs := fake.NewClientset(kubeSystem(uid), caaDaemonSet(ns, ConfigMap), configMap(ns, ConfigMap, map[string]string{"GCP_PROJECT_ID": "p"}))
	fs, pf := providerFlags(t)
	filled, source, err := FromCluster(t.Context(), fs, cs, "", os.Getenv, func(w string) { t.Errorf("warned: %s", w) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(filled, []string{"GCP_CLUSTER_ID (kube-system's UID)", "GCP_PROJECT_ID"}) || source != ns+"/peer-pods-cm" || pf.Config().ClusterID != uid {
		t.Errorf("filled %v from %q, cluster ID %q", filled, source, pf.Config().ClusterID)
	}
	if _, _, err = FromCluster(t.Context(), fs, fake.NewClientset(), "", os.Getenv, func(string) {}); err != nil {
		t.Errorf("the ID already set, nothing installed: %v", err)
	}
	fs, _ = providerFlags(t)
	if _, _, err = FromCluster(t.Context(), fs, fake.NewClientset(), "", os.Getenv, func(string) {}); err == nil || !strings.Contains(err.Error(), "GCP_CLUSTER_ID is not set") {
		t.Errorf("no kube-system: %v", err)
	}
}

// Every command's clients get install's rate limit and their own user
// agent.
func TestConnectRateLimit(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	path := filepath.Join(t.TempDir(), "config")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: a, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: a, context: {cluster: a, user: u}}]
current-context: a
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfig(path, "", "gcp-t4-test")
	if err != nil || cfg.QPS != QPS || cfg.Burst != Burst || cfg.UserAgent != "gcp-t4-test" {
		t.Fatalf("%+v, %v", cfg, err)
	}
	c, err := Connect(path, "", "gcp-t4-test")
	if err != nil || c.Kube == nil || c.Dynamic == nil || c.Mapper == nil {
		t.Fatalf("%+v, %v", c, err)
	}
	if _, err := Connect(filepath.Join(t.TempDir(), "none"), "", "x"); err == nil || !strings.Contains(err.Error(), "pass -kubeconfig") {
		t.Errorf("no kubeconfig: %v", err)
	}
}
