package install

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The reaper's own GCE identity with Workload Identity Federation. CAA's
// credential configuration may impersonate CAA's Google service account
// (service_account_impersonation_url, `gcloud iam workload-identity-pools
// create-cred-config --service-account=…`); the reaper given the same file
// would act as CAA: 403 where only CAA's principal may impersonate it, or
// CAA's whole role where an admin allows it. So the reaper gets the same
// pool and provider without impersonation: its token's subject,
// system:serviceaccount:NAMESPACE:caa-gcp-t4-reaper, is the principal GCE
// authorises, granted only the reaper's custom role (docs/reaper.md).

// reaperWIFConfigFile is the reaper's credential configuration in the
// gcp-wif ConfigMap.
const reaperWIFConfigFile = "reaper-credential-configuration.json"

// reaperWIFConfig is CAA's credential configuration without service
// account impersonation: the federated principal itself calls GCE.
func reaperWIFConfig(caa []byte) ([]byte, error) {
	var c map[string]any
	if err := json.Unmarshal(caa, &c); err != nil {
		return nil, fmt.Errorf("--wif-credential-config: %w", err)
	}
	delete(c, "service_account_impersonation_url")
	delete(c, "service_account_impersonation")
	out, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// ReaperPrincipal is the IAM principal of the reaper's ServiceAccount in
// the pool a credential configuration's audience names
// (//iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER).
func ReaperPrincipal(audience string) (string, error) {
	pool, _, ok := strings.Cut(strings.TrimPrefix(audience, "//iam.googleapis.com/"), "/providers/")
	if !ok || !strings.HasPrefix(pool, "projects/") || !strings.Contains(pool, "/workloadIdentityPools/") {
		return "", fmt.Errorf("audience %q is not a workload identity pool provider", audience)
	}
	return "principal://iam.googleapis.com/" + pool + "/subject/system:serviceaccount:" + Namespace + ":" + ReaperName, nil
}
