// Package kubeconfig finds the Kubernetes API the way every gcp-t4 command
// should: an explicit file first, then the pod's service account when
// running in a cluster, then $KUBECONFIG and ~/.kube/config.
package kubeconfig

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// InCluster reports whether the process runs in a pod with an API server
// to talk to.
func InCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

// Load returns the client configuration; context selects a kubeconfig
// context ("" = the current one). userAgent names the command to the API
// server's audit log.
func Load(path, context, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" && context == "" && InCluster() {
		cfg, err = rest.InClusterConfig()
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = path
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	}
	if clientcmd.IsEmptyConfig(err) {
		// client-go's own words suggest KUBERNETES_MASTER, which no
		// command of ours reads: say what was looked for and what to do.
		return nil, fmt.Errorf("no kubeconfig: none at ~/.kube/config or in KUBECONFIG, and not in a cluster: pass -kubeconfig FILE or set KUBECONFIG; to try it offline, gcp-t4 emulator serves a cluster and prints the command with its kubeconfig")
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w (pass -kubeconfig, set KUBECONFIG, or run in the cluster)", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Namespace is the namespace a command acts in when it is given none, as
// kubectl picks it: the kubeconfig context's (path and context as Load
// takes them), else "default"; in a pod without a kubeconfig, the pod's
// own.
func Namespace(path, context string) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: the current namespace: %w (pass -n)", err)
	}
	return ns, nil
}
