package uninstall

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

const clusterUID = "5e2f3c1a-0000-4000-8000-000000000001"

// everyKey is a peer-pods-cm with a value other than the default for every
// key of the provider's table. A key the provider gains fails the test
// until it has one here, so no reader can miss it unnoticed. Some values
// are spelled as CAA accepts them and Go's flag parser reads otherwise (a
// leading zero, capitals and spaces), so a reader that parses as the
// flag does, not as the provider does, differs.
func everyKey(t *testing.T) map[string]string {
	t.Helper()
	values := map[string]string{
		"GCP_CREDENTIALS":              `{"type":"service_account","project_id":"demo-project"}`,
		"GCP_PROJECT_ID":               "demo-project",
		"GCP_ZONE":                     "us-central1-a",
		"GCP_ZONES":                    "us-central1-b, us-central1-c",
		"PODVM_IMAGE_NAME":             "podvm-t4",
		"GCP_NETWORK":                  "global/networks/gpu",
		"GCP_SUBNETWORK":               "gpu-subnet",
		"GCP_DISK_TYPE":                "pd-ssd",
		"ROOT_VOLUME_SIZE":             " 080",
		"GCP_INSTANCE_TEMPLATE":        "podvm-template",
		"GCP_PROFILES_FILE":            "/etc/gcp-t4/profiles.yaml",
		"GCP_PROFILES":                 "profiles: []\n",
		"GCP_PROVISIONING_MODEL":       "SPOT",
		"GCP_UNAVAILABLE_OFFERING_TTL": "5m",
		"GCP_SPOT_FALLBACK":            "TRUE ",
		"GCP_MUTATIONS_PER_SECOND":     "2.5",
		"GCP_SERVICE_ACCOUNT":          "podvm@demo-project.iam.gserviceaccount.com",
		"GCP_LABELS":                   "team=ml,env=dev",
		"GCP_NETWORK_TAGS":             "podvm,gpu",
		"GCP_INSTANCE_TYPES":           "t4-1,n1-standard-8",
		"GCP_ALLOWED_IMAGES":           "podvm-t4-next",
		"GCP_MAX_GPUS_PER_POD":         "010",
		"GCP_MAX_VCPUS_PER_POD":        "32",
		"GCP_MAX_GPUS_PER_NAMESPACE":   "8",
		"GCP_MAX_GPUS_TOTAL":           "16",
		"GCP_MAX_MEMORY_PER_POD":       "61440",
		"USE_PUBLIC_IP":                "1",
		"GCP_NIC_TYPE":                 "GVNIC",
		"GCP_PROFILE_IMAGES":           "h100-cc=podvm-cc",
		"GCP_CACHE_IMAGE":              "podvm-cache-llm",
		"GCP_CACHE_VERITY":             "root=0f3a5b7c9d1e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f1a,offset=10468982784",
		"GCP_CLUSTER_ID":               clusterUID,
		"GCP_CLUSTER_NAME":             "gpu",
		"NODE_NAME":                    "worker-1",
		"GCP_ENDPOINT":                 "http://127.0.0.1:8089/",
	}
	defaults, err := gcpt4.ConfigFromEnv(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	for _, k := range gcpt4.Keys() {
		v, ok := values[k.Env]
		if !ok {
			t.Errorf("provider key %s (flag -%s) has no value in everyKey: give it one other than its default %q", k.Env, k.Flag, k.Default)
			continue
		}
		// The value must change the configuration, or a reader that
		// drops it would go unseen.
		one, err := gcpt4.ConfigFromEnv(func(name string) (string, bool) { return v, name == k.Env })
		if err != nil {
			t.Errorf("%s=%q: %v", k.Env, v, err)
		} else if reflect.DeepEqual(one, defaults) {
			t.Errorf("%s=%q is the default: pick another", k.Env, v)
		}
		data[k.Env] = v
	}
	// Keys of CAA's own and of the reaper beside the provider's, as
	// install writes them.
	data["CLOUD_PROVIDER"], data["VXLAN_PORT"], data["REAPER_GRACE"] = "gcp-t4", "4789", "10m"
	return data
}

// cluster is a cluster where install put CAA, its DaemonSet reading data
// through envFrom.
func cluster(data map[string]string) *fake.Clientset {
	labels := map[string]string{"app": "cloud-api-adaptor"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: install.DaemonSetName, Namespace: install.Namespace}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cloud-api-adaptor-con", EnvFrom: []corev1.EnvFromSource{
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: install.SecretName}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: install.ConfigMapName}}},
		}}}}},
	}}
	return fake.NewClientset(ds,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: install.ConfigMapName, Namespace: install.Namespace}, Data: data},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(clusterUID)}})
}

// providerFlags are a command's provider flags, registered as gc, status
// and preflight register them, none given.
func providerFlags(t *testing.T) (*flag.FlagSet, *providerflags.Flags) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pf := providerflags.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return fs, pf
}

