package install

import (
	"bytes"
	"encoding/json"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

// effectiveEnv is the environment the kubelet gives a container: each
// envFrom source in order (a later source wins), then env, which wins over
// envFrom ("Values defined by an Env with a duplicate key will take
// precedence", k8s.io/api core/v1 Container.EnvFrom). A valueFrom
// secretKeyRef resolves to the Secret's value. secrets and configMaps are
// the objects' data by name; a missing optional one contributes nothing.
func effectiveEnv(c *corev1.Container, secrets, configMaps map[string]map[string]string) map[string]string {
	out := map[string]string{}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.SecretRef != nil:
			data = secrets[from.SecretRef.Name]
		case from.ConfigMapRef != nil:
			data = configMaps[from.ConfigMapRef.Name]
		}
		for k, v := range data {
			out[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			out[e.Name] = secrets[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key]
		case e.ValueFrom.ConfigMapKeyRef != nil:
			out[e.Name] = configMaps[e.ValueFrom.ConfigMapKeyRef.Name][e.ValueFrom.ConfigMapKeyRef.Key]
		default:
			out[e.Name] = "(downward API)"
		}
	}
	return out
}

// keyMaterial are strings only a key's holder has: its private key, a
// piece of it, and its JSON.
func keyMaterial(key []byte) []string {
	var k struct {
		PrivateKey string `json:"private_key"`
	}
	_ = json.Unmarshal(key, &k)
	return []string{"PRIVATE KEY", k.PrivateKey[40:80], string(key)}
}

// assertNoKeyInEnv fails when any variable of the container's effective
// environment carries the key.
func assertNoKeyInEnv(t *testing.T, what string, c *corev1.Container, key []byte, secrets, configMaps map[string]map[string]string) {
	t.Helper()
	for name, v := range effectiveEnv(c, secrets, configMaps) {
		for _, m := range keyMaterial(key) {
			if m != "" && strings.Contains(v, m) {
				t.Errorf("%s: environment variable %s carries the key (readable in /proc/PID/environ)", what, name)
				break
			}
		}
	}
}

// secretVolumeFile is the path in c where volume vol's secret item key is
// mounted, "" when it is not.
func secretVolumeFile(ps *corev1.PodSpec, c *corev1.Container, secret, key string) (file string, v *corev1.SecretVolumeSource) {
	for i := range ps.Volumes {
		s := ps.Volumes[i].Secret
		if s == nil || s.SecretName != secret {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name != ps.Volumes[i].Name || !m.ReadOnly || m.SubPath != "" {
				continue
			}
			for _, it := range s.Items {
				if it.Key == key {
					return path.Join(m.MountPath, it.Path), s
				}
			}
		}
	}
	return "", nil
}

// assertCAAKeyAsFile: CAA's container reads the key from keyPath through
// GOOGLE_APPLICATION_CREDENTIALS, a root-only file of an optional Secret
// volume, and no variable of its environment carries it.
func assertCAAKeyAsFile(t *testing.T, ps *corev1.PodSpec, key []byte, secrets, configMaps map[string]map[string]string) {
	t.Helper()
	c := podContainer(ps, "cloud-api-adaptor-con")
	file, v := secretVolumeFile(ps, c, SecretName, credentialsFile)
	if file != keyPath {
		t.Errorf("CAA: %s's %s mounted at %q, want %s", SecretName, credentialsFile, file, keyPath)
	} else if v.Optional == nil || !*v.Optional || v.DefaultMode == nil || *v.DefaultMode != 0o400 {
		t.Errorf("CAA's key volume %+v: want optional, defaultMode 0400", v)
	}
	env := effectiveEnv(c, secrets, configMaps)
	if env["GOOGLE_APPLICATION_CREDENTIALS"] != keyPath {
		t.Errorf("CAA: GOOGLE_APPLICATION_CREDENTIALS=%q, want %s", env["GOOGLE_APPLICATION_CREDENTIALS"], keyPath)
	}
	if v, ok := env[credentialsFile]; ok && v != "" {
		t.Errorf("CAA: %s is not empty in the effective environment", credentialsFile)
	}
	assertNoKeyInEnv(t, "CAA", c, key, secrets, configMaps)
}

