package caaconfig

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
)

// Clients are the API clients a gcp-t4 command talks to the cluster with.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Mapper maps kinds to resources from discovery, asked on first use
	// and cached for the command's run.
	Mapper meta.RESTMapper
}

// Client-side rate limit of every command's clients. An install or
// uninstall is one burst of requests (discovery, the server-side applies,
// the read-backs, the inventory). client-go's default bucket (5 QPS,
// burst 10: rest/config.go DefaultQPS and DefaultBurst at v0.35.4, the
// version we pin) held most of them in the client: the generic-cluster
// test case (install, checks, uninstall) took 19.3 s with it and 2.4 s
// with this one. Helm 3.22 gives its client a burst of 100
// (pkg/cli/environment.go defaultBurstLimit) and kubectl v0.37.2 runs
// discovery at 50 QPS (pkg/cmd/cmd.go); the server's own API Priority and
// Fairness, not this bucket, is what protects it. The other commands send
// fewer requests than the burst, so the same limit costs them nothing.
const (
	QPS   = 50
	Burst = 100
)

// Connect builds the clients for the API a kubeconfig names (kubeconfig.Load:
// path, else in the cluster, else $KUBECONFIG; context "" is the current
// one), with the rate limit above. userAgent names the command in the API
// server's audit log.
func Connect(path, context, userAgent string) (Clients, error) {
	cfg, err := restConfig(path, context, userAgent)
	if err != nil {
		return Clients{}, err
	}
	return NewClients(cfg)
}

func restConfig(path, context, userAgent string) (*rest.Config, error) {
	cfg, err := kubeconfig.Load(path, context, userAgent)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = QPS, Burst
	return cfg, nil
}

// NewClients builds the clients for cfg as it is (tests pass a control
// plane's).
func NewClients(cfg *rest.Config) (Clients, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	return Clients{Kube: cs, Dynamic: dyn, Mapper: mapper}, nil
}
