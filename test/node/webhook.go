package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CAA's peer-pods webhook (upstream src/webhook at v0.22.0), as its chart
// (src/webhook/chart) installs it, with what the harness cannot run as
// the chart does replaced: a host process, not a Deployment behind a
// Service; clientConfig.url instead of clientConfig.service; a serving
// certificate and caBundle the harness makes instead of cert-manager's.
const (
	// EnvWebhook is the webhook's manager binary, built from UPSTREAM's
	// src/webhook (kata-build.sh).
	EnvWebhook = "NODE_WEBHOOK"
	// webhookNamespace is the chart's namespaceOverride.
	webhookNamespace = "peer-pods-webhook-system"
	// webhookPrefix is the chart's namePrefix.
	webhookPrefix = "peer-pods-webhook-"
	// webhookPort is the manager's webhook port: main.go sets 9443 and
	// no flag changes it.
	webhookPort = 9443
	// webhookPath is where main.go registers the pod mutator.
	webhookPath = "/mutate-v1-pod"
	// webhookName is the chart's webhook name (the kubebuilder marker in
	// pkg/mutating/mutating-webhook.go).
	webhookName = "mwebhook.peerpods.io"
)

// webhookConfiguration is the chart's MutatingWebhookConfiguration
// (templates/webhook-config.yaml at v0.22.0, failurePolicy Fail, its
// values' default) with clientConfig.url for its Service.
func webhookConfiguration(caPEM []byte) *admissionv1.MutatingWebhookConfiguration {
	u := fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, webhookPath)
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	ifNeeded := admissionv1.IfNeededReinvocationPolicy
	scope := admissionv1.NamespacedScope
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: webhookPrefix + "mutating-webhook-configuration"},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    webhookName,
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionv1.WebhookClientConfig{URL: &u, CABundle: caPEM},
			FailurePolicy:           &fail,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
				Values: []string{webhookNamespace, "kube-system"},
			}}},
			ReinvocationPolicy: &ifNeeded,
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods"}, Scope: &scope},
			}},
			SideEffects: &none,
		}},
	}
}

// StartWebhook runs CAA's peer-pods webhook against the node's API server
// and registers it: the chart's namespace, ServiceAccount and ClusterRole
// (templates/rbac.yaml's manager-role) and binding, the manager as a host
// process with the chart's environment (TARGET_RUNTIMECLASS kata-remote,
// POD_VM_EXTENDED_RESOURCE kata.peerpods.io/vm) and a token of that
// ServiceAccount in a kubeconfig, its serving certificate where
// controller-runtime reads it (<TMPDIR>/k8s-webhook-server/serving-certs,
// the chart's mount), then the MutatingWebhookConfiguration. Left out:
// --leader-elect (one replica here, not the chart's two) and the metrics
// server (its port 8443 bound on every interface; the chart's own is
// scraped by nothing here). It returns once the webhook serves TLS on
// 127.0.0.1:9443 and its configuration is created.
func (n *Node) StartWebhook(ctx context.Context, bin string) error {
	if bin == "" {
		return fmt.Errorf("node: %s is not set; run `%s`", EnvWebhook, KataMakeCommand)
	}
	// 9443 is fixed in the webhook's main.go: another process there
	// would answer the API server in its place.
	if l, err := net.Listen("tcp", fmt.Sprintf(":%d", webhookPort)); err != nil {
		return fmt.Errorf("node: the peer-pods webhook listens on :%d (fixed in its main.go), which is taken: %w", webhookPort, err)
	} else {
		l.Close()
	}
	cs, err := kubernetes.NewForConfig(n.cp.Config())
	if err != nil {
		return fmt.Errorf("node: client: %w", err)
	}
	sa := webhookPrefix + "controller-manager"
	role := webhookPrefix + "manager-role"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("node: webhook namespace: %w", err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(webhookNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("node: webhook ServiceAccount: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
			Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("node: webhook ClusterRole: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: webhookPrefix + "manager-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: webhookNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("node: webhook ClusterRoleBinding: %w", err)
	}
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(webhookNamespace).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node: a token for the webhook's ServiceAccount: %w", err)
	}
	kc := n.path("webhook.kubeconfig")
	if err := n.cp.WriteKubeconfig(kc, tr.Status.Token); err != nil {
		return fmt.Errorf("node: %w", err)
	}

	// Signed by the control plane's CA, which is then the caBundle. The
	// Service's DNS name the chart's certificate names, and the address
	// the API server calls here.
	svc := webhookPrefix + "webhook-service." + webhookNamespace + ".svc"
	certPEM, keyPEM, err := n.cp.ServingCert(svc, []string{svc}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return fmt.Errorf("node: webhook certificate: %w", err)
	}
	caPEM, err := os.ReadFile(n.cp.CAFile())
	if err != nil {
		return fmt.Errorf("node: the control plane's CA: %w", err)
	}
	tmp := n.path("webhook-tmp")
	certDir := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	probe := fmt.Sprintf("127.0.0.1:%d", ports[0])
	env := []string{"HOME=/root", "PATH=" + os.Getenv("PATH"), "TMPDIR=" + tmp, "KUBECONFIG=" + kc,
		"TARGET_RUNTIMECLASS=" + KataHandler, "POD_VM_EXTENDED_RESOURCE=kata.peerpods.io/vm"}
	p, err := n.start("peer-pods-webhook", env, bin, "--health-probe-bind-address="+probe, "--metrics-bind-address=0")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitFor(ctx, 2*time.Minute, "the peer-pods webhook's TLS on 127.0.0.1:9443 and its readyz", func() (bool, error) {
		if err := p.exited(); err != nil {
			return false, err
		}
		r, err := http.Get("http://" + probe + "/readyz")
		if err != nil {
			return false, nil
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return false, nil
		}
		// Any answer over TLS with the harness's CA will do: a GET is
		// not an AdmissionReview, and the manager says so.
		r, err = client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, webhookPath))
		if err != nil {
			return false, nil
		}
		r.Body.Close()
		return true, nil
	}); err != nil {
		return fmt.Errorf("%w; the webhook's log ends:\n%s", err, n.LogTail("peer-pods-webhook", 3000))
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, webhookConfiguration(caPEM), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("node: the webhook's MutatingWebhookConfiguration: %w", err)
	}
	n.logger.Info("peer-pods webhook up and registered", "url", fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, webhookPath))
	return nil
}
