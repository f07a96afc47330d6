package controlplane

import (
	"os/exec"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestCanIListLayout: the columns, the merge of one resource's verbs across
// rules, names kept apart, non-resource rules one per URL and verb, and the
// order kubectl gives (by the rule's String form: verb list first, "[get
// list]" before "[get]", then group, then resource).
func TestCanIListLayout(t *testing.T) {
	st := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules: []authorizationv1.ResourceRule{
			{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}},
			{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"events"}},
			{Verbs: []string{"patch"}, APIGroups: []string{""}, Resources: []string{"events", "nodes/status"}},
			{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"kube-system", "default"}},
			{Verbs: []string{"create", "patch"}, APIGroups: []string{"confidentialcontainers.org"}, Resources: []string{"peerpods"}},
			{Verbs: []string{"get"}, APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods/log"}},
		},
		NonResourceRules: []authorizationv1.NonResourceRule{
			{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/api"}},
			{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}},
		},
	}
	want := `Resources                             Non-Resource URLs   Resource Names   Verbs
events                                []                  []               [create patch]
peerpods.confidentialcontainers.org   []                  []               [create patch]
pods                                  []                  []               [get list]
                                      [/api]              []               [get]
                                      [/healthz]          []               [get]
                                      [/healthz]          []               [get]
namespaces                            []                  [default]        [get]
namespaces                            []                  [kube-system]    [get]
pods.metrics.k8s.io/log               []                  []               [get]
nodes/status                          []                  []               [patch]
`
	if got := CanIList(st); got != want {
		t.Errorf("CanIList:\n%s\nwant:\n%s", got, want)
	}
}

// TestCanIListMatchesKubectl: on a real API server, RulesReview and CanIList
// as a ServiceAccount print what `kubectl auth can-i --list --as=… -n …`
// prints for it, byte for byte, with the rules every authenticated user and
// every ServiceAccount gets from kube-apiserver's bootstrap policy.
func TestCanIListMatchesKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed to check CanIList against the command it stands for: %v", err)
	}
	cp := StartForTest(t, Options{})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	ctx := t.Context()
	for _, ns := range []string{"sys", "work"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "agent", Namespace: "sys"}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"kube-system"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "agent"}, Subjects: []rbacv1.Subject{sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Role in the workload namespace: its rules join the ClusterRole's
	// for the same resource there.
	if _, err := cs.RbacV1().Roles("work").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a", "b"}, Verbs: []string{"get", "update"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("work").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"}, Subjects: []rbacv1.Subject{sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:sys:agent"
	// RBAC's cache takes the new bindings a moment later.
	if err := cp.WaitForBindings(ctx, "sys", "agent", "work"); err != nil {
		t.Fatal(err)
	}
	st, err := cp.RulesReview(ctx, user, "work")
	if err != nil {
		t.Fatal(err)
	}
	got := CanIList(st)
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.Kubeconfig, "auth", "can-i", "--list", "--as="+user, "-n", "work").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl auth can-i --list: %v\n%s", err, out)
	}
	if got != string(out) {
		t.Errorf("CanIList:\n%s\nkubectl auth can-i --list --as=%s -n work:\n%s", got, user, out)
	}
	// The ServiceAccount's groups came with the impersonated name (the
	// issuer discovery URLs are granted to system:serviceaccounts only),
	// and the Role's verbs joined the ClusterRole's.
	for _, want := range []string{"[/openid/v1/jwks]", "[a]", "[kube-system]"} {
		if !strings.Contains(got, want) {
			t.Errorf("CanIList lacks %q:\n%s", want, got)
		}
	}
	for _, line := range strings.Split(got, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "pods" && !strings.HasSuffix(line, " [get list watch]") {
			t.Errorf("pods: %q, want the ClusterRole's get list and the Role's watch in one row", line)
		}
	}
}
