package install

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/containerdversions"
	"github.com/caa-gcp-t4/gcp-t4/internal/nodeevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// sidecarHost is one node as `gcp-t4-node remediate` sees it: a GKE-like
// containerd config under a scratch host root with kata installed and the
// node's containerd binary (2.0, as the test Nodes report
// containerd://2.0.4) at /usr/bin/containerd, and a kubeconfig with a
// token of a ServiceAccount.
type sidecarHost struct {
	dir, conf, host, kubeconfig, node string
	orig                              []byte
}

func (e *env) sidecarHost(t *testing.T, ns, sa, node string) *sidecarHost {
	t.Helper()
	ctx := t.Context()
	exp := int64(600)
	tok, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	s := &sidecarHost{dir: t.TempDir(), node: node}
	s.kubeconfig = filepath.Join(s.dir, "kubeconfig")
	if err := e.cp.WriteKubeconfig(s.kubeconfig, tok.Status.Token); err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile(filepath.Join("..", "remediate", "testdata", "gke-v2.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s.conf = filepath.Join(s.dir, "etc", "containerd", "config.toml")
	s.host = filepath.Join(s.dir, "host")
	s.orig = bytes.ReplaceAll(main, []byte("@TMP@"), []byte(s.dir))
	h := remediate.DefaultHandler()
	for path, data := range map[string][]byte{
		s.conf:                               s.orig,
		filepath.Join(s.host, h.RuntimePath): []byte("#!/bin/sh\n"),
		filepath.Join(s.host, h.ConfigPath):  []byte("[runtime]\n"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(s.host, "usr", "bin", "containerd")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(containerd20(t), bin); err != nil {
		t.Fatal(err)
	}
	return s
}

// containerd20 is the containerd 2.0 release `make containerd` builds
// (the first 2.x of test/containerd/versions.mk).
func containerd20(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real containerd (built from the module proxy when not cached); skipped with -short")
	}
	_, v2s, err := containerdversions.Pinned()
	if err != nil {
		t.Fatal(err)
	}
	v := v2s[0]
	for _, f := range v2s {
		if strings.HasPrefix(f, "v2.0.") {
			v = f
			break
		}
	}
	out, err := exec.Command("../../../test/containerd/build.sh", v).Output()
	if err != nil {
		t.Fatalf("containerd %s (make containerd builds it): %v", v, err)
	}
	return strings.TrimSpace(string(out))
}

// run runs `gcp-t4-node remediate` on the host with extra flags and
// returns its stderr. The containerd version comes from the Node (no CRI
// socket), so a refused Node read shows as a missing drop-in, not only in
// the log.
func (s *sidecarHost) run(t *testing.T, ctx context.Context, extra ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := append([]string{
		"--kubeconfig=" + s.kubeconfig, "--node-name=" + s.node, "--config=" + s.conf, "--host-root=" + s.host,
		"--kata-dir=" + filepath.Join(s.host, "opt", "kata"), "--lock=", "--cri-socket=", "--restart=none", "--listen=", "--quiet=0s",
	}, extra...)
	code := remediate.Main(ctx, args, &stdout, &stderr, nil)
	t.Logf("sidecar on %s (%v):\n%s%s", s.node, extra, stdout.String(), stderr.String())
	return code, stderr.String()
}

// nodeEvents lists the Events `kubectl describe node` shows for node.
func (e *env) nodeEvents(t *testing.T, node string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node}.AsSelector().String()
	l, err := e.cs.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// testSidecarIdentity: with the RBAC install applied, the sidecar's own
// ServiceAccount reads its Node and records its Event; a ServiceAccount
// without those grants does neither (so the first half is owed to the
// manifests, not to a permissive server).
func (e *env) testSidecarIdentity(t *testing.T, node string) {
	_, stderr := e.sidecarHost(t, Namespace, RemediationDaemonSet, node).run(t, t.Context(), "--once")
	for _, bad := range []string{"reading the node failed", "recording node event failed"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("sidecar with its ServiceAccount logged %q", bad)
		}
	}
	var restored *corev1.Event
	for _, ev := range e.nodeEvents(t, node) {
		if ev.Reason == nodeevents.ConfigRestored {
			restored = &ev
		}
	}
	if restored == nil {
		t.Fatalf("no KataRemoteConfigRestored Event for node %s on the API server", node)
	}
	if restored.Source.Component != "gcp-t4-remediate" || restored.Type != corev1.EventTypeNormal ||
		!strings.Contains(restored.Message, "config version 2") {
		t.Errorf("event: component %q, type %q, message %q", restored.Source.Component, restored.Type, restored.Message)
	}

	other := "gke-c-peer-2"
	if _, err := e.cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-grants"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Delete(context.Background(), "no-grants", metav1.DeleteOptions{})
	})
	_, stderr = e.sidecarHost(t, metav1.NamespaceDefault, "no-grants", other).run(t, t.Context(), "--once")
	for _, want := range []string{"reading the node failed", "recording node event failed", "forbidden"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("sidecar without grants: stderr lacks %q", want)
		}
	}
	if evs := e.nodeEvents(t, other); len(evs) != 0 {
		t.Errorf("a ServiceAccount without grants recorded %d Events", len(evs))
	}
}