// assertNoCAAKeyMount: without a key, nothing of the key component.
func assertNoCAAKeyMount(t *testing.T, ps *corev1.PodSpec) {
	t.Helper()
	c := podContainer(ps, "cloud-api-adaptor-con")
	for _, v := range ps.Volumes {
		if v.Secret != nil {
			t.Errorf("CAA without a key mounts Secret %s", v.Secret.SecretName)
		}
	}
	for _, e := range c.Env {
		if e.Name == credentialsFile || (e.Name == "GOOGLE_APPLICATION_CREDENTIALS" && e.Value == keyPath) {
			t.Errorf("CAA without a key has env %s=%q", e.Name, e.Value)
		}
	}
}

// assertReaperKeyAsFile: the reaper reads its own key from the optional
// Secret's file, named by REAPER_CREDENTIALS_FILE, readable by its group
// (fsGroup), and takes no Secret into its environment.
func assertReaperKeyAsFile(t *testing.T, ps *corev1.PodSpec) {
	t.Helper()
	c := podContainer(ps, "reaper")
	file, v := secretVolumeFile(ps, c, gc.ReaperCredentialsSecret, credentialsFile)
	if file == "" || file != effectiveEnv(c, nil, nil)[gc.ReaperCredentialsEnv] {
		t.Errorf("reaper: %s mounted at %q, %s=%q; want the same file", gc.ReaperCredentialsSecret, file, gc.ReaperCredentialsEnv, effectiveEnv(c, nil, nil)[gc.ReaperCredentialsEnv])
	} else if v.Optional == nil || !*v.Optional || v.DefaultMode == nil || *v.DefaultMode != 0o400 {
		t.Errorf("reaper's key volume %+v: want optional, defaultMode 0400 (group read from fsGroup)", v)
	}
	sc := ps.SecurityContext
	if sc == nil || sc.FSGroup == nil || sc.RunAsUser == nil || *sc.FSGroup != *sc.RunAsUser {
		t.Errorf("reaper pod security context %+v: want fsGroup = its non-root user, so it can read the 0400 key file (the kubelet makes it 0440 to the group)", sc)
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			t.Errorf("reaper takes Secret %s into its environment", e.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("reaper env %s from Secret %s", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
}

func podContainer(ps *corev1.PodSpec, name string) *corev1.Container {
	for i := range ps.Containers {
		if ps.Containers[i].Name == name {
			return &ps.Containers[i]
		}
	}
	return &corev1.Container{}
}

// renderedData is the data of the rendered Secrets and ConfigMaps.
func renderedData(t *testing.T, m resmap.ResMap) (secrets, configMaps map[string]map[string]string) {
	t.Helper()
	secrets, configMaps = map[string]map[string]string{}, map[string]map[string]string{}
	for _, r := range m.Resources() {
		switch r.GetKind() {
		case "Secret":
			s := decode[corev1.Secret](t, m, "Secret", r.GetName())
			d := map[string]string{}
			for k, v := range s.Data {
				d[k] = string(v)
			}
			secrets[s.Name] = d
		case "ConfigMap":
			configMaps[r.GetName()] = decode[corev1.ConfigMap](t, m, "ConfigMap", r.GetName()).Data
		}
	}
	return secrets, configMaps
}

// TestKeyReachesCAAAndTheReaperAsAFile: with --credentials-file the key
// is a file in CAA's pod and in no variable of its environment, though
// peer-pods-secret still comes through envFrom; without a key, no key
// component. The reaper always reads its own optional key as a file.
func TestKeyReachesCAAAndTheReaperAsAFile(t *testing.T) {
	key := testKey()
	m := mustRender(t, Settings{Credentials: key, GKERemediation: true})
	secrets, cms := renderedData(t, m)
	if !strings.Contains(secrets[SecretName][credentialsFile], "caa@p.iam") {
		t.Fatalf("%s lacks the key", SecretName)
	}
	ds := daemonSetOf(t, m)
	assertCAAKeyAsFile(t, &ds.Spec.Template.Spec, key, secrets, cms)
	// The test's model of precedence sees the key where a container
	// takes the Secret with envFrom and no override.
	bare := mustRender(t, Settings{})
	if c := container(daemonSetOf(t, bare), "cloud-api-adaptor-con"); !strings.Contains(effectiveEnv(c, secrets, cms)[credentialsFile], "PRIVATE KEY") {
		t.Error("effectiveEnv does not see a Secret's key through envFrom")
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		assertNoKeyInEnv(t, "container "+c.Name, &c, key, secrets, cms)
	}
	assertReaperKeyAsFile(t, &asDeployment(t, find(rendered(t, Settings{Credentials: key}), "Deployment", ReaperName)).Spec.Template.Spec)

	for name, s := range map[string]Settings{"no key": {}, "wif": {WIFCredentialConfig: testWIFConfig}} {
		m := mustRender(t, s)
		assertNoCAAKeyMount(t, &daemonSetOf(t, m).Spec.Template.Spec)
		k, err := s.kustomization()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(k), componentKey) {
			t.Errorf("%s: the top-level kustomization adds %s", name, componentKey)
		}
		assertReaperKeyAsFile(t, &asDeployment(t, find(rendered(t, s), "Deployment", ReaperName)).Spec.Template.Spec)
	}
}

// liveData is the data of the Secrets and ConfigMaps in ns on the API
// server.
func (e *env) liveData(t *testing.T, ns string) (secrets, configMaps map[string]map[string]string) {
	t.Helper()
	secrets, configMaps = map[string]map[string]string{}, map[string]map[string]string{}
	sl, err := e.cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sl.Items {
		d := map[string]string{}
		for k, v := range s.Data {
			d[k] = string(v)
		}
		secrets[s.Name] = d
	}
	cl, err := e.cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cl.Items {
		configMaps[c.Name] = c.Data
	}
	return secrets, configMaps
}

// assertLiveKeyAsFile checks, on the API server after server-side apply,
// the DaemonSet and reaper Deployment a key install left: the key, as
// peer-pods-secret holds it, is a file of CAA's pod and in no variable of
// any container's environment.
func (e *env) assertLiveKeyAsFile(t *testing.T) {
	t.Helper()
	secrets, cms := e.liveData(t, Namespace)
	key := []byte(secrets[SecretName][credentialsFile])
	if !strings.Contains(string(key), "PRIVATE KEY") {
		t.Fatalf("%s holds no key", SecretName)
	}
	ds := e.daemonSet(t)
	assertCAAKeyAsFile(t, &ds.Spec.Template.Spec, key, secrets, cms)
	for _, c := range ds.Spec.Template.Spec.Containers {
		assertNoKeyInEnv(t, "container "+c.Name, &c, key, secrets, cms)
	}
	d, err := e.cs.AppsV1().Deployments(Namespace).Get(t.Context(), ReaperName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	assertReaperKeyAsFile(t, &d.Spec.Template.Spec)
	assertNoKeyInEnv(t, "reaper", &d.Spec.Template.Spec.Containers[0], key, secrets, cms)
}

// TestInstallMDOverlayKeepsTheKeyOutOfEnv builds the overlay of your own
// that docs/install.md shows for `kubectl apply -k` (its remote bases
// pointed at this tree) with a key file: the key reaches CAA as a file and
// in no environment variable, as with `gcp-t4 install --credentials-file`.
func TestInstallMDOverlayKeepsTheKeyOutOfEnv(t *testing.T) {
	blocks, err := doccmd.File(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	var shown []byte
	for _, b := range blocks {
		if body, ok := strings.CutPrefix(b.Text, "# my-cluster/kustomization.yaml\n"); ok && b.Lang == "yaml" {
			shown = []byte(body)
			break
		}
	}
	if shown == nil {
		t.Fatal("docs/install.md has no my-cluster/kustomization.yaml block")
	}
	remote := regexp.MustCompile(`https://github\.com/caa-gcp-t4/caa-gcp-t4//install/([^?\s]+)\?ref=<tag>`)
	kust := remote.ReplaceAll(shown, []byte("../$1"))
	if !bytes.Contains(kust, []byte("../"+componentKey)) {
		t.Errorf("the guide's overlay with a key file does not add %s:\n%s", componentKey, shown)
	}
	files, err := Settings{}.files()
	if err != nil {
		t.Fatal(err)
	}
	mem := filesys.MakeFsInMemory()
	for p, data := range files {
		if err := mem.WriteFile("/"+p, data); err != nil {
			t.Fatal(err)
		}
	}
	key := testKey()
	for p, data := range map[string][]byte{"/my-cluster/kustomization.yaml": kust, "/my-cluster/key.json": key} {
		if err := mem.WriteFile(p, data); err != nil {
			t.Fatal(err)
		}
	}
	rm, err := renderDir(mem, "/my-cluster")
	if err != nil {
		t.Fatalf("the guide's overlay: %v\n%s", err, kust)
	}
	secrets, cms := renderedData(t, rm)
	if secrets[SecretName][credentialsFile] != string(key) {
		t.Fatalf("the guide's overlay puts no key in %s", SecretName)
	}
	assertCAAKeyAsFile(t, &daemonSetOf(t, rm).Spec.Template.Spec, key, secrets, cms)
}
