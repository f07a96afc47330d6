package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Where the upstream trees are: a cloud-api-adaptor checkout at v0.22.0
// (38d0fcf7) and a kata-containers checkout at 4.0.0 (cf82bb35), as
// `make helm-check UPSTREAM=… KATA=…` passes them.
const (
	envCAA  = "CAA_UPSTREAM"
	envKata = "KATA_UPSTREAM"
	ns      = "confidential-containers-system"
)

func tree(t *testing.T, env, what string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		t.Fatalf("%s is not set: point it at %s (make helm-check UPSTREAM=... KATA=...)", env, what)
	}
	return dir
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func load(t *testing.T, dir string) *chart.Chart {
	t.Helper()
	c, err := loader.Load(dir)
	if err != nil {
		t.Fatalf("load chart %s: %v", dir, err)
	}
	return c
}

// peerpodsChart is upstream's chart with its two local dependencies (the
// kata-deploy one is installed on its own below, as docs/install.md does).
func peerpodsChart(t *testing.T) *chart.Chart {
	caa := tree(t, envCAA, "a cloud-api-adaptor tree at v0.22.0")
	c := load(t, filepath.Join(caa, "src/cloud-api-adaptor/install/charts/peerpods"))
	c.AddDependency(load(t, filepath.Join(caa, "src/peerpod-ctrl/chart")), load(t, filepath.Join(caa, "src/webhook/chart")))
	// kata-deploy comes from an OCI registry this machine cannot reach;
	// the values below disable it, as a cluster with kata-deploy
	// installed separately does, so it is dropped like any disabled one.
	c.Metadata.Dependencies = slices.DeleteFunc(c.Metadata.Dependencies, func(d *chart.Dependency) bool { return d.Name == "kata-deploy" })
	return c
}