// testUninstallRestoresNodes: `gcp-t4 uninstall` deletes the remediate
// DaemonSet first; the node's sidecar, stopped as kubelet stops it (its
// context ends), sees its DaemonSet gone through the API with its own
// identity, puts the node's containerd config back byte for byte and says
// so in an Event, which uninstall reports per node. The test stands in for
// kubelet and the garbage collector (neither runs here): a pod of the
// DaemonSet on the node, deleted once the DaemonSet is gone.
func (e *env) testUninstallRestoresNodes(t *testing.T) {
	ctx := t.Context()
	node := "gke-c-peer-1"
	e.setNodes(t, gkeNode(node, "peer", "ubuntu", true))
	if code, out, errs := e.install(t); code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	ds, err := e.cs.AppsV1().DaemonSets(Namespace).Get(ctx, RemediationDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: RemediationDaemonSet + "-x1", Namespace: Namespace, Labels: ds.Spec.Selector.MatchLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &ctrl}}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: RemediationDaemonSet, Containers: []corev1.Container{{Name: "remediate", Image: "x"}}},
	}
	if _, err := e.cs.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := e.sidecarHost(t, Namespace, RemediationDaemonSet, node)
	if code, _ := s.run(t, ctx, "--once"); code != 0 {
		t.Fatal("the sidecar did not converge the node")
	}
	if got, _ := os.ReadFile(s.conf); bytes.Equal(got, s.orig) {
		t.Fatal("the sidecar changed nothing; nothing to restore")
	}

	// kubelet: once the DaemonSet is gone, the pod is stopped (SIGTERM:
	// the sidecar's context ends) and deleted.
	kubelet := make(chan error, 1)
	go func() {
		kubelet <- func() error {
			for {
				_, err := e.cs.AppsV1().DaemonSets(Namespace).Get(ctx, RemediationDaemonSet, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
			stopped, cancel := context.WithCancel(ctx)
			cancel()
			if code, _ := s.run(t, stopped, "--daemonset="+RemediationDaemonSet, "--namespace="+Namespace); code != 0 {
				t.Errorf("the stopped sidecar exited %d", code)
			}
			zero := int64(0)
			return e.cs.CoreV1().Pods(Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}()
	}()
	out := e.uninstall(t)
	if err := <-kubelet; err != nil {
		t.Fatal(err)
	}
	mustContain(t, "uninstall stdout", out, "deleted DaemonSet/"+Namespace+"/"+RemediationDaemonSet+"; its pods restore containerd's configuration on nodes "+node,
		"node "+node+": restored "+s.conf)
	if got, _ := os.ReadFile(s.conf); !bytes.Equal(got, s.orig) {
		t.Errorf("node's config.toml after uninstall is not what it was before install:\n%s", got)
	}
	e.assertNothingLeft(t)
}
