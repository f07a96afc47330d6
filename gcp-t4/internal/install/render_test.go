package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// repoInstall is the canonical kustomize tree, relative to this package.
const repoInstall = "../../../install"

// TestNoSecretCommitted: nothing under install/ carries a key, and the
// base's Secret is empty until the user's file is merged in.
// TestFieldRefsSpellOutAPIVersion: a fieldRef is atomic in server-side
// apply, and the API server defaults its apiVersion to v1; a manifest that
// leaves it out makes `kubectl apply -k` then `gcp-t4 install` (or the
// other way round) conflict on it. Every rendered fieldRef names it.
func TestFieldRefsSpellOutAPIVersion(t *testing.T) {
	m := mustRender(t, Settings{GKERemediation: true, Config: withRequired()})
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(y), "\n")
		for i, l := range lines {
			if strings.TrimSpace(l) != "fieldRef:" {
				continue
			}
			ok := false
			for _, next := range lines[i+1 : min(i+3, len(lines))] {
				ok = ok || strings.TrimSpace(next) == "apiVersion: v1"
			}
			if !ok {
				t.Errorf("%s %s: a fieldRef without apiVersion: v1", r.GetKind(), r.GetName())
			}
		}
	}
}

func TestNoSecretCommitted(t *testing.T) {
	err := filepath.WalkDir(repoInstall, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if d.Name() == credentialsFile || strings.HasSuffix(d.Name(), ".json") {
			t.Errorf("%s: credentials files must not be committed", p)
		}
		data, err := os.ReadFile(p)
		if bytes.Contains(data, []byte("PRIVATE KEY")) || bytes.Contains(data, []byte("private_key")) {
			t.Errorf("%s holds key material", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	m := mustRender(t, Settings{})
	sec := secretOf(t, m)
	if len(sec.Data) != 0 || len(sec.StringData) != 0 {
		t.Errorf("default Secret has data %v; want none (Workload Identity)", sec.Data)
	}
	m = mustRender(t, Settings{Credentials: testKey()})
	if got := string(secretOf(t, m).Data[credentialsFile]); !strings.Contains(got, "caa@p.iam") {
		t.Errorf("GCP_CREDENTIALS = %q, want the key file's content", got)
	}
}

func mustRender(t *testing.T, s Settings) resmap.ResMap {
	t.Helper()
	m, err := Render(s)
	if err != nil {
		t.Fatalf("render %+v: %v", s, err)
	}
	return m
}

// decode converts one rendered object into its typed form.
func decode[T any](t *testing.T, m resmap.ResMap, kind, namePrefix string) *T {
	t.Helper()
	for _, r := range m.Resources() {
		if r.GetKind() == kind && strings.HasPrefix(r.GetName(), namePrefix) {
			var out T
			obj, err := r.Map()
			if err != nil {
				t.Fatalf("decode %s %s: %v", kind, r.GetName(), err)
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &out); err != nil {
				t.Fatalf("decode %s %s: %v", kind, r.GetName(), err)
			}
			return &out
		}
	}
	t.Fatalf("no %s %s* rendered", kind, namePrefix)
	return nil
}

func daemonSetOf(t *testing.T, m resmap.ResMap) *appsv1.DaemonSet {
	return decode[appsv1.DaemonSet](t, m, "DaemonSet", DaemonSetName)
}

func secretOf(t *testing.T, m resmap.ResMap) *corev1.Secret {
	return decode[corev1.Secret](t, m, "Secret", SecretName)
}

func container(ds *appsv1.DaemonSet, name string) *corev1.Container {
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	return nil
}

// TestOverlay: the gcp-t4 image and command, the provider's keys, the
// ConfigMap and Secret wired through envFrom, the v0.22 probe on loopback,
// upstream's node selector, and no sidecar without the GKE component.
func TestOverlay(t *testing.T) {
	m := mustRender(t, Settings{Config: map[string]string{"GCP_PROJECT_ID": "p", "GCP_ZONE": "us-central1-a"}})
	ds := daemonSetOf(t, m)
	caa := container(ds, "cloud-api-adaptor-con")
	if caa == nil {
		t.Fatal("no CAA container")
	}
	if caa.Image != ImageName+":latest" {
		t.Errorf("image %q, want %s:latest", caa.Image, ImageName)
	}
	if !slices.Equal(caa.Command, []string{"/usr/local/bin/entrypoint.sh"}) || len(caa.Args) != 0 {
		t.Errorf("command %q args %q, want the image's entrypoint.sh, which refuses what would lift the guard", caa.Command, caa.Args)
	}
	if p := caa.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 8000 {
		t.Errorf("startup probe %+v: CAA v0.22 listens on 127.0.0.1:8000 only", p)
	}
	if sc := caa.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}) {
		t.Errorf("CAA security context %+v: want NET_ADMIN, SYS_ADMIN, not privileged", sc)
	}
	if !ds.Spec.Template.Spec.HostNetwork {
		t.Error("CAA needs hostNetwork")
	}
	if got := ds.Spec.Template.Spec.NodeSelector; len(got) != 1 || got[labelWorker] != "" {
		t.Errorf("nodeSelector %v, want upstream's %s", got, labelWorker)
	}
	if container(ds, "remediate") != nil {
		t.Error("remediation sidecar present without the GKE component")
	}
	cm := decode[corev1.ConfigMap](t, m, "ConfigMap", ConfigMapName)
	if cm.Data["CLOUD_PROVIDER"] != "gcp-t4" || cm.Data["GCP_ZONE"] != "us-central1-a" || cm.Data["PROXY_TIMEOUT"] != "5m" {
		t.Errorf("peer-pods-cm %v", cm.Data)
	}
	var refs []string
	for _, e := range caa.EnvFrom {
		if e.ConfigMapRef != nil {
			refs = append(refs, e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			refs = append(refs, e.SecretRef.Name)
		}
	}
	if !slices.Contains(refs, cm.Name) || !slices.Contains(refs, secretOf(t, m).Name) {
		t.Errorf("envFrom %v does not name the generated %s and secret", refs, cm.Name)
	}
}

// TestSidecarLeastPrivilege asserts the remediation DaemonSet's identity,
// security context and host mounts: a pod and ServiceAccount of its own (no
// CAA token next to systemd's bus), no host network, only the host paths
// its job needs.
func TestSidecarLeastPrivilege(t *testing.T) {
	m := mustRender(t, Settings{GKERemediation: true, Image: "registry.example/caa-gcp-t4:v9"})
	ds := decode[appsv1.DaemonSet](t, m, "DaemonSet", RemediationDaemonSet)
	caaDS := daemonSetOf(t, m)
	if container(caaDS, "remediate") != nil {
		t.Error("remediate still runs in CAA's pod")
	}
	spec := ds.Spec.Template.Spec
	if spec.HostPID || spec.HostIPC || spec.HostNetwork {
		t.Errorf("hostPID %v, hostIPC %v, hostNetwork %v: want none", spec.HostPID, spec.HostIPC, spec.HostNetwork)
	}
	if spec.ServiceAccountName != RemediationDaemonSet || spec.ServiceAccountName == caaDS.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("serviceAccountName %q: want its own, not CAA's %q", spec.ServiceAccountName, caaDS.Spec.Template.Spec.ServiceAccountName)
	}
	if ds.Namespace != Namespace {
		t.Errorf("namespace %q", ds.Namespace)
	}
	rem, caa := container(ds, "remediate"), container(caaDS, "cloud-api-adaptor-con")
	if rem == nil {
		t.Fatal("no remediate container")
	}
	if rem.Image != caa.Image || rem.Image != "registry.example/caa-gcp-t4:v9" {
		t.Errorf("sidecar image %q, CAA image %q: want both the --image", rem.Image, caa.Image)
	}
	if !slices.Equal(rem.Command, []string{"/usr/local/bin/gcp-t4-node", "remediate"}) {
		t.Errorf("command %q", rem.Command)
	}
	sc := rem.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no security context")
	case sc.Privileged == nil || *sc.Privileged:
		t.Error("privileged not false")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("root file system not read-only")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Errorf("capabilities %+v, want drop ALL and add none", sc.Capabilities)
	case sc.RunAsUser == nil || *sc.RunAsUser != 0:
		t.Error("runAsUser not 0 (systemd authenticates the bus peer as root)")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("seccomp not RuntimeDefault")
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	type mount struct {
		host, in string
		ro       bool
	}
	var got []mount
	for _, vm := range rem.VolumeMounts {
		v := vols[vm.Name]
		switch {
		case v.EmptyDir != nil:
			if vm.MountPath != "/tmp" || v.EmptyDir.SizeLimit == nil {
				t.Errorf("emptyDir %s at %s: want a bounded scratch /tmp", vm.Name, vm.MountPath)
			}
			continue
		case v.HostPath == nil:
			t.Errorf("mount %s is neither a host path nor the scratch emptyDir", vm.Name)
			continue
		}
		got = append(got, mount{v.HostPath.Path, vm.MountPath, vm.ReadOnly})
		if v.HostPath.Path == "/run/systemd/private" && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathSocket) {
			t.Errorf("/run/systemd/private type %v, want Socket", v.HostPath.Type)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].host < got[j].host })
	want := []mount{
		{"/", "/host", true},
		{"/etc/containerd", "/etc/containerd", false},
		{"/opt/kata", "/opt/kata", true},
		// The remote shim's config.d only: the create_container_timeout drop-in.
		{"/opt/kata/share/defaults/kata-containers/runtimes/remote/config.d", "/opt/kata/share/defaults/kata-containers/runtimes/remote/config.d", false},
		{"/run/lock", "/run/lock", false},
		{"/run/systemd/private", "/run/systemd/private", false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("sidecar host mounts\n got %+v\nwant %+v", got, want)
	}
	for _, a := range []string{"--host-root=/host", "--cri-socket=", "--daemonset=" + RemediationDaemonSet} {
		if !slices.Contains(rem.Args, a) {
			t.Errorf("args %q lack %s", rem.Args, a)
		}
	}
	if p := rem.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntValue() != 9102 {
		t.Errorf("readiness probe %+v: want /readyz on 9102", p)
	}
	if v := vols["kata-remote-config-d"]; v.HostPath == nil || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("kata-remote-config-d volume %+v: want a DirectoryOrCreate host path", v)
	}
	if p := rem.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 9102 {
		t.Errorf("liveness probe %+v: want /healthz on 9102", p)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 150 {
		t.Errorf("terminationGracePeriodSeconds %v: the uninstall pass needs up to 150 s", g)
	}
	for _, d := range []*appsv1.DaemonSet{ds, caaDS} {
		if sel := d.Spec.Template.Spec.NodeSelector; len(sel) != 2 || sel[SelectionLabel] != "true" || sel[labelGKEOS] != "ubuntu" {
			t.Errorf("%s nodeSelector %v, want %s=true on Ubuntu only", d.Name, sel, SelectionLabel)
		}
	}
	sa := decode[corev1.ServiceAccount](t, m, "ServiceAccount", RemediationDaemonSet)
	if sa == nil || sa.Namespace != Namespace || sa.Labels[PartOfLabel] != PartOfValue {
		t.Errorf("ServiceAccount %+v", sa)
	}
}

