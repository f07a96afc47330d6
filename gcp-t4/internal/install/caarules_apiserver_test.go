package install

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// workloadNamespace is where the pods a podVM is for run in these tests:
// any namespace but CAA's own answers the same.
const workloadNamespace = "ml"

// caaUser is CAA's ServiceAccount as the API server names it.
const caaUser = "system:serviceaccount:" + Namespace + ":cloud-api-adaptor"

// docCanI reads docs/install.md's `<!-- can-i: NAME -->` block (doccmd,
// as test/helm reads the Helm path's): the fenced block's lines, each
// ending in a newline, as `kubectl auth can-i --list` prints them.
func docCanI(t *testing.T, name string) string {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := doccmd.ByMarker(blocks, "can-i: "+name)
	if !ok {
		t.Fatalf("docs/install.md has no fenced block after `<!-- can-i: %s -->`", name)
	}
	return b.Text
}

// docCanICommand is the command docs/install.md tells a user to run, with
// NAMESPACE replaced: its fields, kubectl first.
func docCanICommand(t *testing.T, ns string) []string {
	t.Helper()
	cmd := strings.TrimSpace(docCanI(t, "command"))
	args := strings.Fields(strings.ReplaceAll(cmd, "NAMESPACE", ns))
	want := "kubectl auth can-i --list --as=" + caaUser + " -n NAMESPACE"
	if cmd != want {
		t.Fatalf("docs/install.md's command is %q, want %q", cmd, want)
	}
	return args
}

// TestCAARulesAreTheDocumentedOnes applies the RBAC `gcp-t4 install` renders
// (install/base/rbac.yaml, which `kubectl apply -k` of the overlay applies
// too) to a real kube-apiserver and asks it, as CAA's ServiceAccount, what
// it may do in a workload namespace: the SelfSubjectRulesReview `kubectl
// auth can-i --list` sends. The answer, in that command's layout, must be
// docs/install.md's table, and so must what the documented command prints.
// Events: create, get and patch (start-up visibility on the pod), and
// nothing that lists, watches or deletes them.
func TestCAARulesAreTheDocumentedOnes(t *testing.T) {
	m := mustRender(t, Settings{Config: map[string]string{"GCP_PROJECT_ID": "p", "GCP_ZONE": "us-central1-a"}})
	objs, err := Objects(m)
	if err != nil {
		t.Fatal(err)
	}
	cp := controlplane.StartForTest(t, controlplane.Options{})
	dyn := dynamic.NewForConfigOrDie(cp.Config())
	ctx := t.Context()
	rbac := schema.GroupVersion{Group: "rbac.authorization.k8s.io", Version: "v1"}
	gvrs := map[string]schema.GroupVersionResource{
		"Namespace":          {Version: "v1", Resource: "namespaces"},
		"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
		"ClusterRole":        rbac.WithResource("clusterroles"),
		"ClusterRoleBinding": rbac.WithResource("clusterrolebindings"),
		"Role":               rbac.WithResource("roles"),
		"RoleBinding":        rbac.WithResource("rolebindings"),
	}
	applied := 0
	// Objects puts namespaces first, so every namespaced object has one.
	for _, o := range objs {
		gvr, ok := gvrs[o.GetKind()]
		if !ok {
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if o.GetNamespace() != "" {
			ri = dyn.Resource(gvr).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		applied++
	}
	if applied == 0 {
		t.Fatal("the render holds no RBAC")
	}
	if err := cp.WaitForBindings(ctx, Namespace, "cloud-api-adaptor", workloadNamespace); err != nil {
		t.Fatal(err)
	}
	st, err := cp.RulesReview(ctx, caaUser, workloadNamespace)
	if err != nil {
		t.Fatal(err)
	}
	want := docCanI(t, "install")
	if got := controlplane.CanIList(st); got != want {
		t.Errorf("the API server's answer for %s in %s:\n%s\ndocs/install.md (<!-- can-i: install -->):\n%s", caaUser, workloadNamespace, got, want)
	}

	// The command the page shows, as a user runs it (an admin's
	// kubeconfig: --as needs impersonation).
	args := docCanICommand(t, workloadNamespace)
	kubectl, err := exec.LookPath(args[0])
	if err != nil {
		t.Fatalf("kubectl is needed to run docs/install.md's command as written: %v", err)
	}
	out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args[1:]...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if string(out) != want {
		t.Errorf("%s printed:\n%s\ndocs/install.md shows:\n%s", strings.Join(args, " "), out, want)
	}

	// The table could be edited with the YAML; these cannot: Events are
	// created, read by name and patched where the pod is, never listed,
	// watched or deleted.
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	for _, c := range []struct {
		verb, ns string
		want     bool
	}{
		{"create", workloadNamespace, true}, {"get", workloadNamespace, true}, {"patch", workloadNamespace, true},
		{"create", "default", true},
		{"list", workloadNamespace, false}, {"watch", workloadNamespace, false}, {"delete", workloadNamespace, false},
		{"deletecollection", workloadNamespace, false}, {"update", workloadNamespace, false}, {"list", "", false},
	} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:               caaUser,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: c.verb, Resource: "events", Namespace: c.ns},
		}}
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.want {
			t.Errorf("CAA's ServiceAccount %s events in %q: allowed=%v, want %v", c.verb, c.ns, r.Status.Allowed, c.want)
		}
	}
}