// values are install/helm/gcp-t4.yaml plus what a user fills in.
func values(t *testing.T, extra string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(repoRoot(t), "install/helm/gcp-t4.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var user map[string]any
	if err := yaml.Unmarshal([]byte(`
image: {name: ghcr.io/example/caa-gcp-t4, tag: v1}
providerConfigs:
  gcp-t4:
    GCP_PROJECT_ID: demo-project
    GCP_ZONE: us-central1-a
    PODVM_IMAGE_NAME: podvm-t4
    GCP_NETWORK: global/networks/default
`+extra), &user); err != nil {
		t.Fatal(err)
	}
	return chartutil.CoalesceTables(user, v.AsMap())
}

func actionConfig(t *testing.T, kubeconfig, namespace string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func install(t *testing.T, cfg *action.Configuration, name, namespace string, c *chart.Chart, vals map[string]any, clientOnly bool) (string, error) {
	t.Helper()
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace, in.DisableHooks = name, namespace, true, true
	in.Timeout = 2 * time.Minute
	if clientOnly {
		in.DryRun, in.ClientOnly, in.Replace = true, true, true
	}
	rel, err := in.Run(c, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// runEntrypoint runs an entrypoint.sh with env from peer-pods-cm and a stub
// cloud-api-adaptor on PATH that records how it was started.
func runEntrypoint(t *testing.T, script string, env map[string]string) (code int, out, started string) {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(bin, "started")
	if err := os.WriteFile(filepath.Join(bin, "cloud-api-adaptor"), []byte("#!/bin/sh\necho \"cloud-api-adaptor $*\" > "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	s, _ := os.ReadFile(log)
	return code, string(b), strings.TrimSpace(string(s))
}

// TestPeerpodsChartRunsGcpT4 installs upstream's peerpods chart at
// v0.22.0 with install/helm/gcp-t4.yaml, through Helm's own install, on a
// real kube-apiserver, and starts what its DaemonSet starts with the
// ConfigMap it wrote: our image's entrypoint runs gcp-t4's CAA, where
// upstream's own entrypoint prints its usage and exits 0.
func TestPeerpodsChartRunsGcpT4(t *testing.T) {
	caa := tree(t, envCAA, "a cloud-api-adaptor tree at v0.22.0")
	cp := controlplane.StartForTest(t, controlplane.Options{})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	ctx := context.Background()
	if _, err := install(t, actionConfig(t, cp.Kubeconfig, ns), "peerpods", ns, peerpodsChart(t), values(t, ""), false); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "cloud-api-adaptor-daemonset", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/entrypoint.sh"}) || c.Image != "ghcr.io/example/caa-gcp-t4:v1" {
		t.Errorf("container %s: command %v image %s", c.Name, c.Command, c.Image)
	}
	if ds.Annotations["meta.helm.sh/release-name"] != "peerpods" {
		t.Errorf("DaemonSet annotations %v: gcp-t4 install tells a Helm release by meta.helm.sh/release-name", ds.Annotations)
	}
	var refs []string
	for _, e := range c.EnvFrom {
		if e.ConfigMapRef != nil {
			refs = append(refs, "cm/"+e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			refs = append(refs, "secret/"+e.SecretRef.Name)
		}
	}
	if !slices.Contains(refs, "cm/peer-pods-cm") || !slices.Contains(refs, "secret/peer-pods-secret") {
		t.Errorf("envFrom %v", refs)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "peer-pods-cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"CLOUD_PROVIDER": "gcp-t4", "CLOUD_CONFIG_VERIFY": "true", "GCP_PROJECT_ID": "demo-project", "GCP_ZONE": "us-central1-a"} {
		if cm.Data[k] != want {
			t.Errorf("peer-pods-cm %s = %q, want %q", k, cm.Data[k], want)
		}
	}
	code, out, started := runEntrypoint(t, filepath.Join(repoRoot(t), "scripts/image/entrypoint.sh"), cm.Data)
	if code != 0 || started != "cloud-api-adaptor gcp-t4" {
		t.Errorf("our entrypoint.sh: exit %d, started %q\n%s", code, started, out)
	}
	code, out, started = runEntrypoint(t, filepath.Join(caa, "src/cloud-api-adaptor/entrypoint.sh"), cm.Data)
	t.Logf("upstream's entrypoint.sh with this ConfigMap: exit %d, started %q\n%s", code, started, out)
	if code != 0 || started != "" || !strings.Contains(out, "Usage") {
		t.Errorf("upstream's entrypoint.sh no longer prints its usage for gcp-t4 (exit %d, %q): recheck what the image's entrypoint works around", code, started)
	}
}

// TestChartCreateModeBreaksOnAKey: the chart's create mode writes each
// secret value inside double quotes (templates/secrets.yaml), which the
// JSON of a service account key breaks; hence secrets.mode=reference in
// install/helm/gcp-t4.yaml.
func TestChartCreateModeBreaksOnAKey(t *testing.T) {
	vals := values(t, `
secrets: {mode: create}
providerSecrets:
  gcp-t4:
    GCP_CREDENTIALS: '{"type": "service_account", "client_email": "caa@demo-project.iam.gserviceaccount.com"}'
`)
	_, err := install(t, new(action.Configuration), "peerpods", ns, peerpodsChart(t), vals, true)
	if err == nil {
		t.Fatal("create mode rendered a key file; recheck secrets.mode=reference in install/helm/gcp-t4.yaml")
	}
	t.Logf("create mode with a key: %v", err)
}

// TestKataDeployAdoptsOurRuntimeClass: kata-deploy 4.0.0's chart, installed
// by Helm after `gcp-t4 install --runtimeclass=on`, adopts the kata-remote
// RuntimeClass install/components/runtimeclass creates, where one without
// Helm's ownership metadata makes its install fail.
func TestKataDeployAdoptsOurRuntimeClass(t *testing.T) {
	kata := tree(t, envKata, "a kata-containers tree at 4.0.0")
	// kata-deploy's DaemonSet is privileged, as on any real cluster.
	cp := controlplane.StartForTest(t, controlplane.Options{ExtraAPIServerFlags: []string{"--allow-privileged=true"}})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	ctx := context.Background()
	// Helm's kube client names its field manager after the binary: "helm".
	kube.ManagedFieldsManager = "helm"
	kataChart := func() *chart.Chart {
		c := load(t, filepath.Join(kata, "tools/packaging/kata-deploy/helm-chart/kata-deploy"))
		// node-feature-discovery (off by default) comes from a chart
		// repository this machine cannot reach; dropped like any
		// disabled dependency.
		c.Metadata.Dependencies = nil
		return c
	}
	var kataVals map[string]any
	if err := yaml.Unmarshal([]byte(`
shims: {disableAll: true, remote: {enabled: true}}
defaultShim: {amd64: remote, arm64: remote, s390x: remote, ppc64le: remote}
`), &kataVals); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "install/components/runtimeclass/runtimeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ours, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(body []byte) {
		t.Helper()
		if _, err := cs.NodeV1().RuntimeClasses().Patch(ctx, "kata-remote", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "gcp-t4"}); err != nil {
			t.Fatal(err)
		}
	}

	// Without the ownership metadata: Helm refuses.
	var bare nodev1.RuntimeClass
	if err := json.Unmarshal(ours, &bare); err != nil {
		t.Fatal(err)
	}
	bare.Labels = map[string]string{"app.kubernetes.io/part-of": "caa-gcp-t4"}
	bare.Annotations = nil
	b, _ := json.Marshal(bare)
	apply(b)
	_, err = install(t, actionConfig(t, cp.Kubeconfig, "kube-system"), "kata-deploy", "kube-system", kataChart(), kataVals, false)
	if err == nil || !strings.Contains(err.Error(), "invalid ownership metadata") {
		t.Fatalf("kata-deploy over a RuntimeClass without Helm metadata: %v; want Helm's ownership refusal (so the test can fail)", err)
	}
	if err := cs.NodeV1().RuntimeClasses().Delete(ctx, "kata-remote", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Ours: adopted.
	apply(ours)
	if _, err := install(t, actionConfig(t, cp.Kubeconfig, "kube-system"), "kata-deploy", "kube-system", kataChart(), kataVals, false); err != nil {
		t.Fatalf("helm install kata-deploy after gcp-t4's RuntimeClass: %v", err)
	}
	rc, err := cs.NodeV1().RuntimeClasses().Get(ctx, "kata-remote", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	helm := false
	for _, m := range rc.ManagedFields {
		helm = helm || m.Manager == "helm"
	}
	if !helm || rc.Handler != "kata-remote" || rc.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("after kata-deploy's install: handler %s labels %v, helm manager %v", rc.Handler, rc.Labels, helm)
	}
	var buf bytes.Buffer
	for _, m := range rc.ManagedFields {
		buf.WriteString(m.Manager + " " + string(m.Operation) + "; ")
	}
	t.Logf("kata-remote managers: %s", buf.String())
}