// TestSidecarFollowsDefaultImage: without --image the sidecar still runs
// the CAA container's image.
func TestSidecarFollowsDefaultImage(t *testing.T) {
	m := mustRender(t, Settings{GKERemediation: true})
	if a, b := container(decode[appsv1.DaemonSet](t, m, "DaemonSet", RemediationDaemonSet), "remediate").Image, container(daemonSetOf(t, m), "cloud-api-adaptor-con").Image; a != b {
		t.Errorf("sidecar %q, CAA %q", a, b)
	}
}

// TestWorkloadIdentityFederation: the credential configuration lands in a
// ConfigMap next to a ServiceAccount token for its audience, and ADC points
// at it; no Secret data.
func TestWorkloadIdentityFederation(t *testing.T) {
	m := mustRender(t, Settings{WIFCredentialConfig: testWIFConfig})
	ds := daemonSetOf(t, m)
	caa := container(ds, "cloud-api-adaptor-con")
	env := map[string]string{}
	for _, e := range caa.Env {
		env[e.Name] = e.Value
	}
	if env["GOOGLE_APPLICATION_CREDENTIALS"] != "/var/run/gcp-wif/credential-configuration.json" {
		t.Errorf("GOOGLE_APPLICATION_CREDENTIALS = %q", env["GOOGLE_APPLICATION_CREDENTIALS"])
	}
	cm := decode[corev1.ConfigMap](t, m, "ConfigMap", wifConfigMap)
	if cm.Namespace != Namespace || !strings.Contains(cm.Data[wifConfigFile], "external_account") {
		t.Errorf("WIF ConfigMap %s/%s data %v", cm.Namespace, cm.Name, cm.Data)
	}
	var projected *corev1.ProjectedVolumeSource
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "gcp-wif" {
			projected = v.Projected
		}
	}
	if projected == nil || len(projected.Sources) != 2 {
		t.Fatalf("no projected gcp-wif volume: %+v", projected)
	}
	tok, ref := projected.Sources[0].ServiceAccountToken, projected.Sources[1].ConfigMap
	if tok == nil || tok.Audience != "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/caa/providers/cluster" || tok.Path != "token" {
		t.Errorf("token source %+v", tok)
	}
	if ref == nil || ref.Name != cm.Name {
		t.Errorf("projected ConfigMap %+v, want the generated %s", ref, cm.Name)
	}
	if len(secretOf(t, m).Data) != 0 {
		t.Error("Secret has data with Workload Identity Federation")
	}
	for cfg, want := range map[string]string{
		`{"type":"service_account"}`:                 "want external_account",
		`{"type":"external_account","audience":"x"}`: "audience \"x\"",
		`{"type":"external_account","audience":"//iam.googleapis.com/p","credential_source":{"file":"/tmp/t"}}`: "--credential-source-file=/var/run/gcp-wif/token",
	} {
		if err := (Settings{WIFCredentialConfig: []byte(cfg)}).Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", cfg, err, want)
		}
	}
	if err := (Settings{WIFCredentialConfig: testWIFConfig, Credentials: testKey()}).Validate(); err == nil {
		t.Error("both a key and WIF accepted")
	}
}

