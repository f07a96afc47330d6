package helm_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/postrender"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// guideBlocks reads the docs/install.md blocks marked `<!-- helm-check: NAME -->`
// as every test that runs a guide reads one (doccmd): their commands,
// continuation lines joined, comments dropped, and each here-document as
// the command's Body.
func guideBlocks(t *testing.T) map[string][]doccmd.Command {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, cmds := doccmd.Marked(blocks, "helm-check")
	return cmds
}

// guide runs the guide's commands: Helm's through Helm's library, kubectl's
// through client-go, on the control plane.
type guide struct {
	t          *testing.T
	cp         *controlplane.ControlPlane
	cs         kubernetes.Interface
	caa, kata  string
	workdir    string
	vars       map[string]string
	installed  []string
	lastOutput string
}

func (g *guide) expand(s string) string {
	return os.Expand(s, func(k string) string { return g.vars[k] })
}

var clusterIDCmd = regexp.MustCompile(`^([A-Z_]+)=\$\(kubectl get namespace kube-system -o jsonpath='\{\.metadata\.uid\}'\)$`)

func (g *guide) run(c doccmd.Command) error {
	t := g.t
	t.Helper()
	ctx := context.Background()
	if m := clusterIDCmd.FindStringSubmatch(c.Text); m != nil {
		ns, err := g.cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil {
			return err
		}
		g.vars[m[1]] = string(ns.UID)
		return nil
	}
	args := strings.Fields(g.expand(c.Text))
	switch {
	case len(args) == 3 && args[0] == "cat" && args[1] == ">":
		return os.WriteFile(filepath.Join(g.workdir, args[2]), []byte(c.Body), 0o644)
	case args[0] == "git" && args[1] == "clone":
		// The tree CAA_UPSTREAM names stands for the clone; it must be the
		// tag the guide clones.
		if !slices.Contains(args, "v0.22.0") || !strings.HasSuffix(args[len(args)-1], "/cloud-api-adaptor") {
			t.Errorf("the guide clones %v; CAA_UPSTREAM is a v0.22.0 tree", args)
		}
		return nil
	case args[0] == "cd" && slices.Contains(args, "helm") && slices.Contains(args, "dependency"):
		// helm dependency build: the local subcharts are loaded from the
		// tree by peerpodsChartAsBuilt.
		return nil
	case args[0] == "kubectl" && args[1] == "create" && args[2] == "namespace":
		_, err := g.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: args[3]}}, metav1.CreateOptions{})
		return err
	case args[0] == "kubectl" && args[1] == "-n" && args[3] == "create" && args[4] == "secret" && args[5] == "generic":
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: args[6], Namespace: args[2]}, Data: map[string][]byte{}}
		for _, a := range args[7:] {
			kv, ok := strings.CutPrefix(a, "--from-file=")
			if !ok {
				t.Fatalf("kubectl create secret: %s is not a flag the test knows", a)
			}
			k, file, _ := strings.Cut(kv, "=")
			// The guide quotes a path under $HOME; the shell drops the quotes.
			file = strings.Trim(file, `"`)
			if !filepath.IsAbs(file) {
				file = filepath.Join(g.workdir, file)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			s.Data[k] = b
		}
		_, err := g.cs.CoreV1().Secrets(args[2]).Create(ctx, s, metav1.CreateOptions{})
		return err
	case args[0] == "helm" && args[1] == "install":
		return g.helmInstall(args[2:])
	}
	t.Fatalf("the Helm check cannot run %q; teach it, or move the command out of the block", c.Text)
	return nil
}

