package gc

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KubePods lists pods through the Kubernetes API, page by page so a large
// cluster does not make one huge response.
type KubePods struct {
	Client kubernetes.Interface
}

// ListPods returns every pod's name and creation time.
func (k KubePods) ListPods(ctx context.Context) ([]Pod, error) {
	var out []Pod
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := k.Client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing pods in all namespaces (needs RBAC list on pods): %w", err)
		}
		for _, p := range list.Items {
			out = append(out, Pod{Name: p.Name, Created: p.CreationTimestamp.Time})
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}
