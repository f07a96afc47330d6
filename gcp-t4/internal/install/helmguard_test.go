package install

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// helmChartOutput is what upstream's peerpods chart renders for
// peer-pods-cm and CAA's DaemonSet in namespace ns (the fixture
// test/upstream's post-render tests read too).
func helmChartOutput(t *testing.T, ns string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "install", "helm", "post-render", "testdata", "chart-output.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return os.Expand(string(b), func(k string) string {
		return map[string]string{"NAMESPACE": ns, "DATA": "  CLOUD_PROVIDER: \"gcp-t4\"\n  GCP_CLUSTER_ID: \"9d0e8c4a-1b2f-4c3d-8e5f-6a7b8c9d0e1f\"\n"}[k]
	})
}

// postRender runs the Helm post-renderer over helmChartOutput(t, "peerpods")
// with the real kustomize CLI and env, and returns the objects it printed
// by kind/name, its stderr and its error.
func postRender(t *testing.T, env ...string) (map[string]map[string]any, string, error) {
	t.Helper()
	bin := kustomizeCLI(t)
	script := filepath.Join("..", "..", "..", "install", "helm", "post-render", "post-render.sh")
	cmd := exec.Command("sh", script)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "KUSTOMIZE=" + bin}, env...)
	cmd.Stdin = strings.NewReader(helmChartOutput(t, "peerpods"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	objs := map[string]map[string]any{}
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil || o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		objs[o["kind"].(string)+"/"+md["name"].(string)] = o
	}
	return objs, errb.String(), err
}

// The Helm path installs the cost guard as `gcp-t4 install` does, on by
// default, with its limits read from the release's namespace; COST_GUARD=off
// leaves it out. Rendered by the post-renderer with the real kustomize CLI.
func TestHelmPostRendererAddsTheCostGuard(t *testing.T) {
	render := func(env ...string) (map[string]map[string]any, string, error) { return postRender(t, env...) }
	objs, errs, err := render()
	if err != nil {
		t.Fatalf("post-render: %v\n%s", err, errs)
	}
	for _, k := range []string{"ValidatingAdmissionPolicy/gcp-t4-cost-guard", "ValidatingAdmissionPolicy/gcp-t4-cost-guard-annotations",
		"ValidatingAdmissionPolicyBinding/gcp-t4-cost-guard", "ValidatingAdmissionPolicyBinding/gcp-t4-cost-guard-annotations", "ConfigMap/gcp-t4-cost-guard"} {
		if objs[k] == nil {
			t.Errorf("the Helm path's render lacks %s", k)
		}
	}
	if cm := objs["ConfigMap/gcp-t4-cost-guard"]; cm != nil {
		if ns := cm["metadata"].(map[string]any)["namespace"]; ns != "peerpods" {
			t.Errorf("the limits ConfigMap is in %v, want the release's namespace peerpods", ns)
		}
	}
	if b := objs["ValidatingAdmissionPolicyBinding/gcp-t4-cost-guard"]; b != nil {
		ref := b["spec"].(map[string]any)["paramRef"].(map[string]any)
		if ref["namespace"] != "peerpods" {
			t.Errorf("the binding reads its limits from %v, want the release's namespace peerpods", ref["namespace"])
		}
	}
	// The annotations policy is the one `gcp-t4 install` applies, pods/status
	// matched too: a same-named policy with other rules would reopen the
	// status subresource on this path only.
	if vap := objs["ValidatingAdmissionPolicy/gcp-t4-cost-guard-annotations"]; vap != nil {
		built, err := Build(Settings{CostGuard: true})
		if err != nil {
			t.Fatal(err)
		}
		var want any
		for _, o := range built {
			if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == CostGuardAnnotationsPolicy {
				want = o.Object["spec"]
			}
		}
		if !reflect.DeepEqual(vap["spec"], want) {
			t.Errorf("the Helm path's annotations policy differs from install's:\n%v\nwant\n%v", vap["spec"], want)
		}
		rules := fmt.Sprint(vap["spec"].(map[string]any)["matchConstraints"])
		if !strings.Contains(rules, "pods/status") {
			t.Errorf("the Helm path's annotations policy does not match pods/status: %s", rules)
		}
	}
	objs, errs, err = render("COST_GUARD=off")
	if err != nil {
		t.Fatalf("post-render with COST_GUARD=off: %v\n%s", err, errs)
	}
	for k := range objs {
		if strings.Contains(k, "cost-guard") {
			t.Errorf("COST_GUARD=off still renders %s", k)
		}
	}
	if _, errs, err = render("COST_GUARD=maybe"); err == nil || !strings.Contains(errs, "COST_GUARD=maybe") {
		t.Errorf("COST_GUARD=maybe: %v %s, want a refusal naming it", err, errs)
	}
}

