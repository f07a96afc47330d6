package preflight

import (
	"fmt"
	"strings"
)

// The reaper's own custom role: what `gcp-t4 reaper` calls and nothing
// more. It lists this cluster's podVMs (instances.aggregatedList),
// deletes orphans and waits for the delete (instances.delete,
// zoneOperations.wait), and reads what ended a lost podVM from the
// operations on it (zoneOperations.list); nothing it does calls
// instances.get, so the role has none. Bound with PodVMCondition, so its delete reaches podvm-*
// instances only; list is granted on the project, which a
// condition on the instance name cannot narrow (issue: list reads every
// VM's metadata; docs/threat-model.md).
const (
	ReaperRoleID    = "caaGcpT4Reaper"
	ReaperRoleTitle = "caa-gcp-t4 podVM reaper"
)

// ReaperPermissions are the reaper's role's permissions, sorted.
var ReaperPermissions = []string{"compute.instances.delete", "compute.instances.list", "compute.zoneOperations.get", "compute.zoneOperations.list"}

// ReaperMember is the reaper's principal when no other is known: its
// Kubernetes ServiceAccount through GKE's Workload Identity Federation for
// GKE (the reaper is not on the host network, so GKE's metadata server
// tells its pod apart).
func ReaperMember(project string) string {
	return fmt.Sprintf("principal://iam.googleapis.com/projects/PROJECT_NUMBER/locations/global/workloadIdentityPools/%s.svc.id.goog/subject/ns/confidential-containers-system/sa/caa-gcp-t4-reaper", project)
}

// ReaperRoleFix creates the reaper's role and grants it to member (its
// principal; "" for the GKE form) with the podVM condition.
func ReaperRoleFix(project, member string) string {
	if member == "" {
		member = ReaperMember(project)
	}
	return upsertRole(ReaperRoleID, project, ReaperRoleTitle, ReaperPermissions) +
		fmt.Sprintf(" && gcloud projects add-iam-policy-binding %[1]s --member=%[2]s --role=projects/%[1]s/roles/%[3]s --condition='expression=%[4]s,title=caa-gcp-t4-reaper-podvms-only'",
			project, member, ReaperRoleID, PodVMCondition)
}

// reaperResult tells the reaper's grant beside CAA's: preflight runs as
// CAA's identity (or the admin) and cannot test the reaper's.
func reaperResult(project string) Result {
	return warn("reaper permissions", ReaperRoleFix(project, ""),
		"the podVM reaper runs as its own principal (never CAA's key or account) and needs only %s on podvm-* instances; grant them with the custom role %s; with --wif-credential-config the member is principal://iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/subject/system:serviceaccount:confidential-containers-system:caa-gcp-t4-reaper (docs/reaper.md)",
		strings.Join(ReaperPermissions, ", "), ReaperRoleID)
}
