package preflight

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"google.golang.org/api/cloudresourcemanager/v3"
	"google.golang.org/api/iam/v1"
)

// The custom role preflight proposes for the identity CAA runs as, and
// the condition its binding carries.
const (
	RoleID    = "caaGcpT4"
	RoleTitle = "caa-gcp-t4 provider"
	// PodVMCondition limits the role's instance permissions to instances
	// named as the provider names podVMs (util.GenerateInstanceName:
	// "podvm-<pod>-<sandbox>"): without it, compute.instances.setMetadata
	// on the project is root on every GKE node VM, and
	// compute.instances.getSerialPortOutput would read every VM's console.
	// Other resource types (disks, images, subnetworks, the project for
	// lists) pass. Compute Engine evaluates resource.type and
	// resource.name in IAM Conditions
	// (https://cloud.google.com/compute/docs/access/granting-access-to-resources#conditions).
	PodVMCondition = `resource.type != "compute.googleapis.com/Instance" || resource.name.extract("/instances/{name}").startsWith("podvm-")`
	actAs          = "iam.serviceAccounts.actAs"
)

// methodPermissions are the IAM permission each Compute Engine method the
// provider calls needs, keyed as gcefake names the calls it records; from
// Google's Compute Engine IAM reference
// (https://cloud.google.com/compute/docs/access/iam-permissions) and each
// method's reference page ("Authorization requires the following IAM
// permission"). instances.insert needs more, depending on its body:
// insertPermissions.
var methodPermissions = map[string]string{
	"instances.insert":                "compute.instances.create",
	"instances.get":                   "compute.instances.get",
	"instances.delete":                "compute.instances.delete",
	"instances.list":                  "compute.instances.list",
	"instances.aggregatedList":        "compute.instances.list",
	"zoneOperations.get":              "compute.zoneOperations.get",
	"zoneOperations.wait":             "compute.zoneOperations.get",
	"zoneOperations.list":             "compute.zoneOperations.list",
	"acceleratorTypes.get":            "compute.acceleratorTypes.get",
	"acceleratorTypes.list":           "compute.acceleratorTypes.list",
	"acceleratorTypes.aggregatedList": "compute.acceleratorTypes.list",
	"images.get":                      "compute.images.get",
	"images.getFromFamily":            "compute.images.getFromFamily",
	"instanceTemplates.get":           "compute.instanceTemplates.get",
	"regionInstanceTemplates.get":     "compute.instanceTemplates.get",
	// The podVM's serial console, read while it starts (gpu-init's
	// readiness line, failure lines) and before a podVM that failed is
	// deleted (its last lines); instances.getSerialPortOutput reference
	// (https://cloud.google.com/compute/docs/reference/rest/v1/instances/getSerialPortOutput,
	// "IAM Permissions").
	"instances.getSerialPortOutput": "compute.instances.getSerialPortOutput",
}

// insertPermissions are what an instances.insert body needs beyond
// compute.instances.create (instances.insert reference: "compute.disks.create
// on the project", "compute.images.useReadOnly on the image",
// "compute.subnetworks.use" / "compute.networks.use" for the interface,
// "compute.instances.setMetadata", "setLabels", "setTags",
// "setServiceAccount" when the body sets them,
// "compute.instanceTemplates.useReadOnly" for sourceInstanceTemplate).
// iam.serviceAccounts.actAs, also needed with a service account, is
// granted on that account, not in the role.
func insertPermissions(inst *computepb.Instance, template bool) []string {
	var p []string
	if template {
		p = append(p, "compute.instanceTemplates.useReadOnly")
	}
	for _, d := range inst.GetDisks() {
		if d.GetInitializeParams() != nil {
			p = append(p, "compute.disks.create")
			if d.GetInitializeParams().GetSourceImage() != "" {
				p = append(p, "compute.images.useReadOnly")
			}
		}
	}
	for _, n := range inst.GetNetworkInterfaces() {
		if n.GetSubnetwork() != "" {
			p = append(p, "compute.subnetworks.use")
		} else if n.GetNetwork() != "" {
			p = append(p, "compute.networks.use", "compute.subnetworks.use")
		}
	}
	if len(inst.GetMetadata().GetItems()) > 0 {
		p = append(p, "compute.instances.setMetadata")
	}
	if len(inst.GetLabels()) > 0 {
		p = append(p, "compute.instances.setLabels")
	}
	if len(inst.GetTags().GetItems()) > 0 {
		p = append(p, "compute.instances.setTags")
	}
	if len(inst.GetServiceAccounts()) > 0 {
		p = append(p, "compute.instances.setServiceAccount")
	}
	return p
}