// The Helm path runs the node sidecar as `gcp-t4 install` does, on by
// default: the chart's image, the release's namespace for it and its
// identity, and install's create_container_timeout (the catalogue's), so
// both install paths set kata-remote's bound on the in-guest pull.
// REMEDIATION=off leaves it out; another value is refused.
func TestHelmPostRendererAddsTheNodeSidecar(t *testing.T) {
	objs, errs, err := postRender(t)
	if err != nil {
		t.Fatalf("post-render: %v\n%s", err, errs)
	}
	ds := objs["DaemonSet/gcp-t4-remediate"]
	if ds == nil {
		t.Fatal("the Helm path's render has no node sidecar")
	}
	if ns := ds["metadata"].(map[string]any)["namespace"]; ns != "peerpods" {
		t.Errorf("the sidecar runs in %v, want the release's namespace peerpods", ns)
	}
	c := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if c["image"] != "ghcr.io/example/caa-gcp-t4:v1" {
		t.Errorf("the sidecar runs %v, want the chart's image", c["image"])
	}
	cat, err := startup.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("--create-container-timeout=%ds", int64(cat.InstallCreateContainerTimeout().Seconds()))
	if args := fmt.Sprint(c["args"]); !strings.Contains(args, want) {
		t.Errorf("the sidecar's args %s lack %s", args, want)
	}
	for _, k := range []string{"ServiceAccount/gcp-t4-remediate", "NetworkPolicy/gcp-t4-remediate-metrics", "Role/caa-gcp-t4-remediate-self", "RoleBinding/caa-gcp-t4-remediate-self"} {
		if o := objs[k]; o == nil || o["metadata"].(map[string]any)["namespace"] != "peerpods" {
			t.Errorf("%s is missing or not in the release's namespace", k)
		}
	}
	for _, k := range []string{"ClusterRoleBinding/caa-gcp-t4-remediate", "RoleBinding/caa-gcp-t4-remediate-self", "RoleBinding/caa-gcp-t4-remediate-events"} {
		o := objs[k]
		if o == nil {
			t.Errorf("%s is missing", k)
			continue
		}
		for _, s := range o["subjects"].([]any) {
			if ns := s.(map[string]any)["namespace"]; ns != "peerpods" {
				t.Errorf("%s binds the sidecar's ServiceAccount in %v, want peerpods", k, ns)
			}
		}
	}
	if o := objs["RoleBinding/caa-gcp-t4-remediate-events"]; o != nil && o["metadata"].(map[string]any)["namespace"] != "default" {
		t.Errorf("the Events RoleBinding moved out of default, where Node Events go")
	}
	objs, errs, err = postRender(t, "REMEDIATION=off")
	if err != nil {
		t.Fatalf("post-render with REMEDIATION=off: %v\n%s", err, errs)
	}
	for k := range objs {
		if strings.Contains(k, "remediate") {
			t.Errorf("REMEDIATION=off still renders %s", k)
		}
	}
	if objs["ValidatingAdmissionPolicy/gcp-t4-cost-guard"] == nil {
		t.Error("REMEDIATION=off dropped the cost guard too")
	}
	if _, errs, err = postRender(t, "REMEDIATION=maybe"); err == nil || !strings.Contains(errs, "REMEDIATION=maybe") {
		t.Errorf("REMEDIATION=maybe: %v %s, want a refusal naming it", err, errs)
	}
	// CREATE_CONTAINER_TIMEOUT sets the value as install's flag does.
	objs, errs, err = postRender(t, "CREATE_CONTAINER_TIMEOUT=30m")
	if err != nil {
		t.Fatalf("post-render with CREATE_CONTAINER_TIMEOUT=30m: %v\n%s", err, errs)
	}
	c = objs["DaemonSet/gcp-t4-remediate"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if args := fmt.Sprint(c["args"]); !strings.Contains(args, "--create-container-timeout=30m ") && !strings.HasSuffix(args, "--create-container-timeout=30m]") {
		t.Errorf("CREATE_CONTAINER_TIMEOUT=30m: the sidecar's args are %s", args)
	}
	for env, want := range map[string]string{
		"CREATE_CONTAINER_TIMEOUT=soon":                "CREATE_CONTAINER_TIMEOUT: give a duration",
		"CREATE_CONTAINER_TIMEOUT=1.5s":                "whole seconds",
		"CREATE_CONTAINER_TIMEOUT=30m REMEDIATION=off": "REMEDIATION=off",
	} {
		if _, errs, err = postRender(t, strings.Fields(env)...); err == nil || !strings.Contains(errs, want) {
			t.Errorf("%s: %v %s, want a refusal saying %q", env, err, errs, want)
		}
	}
	// A value of several lines, one of them a good duration, passed a
	// line-by-line grep and reached sed's script, where e runs a command.
	// Refused whole, before sed; nothing runs, and the value is not echoed.
	pwned := filepath.Join(t.TempDir(), "pwned")
	for _, v := range []string{"30m\n1e touch " + pwned + "\n30m", "30m/;1e touch " + pwned + ";#", "30m\x1b]52;c;eA==\a"} {
		_, errs, err := postRender(t, "CREATE_CONTAINER_TIMEOUT="+v)
		if err == nil || !strings.Contains(errs, "CREATE_CONTAINER_TIMEOUT: give a duration") || strings.Contains(errs, "\x1b") {
			t.Errorf("CREATE_CONTAINER_TIMEOUT=%q: %v %q, want a refusal that does not echo it", v, err, errs)
		}
		if _, err := os.Stat(pwned); err == nil {
			t.Fatalf("CREATE_CONTAINER_TIMEOUT=%q ran a command through sed", v)
		}
	}
}

// TestHelmPostRendererGrantsCAAEvents: the Helm path's ClusterRole for
// what the gcp-t4 provider calls beyond upstream's chart
// (install/helm/caa-provider-rbac.yaml) grants Events the verbs
// install/base/rbac.yaml grants (create, get, patch: start-up Events on
// the pod a podVM is for; no list, watch or delete) and the kube-system
// read, bound to CAA's ServiceAccount in the release's namespace.
func TestHelmPostRendererGrantsCAAEvents(t *testing.T) {
	objs, errs, err := postRender(t)
	if err != nil {
		t.Fatalf("post-render: %v\n%s", err, errs)
	}
	var helmRole rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["ClusterRole/caa-gcp-t4-provider"], &helmRole); err != nil {
		t.Fatalf("the Helm path's ClusterRole caa-gcp-t4-provider: %v (rendered: %v)", err, slices.Sorted(maps.Keys(objs)))
	}
	eventVerbs := func(rules []rbacv1.PolicyRule) []string {
		var verbs []string
		for _, r := range rules {
			if slices.Contains(r.Resources, "events") {
				verbs = append(verbs, r.Verbs...)
			}
		}
		return verbs
	}
	want := []string{"create", "get", "patch"}
	if got := eventVerbs(helmRole.Rules); !slices.Equal(got, want) {
		t.Errorf("the Helm path grants CAA %v on events, want %v", got, want)
	}
	base := decode[rbacv1.ClusterRole](t, mustRender(t, Settings{Config: map[string]string{"GCP_PROJECT_ID": "p", "GCP_ZONE": "us-central1-a"}}), "ClusterRole", "caa-gcp-t4-cloud-api-adaptor")
	if got := eventVerbs(base.Rules); !slices.Equal(got, want) {
		t.Errorf("gcp-t4 install grants CAA %v on events, want %v", got, want)
	}
	if !slices.ContainsFunc(helmRole.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"namespaces"}) && slices.Equal(r.ResourceNames, []string{"kube-system"}) && slices.Equal(r.Verbs, []string{"get"})
	}) {
		t.Errorf("the Helm path's ClusterRole lost the kube-system read (CAA's cluster ID check): %v", helmRole.Rules)
	}
	var binding rbacv1.ClusterRoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["ClusterRoleBinding/caa-gcp-t4-provider"], &binding); err != nil {
		t.Fatal(err)
	}
	if binding.RoleRef.Name != helmRole.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "cloud-api-adaptor" || binding.Subjects[0].Namespace != "peerpods" {
		t.Errorf("binding %+v: want ClusterRole %s for ServiceAccount cloud-api-adaptor in the release's namespace peerpods", binding, helmRole.Name)
	}
}
