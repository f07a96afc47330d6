package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// The in-guest image pull of a kata-remote pod runs inside kubelet's
// StartContainer CRI call (containerd creates the kata task there, and
// kata's CreateContainer pulls the image in the guest), so it is bounded by
// the lesser of kubelet's runtimeRequestTimeout on the node (StartContainer
// gets it plainly; RunPodSandbox twice it) and kata-remote's
// create_container_timeout. Both rows, with their defaults and sources,
// are in internal/startup's catalogue; these checks hold the cluster to
// -max-image-pull, the longest pull the admin expects a workload to need.

// gkeKubeletConfigDoc lists the kubelet fields a GKE node pool's node
// system configuration can set; runtimeRequestTimeout is not one.
const gkeKubeletConfigDoc = "https://cloud.google.com/kubernetes-engine/docs/how-to/node-system-config"

// kubeletPullTimeout is how long one node's /configz may take through the
// API server.
const kubeletPullTimeout = 20 * time.Second

// configz is the part of kubelet's /configz preflight reads. kubelet
// registers its configuration under "kubeletconfig" and marshals
// runtimeRequestTimeout as a Go duration ("2m0s"). kata-deploy reads the
// same field the same way, through the node proxy: kata-containers 4.1.0
// (ddcb1ad8d23cbb4323f86c209f132b89592902df)
// tools/packaging/kata-deploy/binary/src/k8s/client.rs,
// get_kubelet_runtime_request_timeout (GET /api/v1/nodes/NODE/proxy/configz,
// then kubeletconfig.runtimeRequestTimeout, with "kubeletConfig" accepted
// as well).
type configz struct {
	KubeletConfig *kubeletConfig `json:"kubeletconfig"`
	// Other spelling kata-deploy accepts.
	KubeletConfigCamel *kubeletConfig `json:"kubeletConfig"`
}

type kubeletConfig struct {
	RuntimeRequestTimeout *string `json:"runtimeRequestTimeout"`
}

// kubeletTimeout reads a node's runtimeRequestTimeout through the API
// server's node proxy. set is false when kubelet's configuration leaves
// it out (kubelet then applies its default).
func (c *Cluster) kubeletTimeout(ctx context.Context, node string) (d time.Duration, set bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, kubeletPullTimeout)
	defer cancel()
	raw, err := c.Client.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		return 0, false, err
	}
	var z configz
	if err := json.Unmarshal(raw, &z); err != nil {
		return 0, false, fmt.Errorf("kubelet's /configz is not JSON: %w", err)
	}
	kc := z.KubeletConfig
	if kc == nil {
		kc = z.KubeletConfigCamel
	}
	if kc == nil {
		return 0, false, fmt.Errorf("kubelet's /configz has no kubeletconfig object")
	}
	if kc.RuntimeRequestTimeout == nil {
		return 0, false, nil
	}
	d, err = time.ParseDuration(*kc.RuntimeRequestTimeout)
	if err != nil {
		return 0, false, fmt.Errorf("kubelet's runtimeRequestTimeout %q: %w", *kc.RuntimeRequestTimeout, err)
	}
	return d, true, nil
}

// proxyGrant is the fix for a caller refused nodes/proxy: a grant on node
// alone, named after it, the run, and the command that removes it. Never a
// standing grant: get on nodes/proxy reaches the kubelet's exec endpoint
// over a WebSocket upgrade (kubernetes/kubernetes#136550,
// kubernetes/website#54191), and CAA's pods on the node hold GCE
// credentials. One node answers for its pool: kubelet's configuration is
// the pool's.
func proxyGrant(node string) string {
	name := "gcp-t4-preflight-kubelet-" + node
	return strings.Join([]string{
		fmt.Sprintf("kubectl create clusterrole %s --verb=get --resource=nodes/proxy --resource-name=%s   # one node, this run only: nodes/proxy can exec into its pods", name, node),
		fmt.Sprintf("kubectl create clusterrolebinding %s --clusterrole=%s --user=YOU   # then run preflight again", name, name),
		fmt.Sprintf("kubectl delete clusterrolebinding,clusterrole %s   # remove the grant", name),
	}, "\n")
}

// mayProxy asks the API server whether the caller may get nodes/proxy on
// node: a 403 from the node proxy is the API server's RBAC only then; else
// it came from beyond it (the kubelet's own authorization, or something on
// the way to the node) and is reported as the node unreadable.
func (c *Cluster) mayProxy(ctx context.Context, node string) bool {
	r, err := c.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy", Name: node}}}, metav1.CreateOptions{})
	return err == nil && r.Status.Allowed
}

// checkKubeletTimeouts holds each kata node's runtimeRequestTimeout to
// -max-image-pull: one result per node, or one for a caller the node
// proxy refuses (the same answer for every node).
func (c *Cluster) checkKubeletTimeouts(ctx context.Context, cat *startup.Catalog, nodes []corev1.Node) []Result {
	row, _ := cat.Deadline(startup.KubeletRuntimeRequest)
	var rs []Result
	for _, n := range nodes {
		check := "kubelet runtimeRequestTimeout " + n.Name
		d, set, err := c.kubeletTimeout(ctx, n.Name)
		switch {
		case apierrors.IsForbidden(err) && !c.mayProxy(ctx, n.Name):
			return append(rs, skip("kubelet runtimeRequestTimeout", proxyGrant(n.Name),
				"not read: kubelet's configuration is served only through GET /api/v1/nodes/%s/proxy/configz, and the API server refused it (403). "+
					"get on nodes/proxy lets its holder run commands in any pod on the node through the kubelet's exec endpoint "+
					"(kubernetes/kubernetes#136550), so preflight asks for it on one node, for one run, to be deleted after", n.Name))
		case err != nil:
			rs = append(rs, fail(check,
				fmt.Sprintf("kubectl get --raw /api/v1/nodes/%s/proxy/configz   # the API server must reach the node's kubelet (its address in status.addresses, port in status.daemonEndpoints)", n.Name),
				"cannot read kubelet's configuration through the node proxy: %v", err))
			continue
		}
		what := d.String()
		if !set {
			d = row.Default.Duration
			what = fmt.Sprintf("%s (kubelet's default: its configuration does not set it)", d)
		}
		if d < c.MaxImagePull {
			raise := fmt.Sprintf("raise kubelet's runtimeRequestTimeout on the kata node pool to at least %s (check your platform's kubelet configuration)", c.MaxImagePull)
			if _, ok := n.Labels[labelNodePool]; ok {
				raise = "GKE cannot raise kubelet's runtimeRequestTimeout: its node system configuration takes a fixed set of kubelet fields without it (" + gkeKubeletConfigDoc + ")"
			}
			rs = append(rs, fail(check,
				fmt.Sprintf("%s; use a smaller image, or a lower --max-image-pull if the workloads' images pull in the guest within %s", raise, d),
				"%s < --max-image-pull %s: kubelet's runtimeRequestTimeout bounds StartContainer, which carries kata's in-guest image pull; a longer pull fails (%s)", what, c.MaxImagePull, row.OnExpiry))
			continue
		}
		rs = append(rs, pass(check, "%s ≥ --max-image-pull %s (it bounds StartContainer, which carries the in-guest image pull)", what, c.MaxImagePull))
	}
	return rs
}