// ProviderPermissions is the custom role for cfg (and, with
// GCP_INSTANCE_TEMPLATE, the template's properties): exactly what the
// provider's calls need to create, verify, delete and list its own
// podVMs and read their serial consoles, derived from the code paths the configuration takes. A test runs
// the provider on gcefake for each configuration and checks this list
// against the calls it records.
func ProviderPermissions(cfg gcpt4.Config, tmpl *computepb.InstanceProperties) []string {
	set := map[string]bool{}
	add := func(ps ...string) {
		for _, p := range ps {
			set[p] = true
		}
	}
	// Every configuration: insert, wait, read back, delete, list ours,
	// and ConfigVerifier's accelerator check; every insert body carries
	// metadata (the cloud-config) and labels (ours), and tags unless
	// GCP_NETWORK_TAGS is empty.
	add("compute.instances.create", "compute.instances.get", "compute.instances.delete", "compute.instances.list",
		"compute.zoneOperations.get", "compute.acceleratorTypes.get", "compute.instances.setMetadata", "compute.instances.setLabels")
	// Every configuration reads its podVMs' serial consoles: the readiness
	// and failure lines become Events on the pod while a podVM starts, and
	// a failed podVM's last lines are kept before it is deleted. Like every
	// instance permission of the role, PodVMCondition limits it to podvm-*
	// instances, so CAA reads no other VM's console (a node's console may
	// carry what its boot printed).
	add("compute.instances.getSerialPortOutput")
	// When CAA deletes a podVM GCE no longer runs (kata's shim lost its
	// agent), the provider reads GCE's operations on it to tell the pod
	// what ended it (preempted, host maintenance, someone's stop or
	// delete): the reaper's permission too. It lists operations, not VMs;
	// IAM conditions cannot narrow it to podvm-* (an operation is not an
	// Instance resource).
	add("compute.zoneOperations.list")
	if len(cfg.NetworkTags) > 0 {
		add("compute.instances.setTags")
	}
	if len(cfg.FallbackZones) == 1 && cfg.FallbackZones[0] == setting.ZonesAuto {
		add("compute.acceleratorTypes.list")
	}
	if cfg.InstanceTemplate != "" {
		// The insert names the template; what its properties set (boot
		// disk from an image, NICs, a service account) needs what the
		// same body fields would.
		add("compute.instanceTemplates.get", "compute.instanceTemplates.useReadOnly")
		if tmpl != nil {
			add(insertPermissions(templateInstance(tmpl), false)...)
		}
	} else {
		add("compute.disks.create", "compute.images.useReadOnly")
		if _, _, family, err := cfg.ImageRef(); err == nil && family != "" {
			add("compute.images.getFromFamily")
		} else {
			add("compute.images.get")
		}
		// GCP_CACHE_IMAGE is looked up as the podVM image is, and every
		// podVM's cache disk is made from it (disks.create,
		// images.useReadOnly, both held already).
		if _, name, family, err := cfg.CacheImageRef(); err == nil && family != "" {
			add("compute.images.getFromFamily")
		} else if err == nil && name != "" {
			add("compute.images.get")
		}
		if cfg.Subnetwork != "" {
			add("compute.subnetworks.use")
		} else {
			add("compute.networks.use", "compute.subnetworks.use")
		}
		if cfg.ServiceAccount != "" {
			add("compute.instances.setServiceAccount")
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// templateInstance is the part of a template's properties an insert
// inherits, as an instance body.
func templateInstance(p *computepb.InstanceProperties) *computepb.Instance {
	return &computepb.Instance{
		Disks: p.GetDisks(), NetworkInterfaces: p.GetNetworkInterfaces(), ServiceAccounts: p.GetServiceAccounts(),
		Metadata: p.GetMetadata(), Labels: p.GetLabels(), Tags: p.GetTags(),
	}
}

// podVMServiceAccount is the account podVMs run as: GCP_SERVICE_ACCOUNT,
// or the template's.
func podVMServiceAccount(cfg gcpt4.Config, tmpl *computepb.InstanceProperties) string {
	if cfg.InstanceTemplate == "" {
		return cfg.ServiceAccount
	}
	for _, sa := range tmpl.GetServiceAccounts() {
		if sa.GetEmail() != "" && sa.GetEmail() != "default" {
			return sa.GetEmail()
		}
	}
	return ""
}

// roleFix is the least-privilege grant: the custom role, bound with the
// podVM condition, and actAs on the podVM service account only.
func roleFix(project, member string, perms []string, serviceAccount string) string {
	if member == "" {
		member = "serviceAccount:CAA_SERVICE_ACCOUNT_EMAIL"
	}
	fix := upsertRole(RoleID, project, RoleTitle, perms) +
		fmt.Sprintf(" && gcloud projects add-iam-policy-binding %[1]s --member=%[2]s --role=projects/%[1]s/roles/%[3]s --condition='expression=%[4]s,title=caa-gcp-t4-podvms-only'",
			project, member, RoleID, PodVMCondition)
	if serviceAccount != "" {
		fix += " && " + actAsFix(project, member, serviceAccount)
	}
	return fix
}

// upsertRole creates a custom role, or, when it exists (a rerun, or an
// older grant with fewer permissions), sets its permissions to exactly
// these, so the printed grant is safe to run twice; binding a member to a
// role it already holds changes nothing either.
func upsertRole(id, project, title string, perms []string) string {
	return fmt.Sprintf("{ gcloud iam roles describe %[1]s --project=%[2]s >/dev/null 2>&1 && gcloud iam roles update %[1]s --project=%[2]s --permissions=%[4]s --quiet || gcloud iam roles create %[1]s --project=%[2]s --title=%[3]q --stage=GA --permissions=%[4]s ; }",
		id, project, title, strings.Join(perms, ","))
}

func actAsFix(project, member, serviceAccount string) string {
	return fmt.Sprintf("gcloud iam service-accounts add-iam-policy-binding %s --project=%s --member=%s --role=roles/iam.serviceAccountUser", serviceAccount, project, member)
}

func (g *GCE) checkPermissions(ctx context.Context) []Result {
	want := ProviderPermissions(g.Cfg, g.template)
	// testIamPermissions answers for the caller only (Resource Manager's
	// projects.testIamPermissions: "Returns permissions that a caller has
	// on the specified Project"; IAM's the same for a service account), so
	// it checks the account CAA runs as only when preflight runs with that
	// account's credentials. For anyone else the grant is printed instead.
	if g.Member == "" || g.Member != g.Caller {
		return []Result{g.grant(want)}
	}
	check := "permissions " + g.Member
	resp, err := g.crm.Projects.TestIamPermissions("projects/"+g.Cfg.ProjectID, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: want}).Context(ctx).Do()
	if err != nil {
		return []Result{fail(check, fmt.Sprintf("gcloud services enable cloudresourcemanager.googleapis.com --project=%s", g.Cfg.ProjectID), "testIamPermissions on project %s: %v", g.Cfg.ProjectID, err)}
	}
	var missing []string
	for _, p := range want {
		if !slices.Contains(resp.Permissions, p) {
			missing = append(missing, p)
		}
	}
	var rs []Result
	if len(missing) == 0 {
		rs = append(rs, pass(check, "%s (the credentials preflight runs with) holds the %d permissions the provider uses (and needs no other): %s", g.Member, len(want), strings.Join(want, ", ")))
	} else {
		rs = append(rs, fail(check, roleFix(g.Cfg.ProjectID, g.Member, want, ""),
			"missing %s; grant the custom role %s (exactly the provider's %d permissions, instance permissions limited to podvm-* instances) rather than roles/compute.instanceAdmin.v1, which also reaches the cluster's node VMs",
			strings.Join(missing, ", "), RoleID, len(want)))
		// The same first install that lacks CAA's role lacks the reaper's.
		rs = append(rs, reaperResult(g.Cfg.ProjectID))
	}
	if sa := podVMServiceAccount(g.Cfg, g.template); sa != "" {
		rs = append(rs, g.checkActAs(ctx, sa))
	}
	return rs
}

// checkActAs asks IAM about the podVM service account itself: actAs is
// granted there, never on the project (which would let CAA act as every
// service account in it).
func (g *GCE) checkActAs(ctx context.Context, sa string) Result {
	check := "actAs " + sa
	resp, err := g.iam.Projects.ServiceAccounts.TestIamPermissions("projects/-/serviceAccounts/"+sa, &iam.TestIamPermissionsRequest{Permissions: []string{actAs}}).Context(ctx).Do()
	switch {
	case apiCode(err) == 404:
		return fail(check, fmt.Sprintf("gcloud iam service-accounts create %s --project=%s   # a podVM identity with no roles unless the workload needs some", strings.Split(sa, "@")[0], g.Cfg.ProjectID), "podVM service account %s does not exist", sa)
	case err != nil:
		return fail(check, "gcloud services enable iam.googleapis.com --project="+g.Cfg.ProjectID, "testIamPermissions on %s: %v", sa, err)
	case !slices.Contains(resp.Permissions, actAs):
		return fail(check, actAsFix(g.Cfg.ProjectID, orPlaceholder(g.Member), sa), "the caller may not attach %s to podVMs (iam.serviceAccounts.actAs on that account)", sa)
	}
	return pass(check, "the caller may attach %s to podVMs", sa)
}

// grant is the permissions result when preflight cannot test the account
// CAA runs as: the least-privilege grant for it, as a warning, since
// nothing has checked that it holds it.
func (g *GCE) grant(want []string) Result {
	sa := podVMServiceAccount(g.Cfg, g.template)
	fix := roleFix(g.Cfg.ProjectID, g.Member, want, sa)
	if g.Member == "" {
		return warn("permissions", fix,
			"the account CAA runs as is unknown: pass -member serviceAccount:EMAIL (or -credentials-file with its key) and preflight prints its grant: the custom role %s, exactly the provider's %d permissions, instance permissions limited to podvm-* instances (not roles/compute.instanceAdmin.v1, which also reaches the cluster's node VMs)", RoleID, len(want))
	}
	caller := "your Application Default Credentials"
	if g.Caller != "" {
		caller = g.Caller
	}
	email := strings.TrimPrefix(g.Member, "serviceAccount:")
	return warn("permissions "+g.Member, fix,
		"not checked: testIamPermissions answers only for the caller, and preflight runs as %s. Grant %s the custom role %s with the fix (exactly the provider's %d permissions: %s; instance permissions limited to podvm-* instances, so not the cluster's node VMs%s), then check it by running preflight with that account's key (-credentials-file), or per permission with gcloud policy-intelligence troubleshoot-policy iam //cloudresourcemanager.googleapis.com/projects/%s --principal-email=%s --permission=compute.instances.create",
		caller, g.Member, RoleID, len(want), strings.Join(want, ", "), actAsNote(sa), g.Cfg.ProjectID, email)
}

func actAsNote(sa string) string {
	if sa == "" {
		return ""
	}
	return "; iam.serviceAccounts.actAs on " + sa + " only"
}

func orPlaceholder(member string) string {
	if member == "" {
		return "serviceAccount:CAA_SERVICE_ACCOUNT_EMAIL"
	}
	return member
}