// helmInstall is `helm install NAME CHART FLAGS…` with Helm's library.
func (g *guide) helmInstall(args []string) error {
	t := g.t
	t.Helper()
	name, ref := args[0], args[1]
	var namespace string
	var createNamespace bool
	var pr postrender.PostRenderer
	vals := map[string]any{}
	version := ""
	for i := 2; i < len(args); i++ {
		flag, val := args[i], ""
		if i+1 < len(args) {
			val = args[i+1]
		}
		switch flag {
		case "--namespace":
			namespace = val
			i++
		case "--create-namespace":
			createNamespace = true
		case "--version":
			version = val
			i++
		case "-f":
			v, err := chartutil.ReadValuesFile(g.path(val))
			if err != nil {
				return err
			}
			vals = chartutil.CoalesceTables(vals, v.AsMap()) // later files win, as in helm
			i++
		case "--set":
			if err := strvals.ParseInto(val, vals); err != nil {
				return err
			}
			i++
		case "--post-renderer":
			var err error
			if pr, err = postrender.NewExec(g.path(val)); err != nil {
				return err
			}
			i++
		default:
			t.Fatalf("helm install: flag %s is not one the test knows", flag)
		}
	}
	var c *chart.Chart
	switch {
	case ref == "oci://ghcr.io/kata-containers/kata-deploy-charts/kata-deploy":
		c = load(t, filepath.Join(g.kata, "tools/packaging/kata-deploy/helm-chart/kata-deploy"))
		// node-feature-discovery (off by default) comes from a chart
		// repository this machine cannot reach.
		c.Metadata.Dependencies = nil
	case strings.HasPrefix(ref, "cloud-api-adaptor/"):
		c = load(t, filepath.Join(g.caa, strings.TrimPrefix(ref, "cloud-api-adaptor/")))
		if c.Name() == "peerpods" {
			c = peerpodsChartAsBuilt(t, g.caa, c)
		}
	default:
		t.Fatalf("helm install: chart %s is not one the test knows", ref)
	}
	if version != "" && c.Metadata.Version != version {
		t.Fatalf("helm install %s --version %s: the tree's chart is %s", ref, version, c.Metadata.Version)
	}
	cfg := actionConfig(t, g.cp.Kubeconfig, namespace)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace, inst.PostRenderer = name, namespace, createNamespace, pr
	// Hooks wait for Jobs, which a control plane without controllers never
	// runs.
	inst.DisableHooks = true
	rel, err := inst.Run(c, vals)
	if err != nil {
		return err
	}
	g.installed = append(g.installed, name)
	g.lastOutput = rel.Manifest
	return nil
}

// peerpodsChartAsBuilt is the chart as `helm dependency build` leaves it:
// its two local subcharts from the tree. kata-deploy, from an OCI registry
// this machine cannot reach, is dropped; the values must disable it (the
// test fails otherwise).
func peerpodsChartAsBuilt(t *testing.T, caa string, c *chart.Chart) *chart.Chart {
	c.AddDependency(load(t, filepath.Join(caa, "src/peerpod-ctrl/chart")), load(t, filepath.Join(caa, "src/webhook/chart")))
	c.Metadata.Dependencies = slices.DeleteFunc(c.Metadata.Dependencies, func(d *chart.Dependency) bool { return d.Name == "kata-deploy" })
	return c
}

func (g *guide) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	if _, err := os.Stat(filepath.Join(repoRoot(g.t), p)); err == nil {
		return filepath.Join(repoRoot(g.t), p)
	}
	return filepath.Join(g.workdir, p)
}

// certManagerCRDs stand in for cert-manager, which the webhook's chart
// needs (its Issuer and Certificate): the two kinds, schema-less. A test
// double, named as one: nothing issues a certificate here.
func certManagerCRDs(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	dc := dynamic.NewForConfigOrDie(cp.Config())
	crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, k := range []struct{ kind, plural string }{{"Issuer", "issuers"}, {"Certificate", "certificates"}} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": k.plural + ".cert-manager.io"},
			"spec": map[string]any{"group": "cert-manager.io", "scope": "Namespaced",
				"names": map[string]any{"kind": k.kind, "plural": k.plural, "singular": strings.ToLower(k.kind), "listKind": k.kind + "List"},
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}},
		}}
		if _, err := dc.Resource(crd).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitEstablished(t, dc.Resource(crd), u.GetName())
	}
}

// waitEstablished watches a CRD until the API server reports it
// Established (serving its kind), bounded by the test's context.
func waitEstablished(t *testing.T, ri dynamic.ResourceInterface, name string) {
	t.Helper()
	w, err := ri.Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return
			}
		}
	}
	t.Fatalf("CRD %s never became Established", name)
}