func TestRuntimeClassComponent(t *testing.T) {
	m := mustRender(t, Settings{RuntimeClass: true})
	found := false
	for _, r := range m.Resources() {
		if r.GetKind() == "RuntimeClass" && r.GetName() == RuntimeClassName {
			found = true
		}
	}
	if !found {
		t.Error("no kata-remote RuntimeClass")
	}
	for _, r := range mustRender(t, Settings{}).Resources() {
		if r.GetKind() == "RuntimeClass" {
			t.Error("RuntimeClass rendered without the component")
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		s    Settings
		want string
	}{
		{Settings{Config: map[string]string{"GCP_ZONEZ": "x"}}, `setting "GCP_ZONEZ": not a peer-pods-cm key CAA v0.22.0 or gcp-t4 reads`},
		{Settings{Config: map[string]string{"CLOUD_PROVIDER": "gcp"}}, "CLOUD_PROVIDER"},
		{Settings{Config: map[string]string{"GCP_LABELS": "a=b\nc=d"}}, "GCP_LABELS: the value has a line break"},
		{Settings{Config: map[string]string{"CACERT_FILE": "/x"}}, "setting CACERT_FILE: install sets it from --tls-ca"},
		{Settings{Image: "Not An Image"}, "--image"},
		{Settings{Namespace: "Not_A_Namespace"}, `--namespace "Not_A_Namespace"`},
		{Settings{Credentials: []byte("nope")}, "--credentials-file: not a JSON credential file"},
		{Settings{Credentials: []byte(`{"a":1}`)}, `no "type" field`},
		// What `gcloud auth application-default login` writes: a person's login.
		{Settings{Credentials: []byte(`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`)}, `type "authorized_user" is not allowed`},
		{Settings{Credentials: testWIFConfig}, "goes to --wif-credential-config"},
		{Settings{TLS: &TLSFiles{CA: []byte("x")}}, "give all three"},
	} {
		err := c.s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.s, err, c.want)
		}
	}
}

