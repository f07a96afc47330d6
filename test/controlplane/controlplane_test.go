package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func TestMissingBinariesNameTheMakeCommand(t *testing.T) {
	t.Setenv(EnvKubeAPIServer, "")
	t.Setenv(EnvEtcd, t.TempDir())
	_, err := BinariesFromEnv()
	if err == nil {
		t.Fatal("no error for missing binaries")
	}
	for _, want := range []string{EnvKubeAPIServer + " is not set", EnvEtcd + "=", "not an executable file", "`make controlplane`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestControlPlane starts the real pair and checks what tests rely on: the
// admin config and the kubeconfig both work, the server validates strictly,
// and RBAC is enforced for other identities.
func TestControlPlane(t *testing.T) {
	cp := StartForTest(t, Options{})
	cs := kubernetes.NewForConfigOrDie(cp.Config())
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.Major != "1" || v.Minor == "" || !strings.HasPrefix(v.GitVersion, "v1.") {
		t.Errorf("version = %+v, want a 1.x release build", v)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cp-test"}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	fromFile, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(fromFile).CoreV1().Namespaces().Get(t.Context(), "cp-test", metav1.GetOptions{}); err != nil {
		t.Errorf("get through kubeconfig: %v", err)
	}

	// Strict field validation is the server's, not a client's.
	bad := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"cp-test"},"data":{"a":"b"},"spam":1}`)
	err = cs.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/cp-test/configmaps").
		Param("fieldValidation", "Strict").SetHeader("Content-Type", "application/json").Body(bad).Do(t.Context()).Error()
	if err == nil || !strings.Contains(err.Error(), "spam") {
		t.Errorf("strict validation: err = %v, want the unknown field named", err)
	}

	imp := cp.Config()
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:cp-test:nobody"}
	_, err = kubernetes.NewForConfigOrDie(imp).CoreV1().Secrets("cp-test").List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("list secrets as a ServiceAccount without RBAC: err = %v, want Forbidden", err)
	}
}

// TestCertKubeconfig: a kubeconfig from WriteCertKubeconfig logs in as the
// certificate's user and groups (what a kubelet's node certificate needs),
// and CAFile is the CA that verifies it.
func TestCertKubeconfig(t *testing.T) {
	cp := StartForTest(t, Options{})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteCertKubeconfig(path, "system:node:n1", "system:nodes"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with the certificate: %v", err)
	}
	u := review.Status.UserInfo
	if u.Username != "system:node:n1" || !slices.Contains(u.Groups, "system:nodes") {
		t.Errorf("the certificate logs in as %q in %v, want system:node:n1 in system:nodes", u.Username, u.Groups)
	}
	ca, err := os.ReadFile(cp.CAFile())
	if err != nil || !strings.Contains(string(ca), "BEGIN CERTIFICATE") {
		t.Errorf("CAFile %s: %v %.40q", cp.CAFile(), err, ca)
	}
}

// TestFailedStartRemovesWhatItMade: a start that fails half-way (here its
// context is cancelled while etcd comes up, as a Ctrl-C does) stops what it
// started and removes its temporary directory, instead of leaving both to
// the test binary's exit.
func TestFailedStartRemovesWhatItMade(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd; skipped with -short")
	}
	bin, err := BinariesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if cp, err := Start(ctx, bin, Options{}); err == nil {
		_ = cp.Stop()
		t.Fatal("Start with a cancelled context succeeded")
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("a failed start left %s in the temporary directory", e.Name())
	}
}
