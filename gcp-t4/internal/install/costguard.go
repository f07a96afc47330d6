package install

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CostGuardPolicy is the ValidatingAdmissionPolicy (and binding, and
// params ConfigMap) components/cost-guard installs.
const CostGuardPolicy = "gcp-t4-cost-guard"

// costGuardWanted decides components/cost-guard: on and off as given; auto
// keeps it when this installation's policy is there, so an upgrade without
// the flag does not prune an admin's guard.
func costGuardWanted(ctx context.Context, cs kubernetes.Interface, m Mode) (bool, error) {
	if m != ModeAuto {
		return m == ModeOn, nil
	}
	p, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, CostGuardPolicy, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("--cost-guard=auto: reading ValidatingAdmissionPolicy %s: %w (pass --cost-guard=on or off)", CostGuardPolicy, err)
	}
	return p.Labels[PartOfLabel] == PartOfValue, nil
}