func TestParseImage(t *testing.T) {
	for ref, want := range map[string]string{
		"localhost:5000/caa-gcp-t4:v1.2":     "localhost:5000/caa-gcp-t4:v1.2",
		"ghcr.io/o/caa@sha256:" + hex64():    "ghcr.io/o/caa@sha256:" + hex64(),
		"ghcr.io/o/caa:v1@sha256:" + hex64(): "ghcr.io/o/caa:v1@sha256:" + hex64(),
	} {
		img, err := parseImage(ref)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		got := img.NewName
		if img.NewTag != "" {
			got += ":" + img.NewTag
		}
		if img.Digest != "" {
			got += "@" + img.Digest
		}
		if got != want {
			t.Errorf("%s → %s, want %s", ref, got, want)
		}
	}
	// What the node's containerd would refuse to pull is refused here,
	// with the reason its parser gives.
	for ref, why := range map[string]string{
		"Not An Image":             "invalid reference format",
		"ghcr.io/You/caa":          "must be lowercase",
		"ghcr.io/o/caa:":           "invalid reference format",
		"ghcr.io/o/caa@sha256:abc": "invalid reference format",
		"ghcr.io/o/caa:v1/x":       "invalid reference format",
		// A moving tag, or none (which pulls latest), is refused.
		"caa":                       "pin it by version or digest",
		"localhost:5000/caa-gcp-t4": "pin it by version or digest",
		"ghcr.io/o/caa:latest":      "pin it by version or digest",
	} {
		_, err := parseImage(ref)
		if err == nil || !strings.Contains(err.Error(), "--image") || !strings.Contains(err.Error(), why) {
			t.Errorf("parseImage(%q) = %v, want a --image error saying %q", ref, err, why)
		}
	}
}

