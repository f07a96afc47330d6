package install

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strconv"

	kustomizetree "github.com/caa-gcp-t4/install"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// CostGuardPolicy is the ValidatingAdmissionPolicy (and binding, and
// params ConfigMap) components/cost-guard installs to count GPUs at
// CREATE; CostGuardAnnotationsPolicy is its twin that refuses changes to
// io.katacontainers.* annotations on UPDATE.
const (
	CostGuardPolicy            = "gcp-t4-cost-guard"
	CostGuardAnnotationsPolicy = "gcp-t4-cost-guard-annotations"
	// guardMaxKey is the params key --cost-guard-max-gpus-per-pod sets.
	guardMaxKey = "maxGPUsPerPod"
)

// costGuardDecision is what install does with components/cost-guard and
// what it tells the user about it.
type costGuardDecision struct {
	on      bool
	note    string
	warning string
}

// costGuardWanted decides components/cost-guard. on and off are as given.
// auto is on for a first install and keeps what an upgrade finds (the
// policy there or not), so an admin's earlier --cost-guard=off stays off;
// on a cluster whose API server has no ValidatingAdmissionPolicy (before
// Kubernetes 1.30) auto installs without it and warns, on is refused.
func costGuardWanted(ctx context.Context, cs kubernetes.Interface, m Mode, live Live) (costGuardDecision, error) {
	if m == ModeOff {
		return costGuardDecision{}, nil
	}
	served, err := policiesServed(cs)
	if err != nil {
		return costGuardDecision{}, fmt.Errorf("--cost-guard=%s: %w (pass --cost-guard=off to install without it)", m, err)
	}
	if !served {
		if m == ModeOn {
			return costGuardDecision{}, fmt.Errorf("--cost-guard=on: the API server serves no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (GA in Kubernetes 1.30); upgrade the cluster, or pass --cost-guard=off and cap GPUs with GCP_MAX_GPUS_PER_NAMESPACE / GCP_MAX_GPUS_TOTAL (docs/provider.md)")
		}
		return costGuardDecision{warning: "the API server serves no ValidatingAdmissionPolicy (GA in Kubernetes 1.30): installing without the cost guard, so namespaces have no per-pod GPU limit; cap GPUs with --set GCP_MAX_GPUS_PER_NAMESPACE=N, and upgrade the cluster to get it (docs/provider.md)"}, nil
	}
	if m == ModeOn {
		return costGuardDecision{on: true}, nil
	}
	p, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, CostGuardPolicy, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if live.Found || live.Inventory {
			return costGuardDecision{note: "cost guard: not installed here, kept off (--cost-guard=on adds per-namespace GPU limits, docs/provider.md)"}, nil
		}
		return costGuardDecision{on: true, note: "cost guard: on (default for a new install; --cost-guard=off leaves it out, docs/provider.md)"}, nil
	case err != nil:
		return costGuardDecision{}, fmt.Errorf("--cost-guard=auto: reading ValidatingAdmissionPolicy %s: %w (pass --cost-guard=on or off)", CostGuardPolicy, err)
	}
	return costGuardDecision{on: p.Labels[PartOfLabel] == PartOfValue}, nil
}

// policiesServed asks discovery whether the API server serves
// ValidatingAdmissionPolicies (a Get on a type it does not serve is a
// NotFound too, which would read as "not installed").
func policiesServed(cs kubernetes.Interface) (bool, error) {
	rl, err := cs.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovery of admissionregistration.k8s.io/v1: %w", err)
	}
	for _, r := range rl.APIResources {
		if r.Name == "validatingadmissionpolicies" {
			return true, nil
		}
	}
	return false, nil
}

// guardDefaults are the params components/cost-guard ships.
func guardDefaults() (map[string]string, error) {
	p := path.Join(componentGuard, "params.yaml")
	data, err := fs.ReadFile(kustomizetree.Tree(), p)
	if err != nil {
		return nil, fmt.Errorf("embedded manifests: %w", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return nil, fmt.Errorf("embedded %s: %w", p, err)
	}
	return cm.Data, nil
}

// checkGuardMax validates --cost-guard-max-gpus-per-pod as the policy
// reads it (a whole number of up to 6 digits; anything else reads as 0).
func checkGuardMax(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 999999 || strconv.Itoa(n) != v {
		return fmt.Errorf("--cost-guard-max-gpus-per-pod %q: want a whole number of GPUs per pod, e.g. 1 (0 forbids GPU peer pods)", v)
	}
	return nil
}

// readGuardMax is the installed limit every namespace gets per pod, or ""
// without the params ConfigMap.
func readGuardMax(ctx context.Context, cs kubernetes.Interface, ns string) (string, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, CostGuardPolicy, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read configmap %s/%s: %w", ns, CostGuardPolicy, err)
	}
	return cm.Data[guardMaxKey], nil
}