// differing says, for each field of got that differs from want, both
// values.
func differing(got, want gcpt4.Config) []string {
	var out []string
	vg, vw := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range vg.NumField() {
		if g, w := vg.Field(i).Interface(), vw.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			out = append(out, fmt.Sprintf("%s: %#v, CAA %#v", vg.Type().Field(i).Name, g, w))
		}
	}
	return out
}

// TestGuardReadsWhatGCAndPreflightRead: from the same peer-pods-cm, the
// uninstall guard's provider configuration is the one `gcp-t4 gc` and
// `gcp-t4 status -gce` fill their flags with (caaconfig.FromCluster), the
// one `gcp-t4 preflight` fills (caaconfig.Read, then Fill, as its
// settings.go does) and the one CAA builds (the provider's own parse),
// for every key of the provider's table.
func TestGuardReadsWhatGCAndPreflightRead(t *testing.T) {
	for _, k := range gcpt4.Keys() {
		t.Setenv(k.Env, "")
	}
	data := everyKey(t)
	caa, err := gcpt4.ConfigFromEnv(func(name string) (string, bool) { v, ok := data[name]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	cs := cluster(data)

	guard, err := guardOptions{}.config(t.Context(), cs, install.Namespace, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}

	fs, gc := providerFlags(t)
	var grace string
	fs.StringVar(&grace, "grace", "", "")
	filled, source, err := caaconfig.FromCluster(t.Context(), fs, cs, "", os.Getenv, func(w string) { t.Errorf("warned: %s", w) }, setting.Key{Env: "REAPER_GRACE", Flag: "grace"})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(gcpt4.Keys()) + 1; len(filled) != want || source != install.Namespace+"/"+install.ConfigMapName || grace != "10m" {
		t.Errorf("gc filled %d settings (want %d, every provider key and REAPER_GRACE) from %q, grace %q: %s", len(filled), want, source, grace, strings.Join(filled, ", "))
	}

	fs, preflight := providerFlags(t)
	in, err := caaconfig.Read(t.Context(), cs, "", caaconfig.DaemonSet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Fill(fs, os.Getenv); err != nil {
		t.Fatal(err)
	}

	for name, got := range map[string]gcpt4.Config{"uninstall guard": guard, "gc and status": gc.Config(), "preflight": preflight.Config()} {
		if d := differing(got, caa); len(d) > 0 {
			t.Errorf("%s reads peer-pods-cm other than CAA does:\n  %s", name, strings.Join(d, "\n  "))
		}
	}
}

// TestGuardKeepsTheConfigMapsProject: the environment completes what
// peer-pods-cm leaves to the default (here the endpoint), but never
// replaces what it sets: the guard counts the podVMs of CAA's project.
func TestGuardKeepsTheConfigMapsProject(t *testing.T) {
	env := map[string]string{"GCP_PROJECT_ID": "my-shell-project", "GCP_ENDPOINT": "http://127.0.0.1:8089/"}
	cs := cluster(map[string]string{"GCP_PROJECT_ID": "demo-project", "GCP_ZONE": "us-central1-a", "GCP_CLUSTER_ID": "copied-from-elsewhere"})
	cfg, err := guardOptions{}.config(t.Context(), cs, install.Namespace, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProjectID != "demo-project" || cfg.Endpoint != env["GCP_ENDPOINT"] || cfg.ClusterID != clusterUID {
		t.Errorf("project %q (want peer-pods-cm's), endpoint %q (want the environment's), cluster %q (want kube-system's UID)", cfg.ProjectID, cfg.Endpoint, cfg.ClusterID)
	}
	env["GCP_MAX_GPUS_TOTAL"] = "many"
	if _, err := (guardOptions{}).config(t.Context(), cs, install.Namespace, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil ||
		!strings.Contains(err.Error(), "the environment") || !strings.Contains(err.Error(), "GCP_MAX_GPUS_TOTAL") {
		t.Errorf("a bad value in the environment: %v, want it named as the environment's", err)
	}
}

// A peer-pods-cm naming GCP_PROFILES_FILE, a path inside CAA's pod, does
// not stop the guard: listing podVMs needs no profiles.
func TestGuardListsWithAProfilesFileInThePod(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	cs := cluster(map[string]string{"GCP_PROJECT_ID": fake.Project(), "GCP_ZONE": "us-central1-a", "GCP_ENDPOINT": fake.URL(),
		"GCP_PROFILES_FILE": "/etc/gcp-t4/profiles.yaml", "PODVM_IMAGE_NAME": "podvm-t4", "GCP_NETWORK": "default"})
	vms, p, err := guardOptions{}.podVMs(t.Context(), cs, install.Namespace)
	if err != nil {
		t.Fatalf("the guard with GCP_PROFILES_FILE set: %v", err)
	}
	t.Cleanup(func() { _ = p.Teardown() })
	if len(vms) != 0 {
		t.Errorf("listed %d podVMs in an empty project", len(vms))
	}
}
