package remediate

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// API is all the sidecar asks of Kubernetes: its own Node, Events on it,
// and its own DaemonSet's metadata.
type API interface {
	Node(ctx context.Context, name string) (*corev1.Node, error)
	CreateEvent(ctx context.Context, ev *corev1.Event) error
	// DaemonSet returns the metadata of a DaemonSet (errors as the API
	// server sent them: NotFound, Forbidden...).
	DaemonSet(ctx context.Context, ns, name string) (*metav1.PartialObjectMetadata, error)
}

// restAPI talks to the API server with a REST client for core/v1 only:
// the typed clientset would link every API group and their apply
// configurations into the node binary for three calls.
type restAPI struct{ rc rest.Interface }

// NewAPI builds the client from a kubeconfig file, or in-cluster.
func NewAPI(path string) (API, error) {
	cfg, err := kubeconfig.Load(path, "", "gcp-t4-remediate")
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return restAPI{rc: rc}, nil
}

func (a restAPI) Node(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := a.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(n)
	return n, err
}

func (a restAPI) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return a.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

func (a restAPI) DaemonSet(ctx context.Context, ns, name string) (*metav1.PartialObjectMetadata, error) {
	raw, err := a.rc.Get().AbsPath("/apis/apps/v1", "namespaces", ns, "daemonsets", name).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	m := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: %w", ns, name, err)
	}
	return m, nil
}
