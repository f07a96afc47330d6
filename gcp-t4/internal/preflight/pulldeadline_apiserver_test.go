package preflight

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeletstandin"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

const peerPodsLabel = "caa-gcp-t4/peer-pods"

// TestImagePullDeadlinesOnARealAPIServer: preflight reads each kata node's
// kubelet configuration through a real kube-apiserver's node proxy (a
// stand-in kubelet serving /configz over TLS on a non-loopback address),
// and the node sidecar's DaemonSet and pods, and holds both deadlines of
// the in-guest image pull to -max-image-pull.
func TestImagePullDeadlinesOnARealAPIServer(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	admin := kubernetes.NewForConfigOrDie(cp.Config())
	c := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	sel := map[string]string{peerPodsLabel: "true"}
	for name, l := range map[string]map[string]string{"kata-1": sel, "system-1": nil} {
		_, err := admin.CoreV1().Nodes().Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
		must(err)
	}
	kubelet := kubeletstandin.Start(t, "")
	must(kubelet.Attach(c, admin, "kata-1", corev1.NodeInternalIP))
	// system-1 is outside the selector: its kubelet (none) is never asked.

	_, err := admin.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	daemonSet := func(name string, labels map[string]string, args ...string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: sel, ServiceAccountName: name,
				Containers: []corev1.Container{{Name: "c", Image: "caa-gcp-t4", Args: args}},
			}},
		}}
	}
	_, err = admin.AppsV1().DaemonSets(ns).Create(c, daemonSet(dsName, map[string]string{"app": "cloud-api-adaptor"}), metav1.CreateOptions{})
	must(err)
	sidecarLabels := map[string]string{"app": RemediateDaemonSet}
	sidecar, err := admin.AppsV1().DaemonSets(ns).Create(c, daemonSet(RemediateDaemonSet, sidecarLabels, "--host-root=/host", "--create-container-timeout=30m"), metav1.CreateOptions{})
	must(err)
	_, err = admin.CoreV1().ServiceAccounts(ns).Create(c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: RemediateDaemonSet}}, metav1.CreateOptions{})
	must(err)
	pod, err := admin.CoreV1().Pods(ns).Create(c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: RemediateDaemonSet + "-x7k2p", Labels: sidecarLabels},
		Spec: corev1.PodSpec{NodeName: "kata-1", ServiceAccountName: RemediateDaemonSet, Containers: []corev1.Container{{Name: "c", Image: "caa-gcp-t4"}}}}, metav1.CreateOptions{})
	must(err)
	setReady := func(ready corev1.ConditionStatus) {
		t.Helper()
		p, err := admin.CoreV1().Pods(ns).Get(c, pod.Name, metav1.GetOptions{})
		must(err)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		_, err = admin.CoreV1().Pods(ns).UpdateStatus(c, p, metav1.UpdateOptions{})
		must(err)
	}
	setReady(corev1.ConditionTrue)
	setArgs := func(args ...string) {
		t.Helper()
		ds, err := admin.AppsV1().DaemonSets(ns).Get(c, sidecar.Name, metav1.GetOptions{})
		must(err)
		ds.Spec.Template.Spec.Containers[0].Args = args
		_, err = admin.AppsV1().DaemonSets(ns).Update(c, ds, metav1.UpdateOptions{})
		must(err)
	}

	cat, err := startup.Load()
	must(err)
	maxPull := cat.InstallCreateContainerTimeout() // Main's default, 20m
	run := func(cs kubernetes.Interface) []Result {
		t.Helper()
		cl := &Cluster{Client: cs, RuntimeClass: "kata-remote", Namespace: ns, DaemonSet: dsName, Remediate: RemediateDaemonSet, MaxImagePull: maxPull}
		nodes, err := cl.peerPodNodes(c)
		must(err)
		return append(cl.checkKubeletTimeouts(c, cat, nodes), cl.checkCreateContainer(c, cat, nodes)...)
	}
	allPass := func(t *testing.T, rs []Result) {
		t.Helper()
		if len(rs) != 3 {
			t.Errorf("want 3 results (kubelet on kata-1, the sidecar's argument, its readiness): %v", rs)
		}
		for _, r := range rs {
			if r.Status != Pass {
				t.Errorf("%s: %s %s (fix %s)", r.Check, r.Status, r.Detail, r.Fix)
			}
		}
	}

	t.Run("kubelet default 2m fails", func(t *testing.T) {
		for _, served := range []string{"", "2m0s"} {
			kubelet.Set(served)
			rs := run(admin)
			expect(t, rs, "kubelet runtimeRequestTimeout kata-1", Fail, "2m0s", "runtimeRequestTimeout on the kata node pool to at least 20m0s")
			expect(t, rs, "kubelet runtimeRequestTimeout kata-1", Fail, "bounds StartContainer, which carries kata's in-guest image pull", "a lower --max-image-pull")
			if served == "" {
				expect(t, rs, "kubelet runtimeRequestTimeout kata-1", Fail, "kubelet's default", "")
			}
		}
	})
	t.Run("30m passes", func(t *testing.T) {
		// On GKE (a node pool label) the fix says the pool cannot raise it.
		n, err := admin.CoreV1().Nodes().Get(c, "kata-1", metav1.GetOptions{})
		must(err)
		n.Labels[labelNodePool] = "peer-pods"
		_, err = admin.CoreV1().Nodes().Update(c, n, metav1.UpdateOptions{})
		must(err)
		expect(t, run(admin), "kubelet runtimeRequestTimeout kata-1", Fail, "2m0s", "GKE cannot raise kubelet's runtimeRequestTimeout: its node system configuration takes a fixed set of kubelet fields without it (https://cloud.google.com/kubernetes-engine/docs/how-to/node-system-config); use a smaller image, or a lower --max-image-pull")

		kubelet.Set("30m0s")
		before := kubelet.Calls()
		rs := run(admin)
		allPass(t, rs)
		expect(t, rs, "kubelet runtimeRequestTimeout kata-1", Pass, "30m0s ≥ --max-image-pull 20m0s", "")
		if kubelet.Calls() != before+1 {
			t.Errorf("the stand-in kubelet was asked %d times, want once", kubelet.Calls()-before)
		}
	})
	t.Run("caller without nodes/proxy", func(t *testing.T) {
		// A caller that may read what the other checks read, not the proxy.
		_, err := admin.RbacV1().ClusterRoles().Create(c, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "preflight-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
		}}, metav1.CreateOptions{})
		must(err)
		_, err = admin.RbacV1().ClusterRoleBindings().Create(c, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "preflight-reader"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "preflight-reader"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}, metav1.CreateOptions{})
		must(err)
		// RBAC reads bindings from an informer cache: without this wait the
		// first DaemonSet read can be refused (the e65fbd1 and 9f213d7 CI
		// runs' failures).
		must(cp.WaitForAccess(c, "alice",
			authzv1.ResourceAttributes{Group: "apps", Resource: "daemonsets", Verb: "get", Namespace: "confidential-containers-system"},
			authzv1.ResourceAttributes{Resource: "nodes", Verb: "list"},
			authzv1.ResourceAttributes{Resource: "pods", Verb: "list"}))
		cfg := cp.Config()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
		alice := kubernetes.NewForConfigOrDie(cfg)
		rs := run(alice)
		// Skipped, not failed: preflight never asks for a standing grant
		// of nodes/proxy, which reaches the kubelet's exec endpoint.
		expect(t, rs, "kubelet runtimeRequestTimeout", Skip, "run commands in any pod on the node through the kubelet's exec endpoint", "--resource=nodes/proxy --resource-name=kata-1")
		expect(t, rs, "kata-remote create_container_timeout", Pass, "30m0s", "")
		r, _ := find(rs, "kubelet runtimeRequestTimeout")
		if Failed(rs) {
			t.Errorf("a caller without nodes/proxy fails preflight: %v", rs)
		}
		var grant, remove []string
		for _, line := range strings.Split(r.Fix, "\n") {
			cmd, _, _ := strings.Cut(line, commentSep)
			if strings.Contains(cmd, "kubectl delete") {
				remove = append(remove, cmd)
			} else {
				grant = append(grant, strings.ReplaceAll(cmd, "--user=YOU", "--user=alice"))
			}
		}
		if len(grant) != 2 || len(remove) != 1 || strings.Contains(r.Fix, "clusterrole gcp-t4-preflight-kubelet ") {
			t.Fatalf("the fix is not a named grant on one node and its removal:\n%s", r.Fix)
		}
		// docs/preflight.md gives the same commands, NODE for the node.
		doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "preflight.md"))
		must(err)
		for _, cmd := range append(append([]string{}, grant...), remove...) {
			cmd = strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(cmd), "--user=alice", "--user=YOU"), "kata-1", "NODE")
			if !strings.Contains(string(doc), "`"+cmd+"`") {
				t.Errorf("docs/preflight.md lacks the fix's command `%s`", cmd)
			}
		}
		// The fix's commands, run as printed with the real kubectl as the
		// admin, YOU being alice.
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Fatalf("kubectl runs the fix as printed: %v", err)
		}
		sh := func(cmd string) {
			t.Helper()
			args := strings.Fields(cmd)
			if args[0] != "kubectl" {
				t.Fatalf("fix line %q is not a kubectl command", cmd)
			}
			out, err := exec.CommandContext(c, kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args[1:]...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, out)
			}
		}
		until := func(want Status) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Minute) // far beyond the slowest machine: it ends on the condition
			for {
				rs = run(alice)
				if r, _ := find(rs, "kubelet runtimeRequestTimeout"); r.Status == want {
					return
				} else if time.Now().After(deadline) {
					t.Fatalf("the kubelet check never became %s: %v", want, r)
				}
				time.Sleep(200 * time.Millisecond) // the RBAC cache catches up
			}
		}
		for _, cmd := range grant {
			sh(cmd)
		}
		until(Pass)
		allPass(t, rs)
		// The grant is on kata-1 only.
		ssar, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(c, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "system-1"}}}, metav1.CreateOptions{})
		must(err)
		if ssar.Status.Allowed {
			t.Error("the fix's grant reaches node system-1 too")
		}
		sh(remove[0])
		until(Skip)
		if _, err := admin.RbacV1().ClusterRoles().Get(c, "gcp-t4-preflight-kubelet-kata-1", metav1.GetOptions{}); err == nil {
			t.Error("the fix's delete left the ClusterRole")
		}
	})
	t.Run("kubelet unreachable", func(t *testing.T) {
		// A port on the stand-in's address that nothing listens on.
		l, err := net.Listen("tcp", kubelet.Addr.String()+":0")
		must(err)
		port := int32(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		must(kubeletstandin.Attach(c, admin, "kata-1", corev1.NodeInternalIP, kubelet.Addr, port))
		rs := run(admin)
		expect(t, rs, "kubelet runtimeRequestTimeout kata-1", Fail, "cannot read kubelet's configuration through the node proxy", "kubectl get --raw /api/v1/nodes/kata-1/proxy/configz")
		must(kubelet.Attach(c, admin, "kata-1", corev1.NodeInternalIP))
		allPass(t, run(admin))
	})
	t.Run("kubelet refuses the API server", func(t *testing.T) {
		// A 403 from beyond the API server (the kubelet's authorization, or
		// a filter on the way) is the node unreadable, not preflight's RBAC.
		kubelet.Refuse(true)
		rs := run(admin)
		expect(t, rs, "kubelet runtimeRequestTimeout kata-1", Fail, "cannot read kubelet's configuration through the node proxy", "kubectl get --raw")
		if r, _ := find(rs, "kubelet runtimeRequestTimeout"); strings.Contains(r.Fix, "clusterrole") {
			t.Errorf("a kubelet's 403 blamed on the caller's RBAC: %s", r.Fix)
		}
		kubelet.Refuse(false)
		allPass(t, run(admin))
	})
	t.Run("sidecar argument below", func(t *testing.T) {
		setArgs("--host-root=/host", "--create-container-timeout=5m")
		expect(t, run(admin), "kata-remote create_container_timeout", Fail, "5m0s (--create-container-timeout of DaemonSet "+ns+"/gcp-t4-remediate) < --max-image-pull 20m0s", "gcp-t4 install --create-container-timeout=20m0s")
		setArgs("--host-root=/host")
		expect(t, run(admin), "kata-remote create_container_timeout", Fail, "1m0s (kata's default", "gcp-t4 install --create-container-timeout=20m0s")
		setArgs("--host-root=/host", "--create-container-timeout", "20m")
		allPass(t, run(admin))
	})
	t.Run("sidecar not ready", func(t *testing.T) {
		setReady(corev1.ConditionFalse)
		rs := run(admin)
		expect(t, rs, "sidecar gcp-t4-remediate on kata-1", Fail, "pod "+pod.Name+" on kata node kata-1 is not Ready", "kubectl -n "+ns+" describe pod "+pod.Name)
		if r, _ := find(rs, "sidecar"); !strings.Contains(r.Fix, "Events") {
			t.Errorf("fix does not point at the pod's Events: %s", r.Fix)
		}
		setReady(corev1.ConditionTrue)
		allPass(t, run(admin))
	})
}