// TestGuideHelmSection runs docs/install.md's Helm commands as written, in
// order, after kata-deploy and the peer-pods webhook installed as the page's
// prerequisites install them, with the shipped values file and
// post-renderer, on a real kube-apiserver; then checks what CAA and the
// reaper rely on.
func TestGuideHelmSection(t *testing.T) {
	g := &guide{t: t, caa: tree(t, envCAA, "a cloud-api-adaptor tree at v0.22.0"), kata: tree(t, envKata, "a kata-containers tree at 4.0.0"),
		workdir: t.TempDir(), vars: map[string]string{"PROJECT": "demo-project", "ZONE": "us-central1-a"}}
	// Step 3's key, where the guide's env step puts it: KEYDIR, outside the
	// working directory.
	g.vars["KEYDIR"] = filepath.Join(t.TempDir(), ".config", "caa-gcp-t4")
	// The post-renderer runs kustomize (KUSTOMIZE), else kustomize or
	// kubectl from PATH; make's pinned build where there is one.
	if k := os.Getenv("KUSTOMIZE_BIN"); k != "" {
		t.Setenv("KUSTOMIZE", k)
	}
	g.cp = controlplane.StartForTest(t, controlplane.Options{ExtraAPIServerFlags: []string{"--allow-privileged=true"}})
	g.cs = kubernetes.NewForConfigOrDie(g.cp.Config())
	ctx := context.Background()
	certManagerCRDs(t, g.cp)
	if err := os.MkdirAll(g.vars["KEYDIR"], 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.vars["KEYDIR"], "caa-key.json"), []byte(`{"type": "service_account", "client_email": "caa@demo-project.iam.gserviceaccount.com"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	blocks := guideBlocks(t)
	for _, b := range []string{"prerequisites", "helm"} {
		if len(blocks[b]) == 0 {
			t.Fatalf("docs/install.md has no `<!-- helm-check: %s -->` block", b)
		}
		for _, c := range blocks[b] {
			if err := g.run(c); err != nil {
				t.Fatalf("%s: %s: %v", b, c.Text, err)
			}
		}
	}
	if want := []string{"kata-deploy", "peer-pods-webhook", "peerpods"}; !slices.Equal(g.installed, want) {
		t.Fatalf("releases installed %v, want %v", g.installed, want)
	}

	ns := "confidential-containers-system"
	ds, err := g.cs.AppsV1().DaemonSets(ns).Get(ctx, "cloud-api-adaptor-daemonset", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkDaemonSet(t, ds)
	kubeSystem, err := g.cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := g.cs.CoreV1().ConfigMaps(ns).Get(ctx, "peer-pods-cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["GCP_CLUSTER_ID"] != string(kubeSystem.UID) || cm.Data["GCP_PROJECT_ID"] != "demo-project" || cm.Data["CLOUD_PROVIDER"] != "gcp-t4" {
		t.Errorf("peer-pods-cm: GCP_CLUSTER_ID %q (kube-system %s), GCP_PROJECT_ID %q, CLOUD_PROVIDER %q", cm.Data["GCP_CLUSTER_ID"], kubeSystem.UID, cm.Data["GCP_PROJECT_ID"], cm.Data["CLOUD_PROVIDER"])
	}
	reaper, err := g.cs.AppsV1().Deployments(ns).Get(ctx, "caa-gcp-t4-reaper", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the reaper: %v", err)
	}
	if img := reaper.Spec.Template.Spec.Containers[0].Image; img != ds.Spec.Template.Spec.Containers[0].Image || img != "ghcr.io/your-org/caa-gcp-t4:v1" {
		t.Errorf("reaper image %s, CAA image %s", img, ds.Spec.Template.Spec.Containers[0].Image)
	}
	// The node sidecar, as gcp-t4 install adds it: the chart's image, and
	// kata-remote's create_container_timeout for the in-guest pull.
	sidecar, err := g.cs.AppsV1().DaemonSets(ns).Get(ctx, "gcp-t4-remediate", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node sidecar: %v", err)
	}
	if c := sidecar.Spec.Template.Spec.Containers[0]; c.Image != "ghcr.io/your-org/caa-gcp-t4:v1" || !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--create-container-timeout=") }) {
		t.Errorf("node sidecar image %s, args %v: want the chart's image and --create-container-timeout", c.Image, c.Args)
	}
	if _, err := g.cs.CoreV1().ResourceQuotas(ns).Get(ctx, "caa-gcp-t4-critical-pods", metav1.GetOptions{}); err != nil {
		t.Errorf("the system-node-critical quota: %v", err)
	}
	role, err := g.cs.RbacV1().ClusterRoles().Get(ctx, "pod-viewer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, "list") {
			t.Errorf("pod-viewer still lists Secrets cluster-wide: %v", role.Rules)
		}
	}
	checkCAARules(t, g.cp, g.cs, ns)
	t.Logf("installed %v; DaemonSet nodeSelector %v, grace %d s, priority %s; reaper image %s; sidecar args %v; GCP_CLUSTER_ID %s",
		g.installed, ds.Spec.Template.Spec.NodeSelector, *ds.Spec.Template.Spec.TerminationGracePeriodSeconds, ds.Spec.Template.Spec.PriorityClassName,
		reaper.Spec.Template.Spec.Containers[0].Image, sidecar.Spec.Template.Spec.Containers[0].Args, cm.Data["GCP_CLUSTER_ID"])

	// Without the cluster ID the post-renderer refuses, naming the command.
	vals := values(t, "")
	pr, err := postrender.NewExec(filepath.Join(repoRoot(t), "install/helm/post-render/post-render.sh"))
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(new(action.Configuration))
	in.ReleaseName, in.Namespace, in.DryRun, in.ClientOnly, in.Replace, in.DisableHooks, in.PostRenderer = "peerpods", ns, true, true, true, true, pr
	if _, err := in.Run(peerpodsChart(t), vals); err == nil || !strings.Contains(err.Error(), "GCP_CLUSTER_ID=$(kubectl get namespace kube-system -o jsonpath='{.metadata.uid}')") {
		t.Errorf("an install without GCP_CLUSTER_ID: %v; want the post-renderer's refusal with the command", err)
	}

	// Custom CAA-to-podVM certificates: refused (the podVM would get no
	// server certificate; docs/install.md, --tls-ca).
	vals = values(t, "    GCP_CLUSTER_ID: 4a8d8b2e-0000-4000-8000-000000000001\n    CACERT_FILE: /etc/certificates/ca.crt\n")
	if _, err := in.Run(peerpodsChart(t), vals); err == nil || !strings.Contains(err.Error(), "custom CAA-to-podVM certificates are not supported") {
		t.Errorf("an install with CACERT_FILE: %v; want the post-renderer's refusal", err)
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if _, worker := spec.NodeSelector["node.kubernetes.io/worker"]; worker || spec.NodeSelector["caa-gcp-t4/peer-pods"] != "true" || spec.NodeSelector["cloud.google.com/gke-os-distribution"] != "ubuntu" {
		t.Errorf("nodeSelector %v: GKE nodes carry the node pool's label caa-gcp-t4/peer-pods=true, not node.kubernetes.io/worker", spec.NodeSelector)
	}
	for _, effect := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute} {
		if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
			return tl.Key == "caa-gcp-t4/peer-pods" && tl.Operator == corev1.TolerationOpExists && tl.Effect == effect
		}) {
			t.Errorf("no toleration for the guide's taint caa-gcp-t4/peer-pods:%s in %v", effect, spec.Tolerations)
		}
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != 960 {
		t.Errorf("terminationGracePeriodSeconds %v, want 960", spec.TerminationGracePeriodSeconds)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
}

// docCanI is docs/install.md's `<!-- can-i: NAME -->` table, as
// `kubectl auth can-i --list` prints it, read by doccmd as the install
// package's test reads the kustomize path's.
func docCanI(t *testing.T, name string) string {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := doccmd.ByMarker(blocks, "can-i: "+name)
	if !ok {
		t.Fatalf("docs/install.md has no fenced block after `<!-- can-i: %s -->`", name)
	}
	return b.Text
}

// checkCAARules: what CAA's ServiceAccount may do in a workload namespace
// on the Helm path (the chart's ClusterRoles, pod-viewer as the
// post-renderer narrows it, and install/helm/caa-provider-rbac.yaml: kube-system's
// UID and the Events on a podVM's pod), as the API server answers the
// SelfSubjectRulesReview `kubectl auth can-i --list` sends, is the table
// docs/install.md records for this path; and the post-renderer's ClusterRole
// grants Events create, get and patch, nothing more.
func checkCAARules(t *testing.T, cp *controlplane.ControlPlane, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	const workload = "ml"
	if err := cp.WaitForBindings(ctx, ns, "cloud-api-adaptor", workload); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":cloud-api-adaptor"
	st, err := cp.RulesReview(ctx, user, workload)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := controlplane.CanIList(st), docCanI(t, "helm"); got != want {
		t.Errorf("the API server's answer for %s in %s:\n%s\ndocs/install.md (<!-- can-i: helm -->):\n%s", user, workload, got, want)
	}
	role, err := cs.RbacV1().ClusterRoles().Get(ctx, "caa-gcp-t4-provider", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the post-renderer's ClusterRole for CAA: %v", err)
	}
	var events []string
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "events") {
			events = append(events, r.Verbs...)
		}
	}
	if !slices.Equal(events, []string{"create", "get", "patch"}) {
		t.Errorf("caa-gcp-t4-provider grants %v on events, want create get patch", events)
	}
}