func hex64() string { return strings.Repeat("ab", 32) }

// TestRenderNeedsNoCluster: `gcp-t4 install --render` prints the
// manifests with no kubeconfig at all, and never the key.
func TestRenderNeedsNoCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	t.Setenv("HOME", t.TempDir())
	key := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(key, testKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), append([]string{"--render", "--gke=on", "--credentials-file=" + key, "--set=GCP_CLUSTER_ID=5e2f3c1a-0000-4000-8000-000000000001"}, requiredFlags...), &stdout, &stderr, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"kind: DaemonSet", "name: remediate", "GCP_ZONE: us-central1-a", "kind: Namespace", "GCP_CREDENTIALS: '<redacted: ", ConfigHashAnnotation} {
		if !strings.Contains(out, want) {
			t.Errorf("--render output lacks %q", want)
		}
	}
	if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, base64.StdEncoding.EncodeToString(testKey())[:40]) {
		t.Error("--render printed the key")
	}
	if !strings.Contains(stderr.String(), "redacted") {
		t.Errorf("stderr %q: want a note that the Secret is redacted", stderr.String())
	}
}

// TestRenderValidatesAsInstall: --render refuses what install refuses,
// with install's message (testValidatedBeforeApply checks install's on
// the API server), and an empty cluster ID with the command that reads it.
func TestRenderValidatesAsInstall(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	id := "--set=GCP_CLUSTER_ID=5e2f3c1a-0000-4000-8000-000000000001"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--zone=us-central1", id}, "gcp-t4 install: peer-pods-cm would not work:\n  GCP_ZONE: \"us-central1\" is not a zone name"},
		{[]string{"--set=GCP_SPOT_FALLBACK=ture", id}, `GCP_SPOT_FALLBACK (flag -spot-fallback): "ture" is not a boolean`},
		{[]string{"--zone="}, "gcp-t4 install: missing --zone (the provider refuses to start without them; docs/provider.md)"},
		{nil, "GCP_CLUSTER_ID=$(kubectl get namespace kube-system -o jsonpath='{.metadata.uid}')"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append(append([]string{"--render"}, requiredFlags...), c.args...), &stdout, &stderr, nil)
		if code != 1 || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("--render %v: exit %d, stdout %d bytes, stderr %q; want exit 1, nothing printed, %q", c.args, code, stdout.Len(), stderr.String(), c.want)
		}
	}
}

func TestInstallRefusesBadFlagsBeforeAnyCluster(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--gke=maybe"}, &stdout, &stderr, nil)
	if code != 2 || !strings.Contains(stderr.String(), `--gke "maybe": want auto, on or off`) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	code = Main(context.Background(), []string{"--set", "GCP_ZONEZ=x"}, &stdout, &stderr, nil)
	if code != 2 || !strings.Contains(stderr.String(), `"GCP_ZONEZ": not a peer-pods-cm key`) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestPinnedReleaseMatchesMakefile: the versions the installer tells users
// to install are the ones the build targets.
func TestPinnedReleaseMatchesMakefile(t *testing.T) {
	data, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^UPSTREAM_RELEASE \?= (\S+)$`).FindSubmatch(data)
	if m == nil || string(m[1]) != UpstreamRelease {
		t.Errorf("Makefile UPSTREAM_RELEASE %q, installer %s", m, UpstreamRelease)
	}
}

// TestDecideWithoutSelectedNodes: GKE with no labelled node still installs
// (the label can come later) and says which pools to label and how.
func TestDecideWithoutSelectedNodes(t *testing.T) {
	env := Environment{GKE: true, GKESignals: []string{"gce:// providerID"}, Pools: []Pool{
		{Name: "default-pool", COS: true, Nodes: []string{"a"}},
		{Name: "peer", Nodes: []string{"b"}},
	}, KataDeploy: "x", Webhook: "y"}
	d, err := Decide(env, ModeAuto, ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	// The RuntimeClass is left to kata-deploy's chart.
	if !d.GKERemediation || d.RuntimeClass {
		t.Errorf("decision %+v", d)
	}
	w := strings.Join(d.Warnings, "\n")
	if !strings.Contains(w, "label an Ubuntu node pool (node pool peer)") || !strings.Contains(w, "--node-labels="+SelectionLabel+"=true") {
		t.Errorf("warnings %q", w)
	}
	d, err = Decide(env, ModeOff, ModeOff)
	if err != nil || d.GKERemediation || d.RuntimeClass || !strings.Contains(strings.Join(d.Warnings, "\n"), "--gke=off") {
		t.Errorf("--gke=off on GKE: %+v, %v", d, err)
	}
}

// TestParseImageSplitsAsKustomizeEditSetImage: the images entry for
// --image is the one `kustomize edit set image` (the kustomize CLI built
// from the module proxy) writes for the same reference, plus the :latest
// a reference without tag or digest stands for (which parseImage
// refuses: TestParseImage).
func TestParseImageSplitsAsKustomizeEditSetImage(t *testing.T) {
	bin := kustomizeCLI(t)
	for _, ref := range []string{
		"localhost:5000/caa-gcp-t4:v1.2",
		"ghcr.io/o/caa@sha256:" + hex64(),
		"ghcr.io/o/caa:v1@sha256:" + hex64(),
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "edit", "set", "image", ImageName+"="+ref)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kustomize edit set image %s: %v\n%s", ref, err, out)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k types.Kustomization
		if err := yaml.Unmarshal(raw, &k); err != nil || len(k.Images) != 1 {
			t.Fatalf("kustomize wrote %s (%v)", raw, err)
		}
		want := k.Images[0]
		if want.NewTag == "" && want.Digest == "" {
			want.NewTag = "latest"
		}
		got, err := parseImage(ref)
		if err != nil {
			t.Fatalf("parseImage(%s): %v", ref, err)
		}
		if got != want {
			t.Errorf("%s: parseImage = %+v, kustomize edit set image wrote %+v", ref, got, want)
		}
	}
}

// An unknown key names the nearest one when it is a likely typo, instead
// of listing every key; a key like none still gets the list.
func TestUnknownKeySuggestsTheNearest(t *testing.T) {
	for in, want := range map[string]string{
		"GCP_ZONEZ":           "did you mean GCP_ZONE or GCP_ZONES?",
		"gcp_project_id":      "did you mean GCP_PROJECT_ID?",
		"GCP_MAX_GPU_PER_POD": "did you mean GCP_MAX_GPUS_PER_POD?",
		"TOTALLY_UNRELATED":   "use one of ",
	} {
		err := unknownKey("--set "+in, in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
		if want != "use one of " && strings.Contains(err.Error(), "use one of") {
			t.Errorf("%s: a near key is named, yet every key is listed: %v", in, err)
		}
	}
}
