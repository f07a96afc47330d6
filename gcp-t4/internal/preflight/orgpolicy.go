package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	crmv1 "google.golang.org/api/cloudresourcemanager/v1"
)

// Organisation policy constraints that stop podVM creates, as the
// project's effective policy says (Resource Manager v1
// projects.getEffectiveOrgPolicy). Constraint meanings:
// https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints
const (
	trustedImages   = "constraints/compute.trustedImageProjects"
	requireShielded = "constraints/compute.requireShieldedVm"
	locations       = "constraints/gcp.resourceLocations"
)

func (g *GCE) orgPolicy(ctx context.Context, constraint string) (*crmv1.OrgPolicy, error) {
	return g.crmV1.Projects.GetEffectiveOrgPolicy("projects/"+g.Cfg.ProjectID, &crmv1.GetEffectiveOrgPolicyRequest{Constraint: constraint}).Context(ctx).Do()
}

func (g *GCE) checkOrgPolicies(ctx context.Context) []Result {
	var rs []Result
	p := g.Cfg.ProjectID
	read := func(check, constraint string) (*crmv1.OrgPolicy, bool) {
		pol, err := g.orgPolicy(ctx, constraint)
		if err != nil {
			rs = append(rs, warn(check, fmt.Sprintf("gcloud resource-manager org-policies describe %s --project=%s --effective   # needs orgpolicy.policy.get", constraint, p),
				"cannot read the effective policy of %s: %v", constraint, err))
			return nil, false
		}
		return pol, true
	}

	if pol, ok := read("org policy trusted image projects", trustedImages); ok {
		check := "org policy trusted image projects"
		var projects []string
		if g.Cfg.InstanceTemplate == "" {
			if proj, _, _, err := g.Cfg.ImageRef(); err == nil {
				projects = append(projects, proj)
			}
		} else if g.template != nil {
			for _, d := range g.template.GetDisks() {
				if img := d.GetInitializeParams().GetSourceImage(); img != "" {
					proj, _ := splitRef(img, p)
					projects = append(projects, proj)
				}
			}
		}
		for _, proj := range projects {
			allowed, why := listAllows(pol.ListPolicy, "projects/"+proj, nil)
			switch allowed {
			case no:
				rs = append(rs, fail(check, fmt.Sprintf("gcloud resource-manager org-policies allow %s projects/%s --project=%s   # or build the podVM image in a trusted project", trustedImages, proj, p),
					"image project %s is not trusted here (%s): GCE refuses to create a disk from its images", proj, why))
			case unknown:
				rs = append(rs, warn(check, "", "cannot evaluate %s for image project %s (%s)", trustedImages, proj, why))
			default:
				rs = append(rs, pass(check, "image project %s is trusted (%s)", proj, why))
			}
		}
	}

	if pol, ok := read("org policy shielded vm", requireShielded); ok {
		check := "org policy shielded vm"
		if pol.BooleanPolicy != nil && pol.BooleanPolicy.Enforced {
			rs = append(rs, fail(check, fmt.Sprintf("gcloud resource-manager org-policies disable-enforce %s --project=%s   # an exception for the podVM project only", requireShielded, p),
				"%s is enforced: GCE accepts only VMs with Secure Boot, vTPM and integrity monitoring on, and the provider creates podVMs without Secure Boot (the podVM image's NVIDIA driver module is not signed for it)", requireShielded))
		} else {
			rs = append(rs, pass(check, "%s is not enforced", requireShielded))
		}
	}

	if pol, ok := read("org policy resource locations", locations); ok {
		check := "org policy resource locations"
		var bad, unsure []string
		for _, zone := range g.Cfg.Zones() {
			allowed, why := listAllows(pol.ListPolicy, zone, locationGroups(zone))
			switch allowed {
			case no:
				bad = append(bad, zone+" ("+why+")")
			case unknown:
				unsure = append(unsure, zone+" ("+why+")")
			}
		}
		switch {
		case len(bad) > 0:
			rs = append(rs, fail(check, fmt.Sprintf("gcloud resource-manager org-policies describe %s --project=%s --effective   # then set GCP_ZONE/GCP_ZONES to allowed zones", locations, p),
				"podVMs may not be created in %s", strings.Join(bad, ", ")))
		case len(unsure) > 0:
			rs = append(rs, warn(check, "", "cannot evaluate %s for %s", locations, strings.Join(unsure, ", ")))
		default:
			rs = append(rs, pass(check, "every zone is allowed (%s)", strings.Join(g.Cfg.Zones(), ",")))
		}
	}
	return rs
}

type tri int

const (
	yes tri = iota
	no
	unknown
)

// listAllows evaluates a list policy for value v (and the value groups,
// "in:…", that hold it): denied values win, then allValues, then allowed
// values; no policy allows everything.
func listAllows(lp *crmv1.ListPolicy, v string, groups []string) (tri, string) {
	if lp == nil {
		return yes, "no policy"
	}
	match := func(vals []string) (string, bool) {
		for _, x := range vals {
			x = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(x, "is:"), "zones:"), "regions:")
			if x == v || slices.Contains(groups, x) {
				return x, true
			}
		}
		return "", false
	}
	if x, ok := match(lp.DeniedValues); ok {
		return no, "denied by " + x
	}
	switch lp.AllValues {
	case "DENY":
		return no, "all values denied"
	case "ALLOW":
		return yes, "all values allowed"
	}
	if len(lp.AllowedValues) == 0 {
		return yes, "no allowed list"
	}
	if x, ok := match(lp.AllowedValues); ok {
		return yes, "allowed by " + x
	}
	for _, x := range lp.AllowedValues {
		if strings.HasPrefix(x, "under:") || (strings.HasPrefix(x, "in:") && !knownGroup(x)) {
			return unknown, "the policy allows " + x + ", which preflight cannot expand"
		}
	}
	return no, "not among " + strings.Join(lp.AllowedValues, ", ")
}

// locationGroups are the value groups of gcp.resourceLocations that
// contain a zone: its region's, and its multi-region's
// (https://cloud.google.com/resource-manager/docs/organization-policy/defining-locations).
func locationGroups(zone string) []string {
	region := zone[:strings.LastIndex(zone, "-")]
	groups := []string{region, "in:" + region + "-locations"}
	for prefix, group := range map[string]string{"us-": "in:us-locations", "europe-": "in:eu-locations", "asia-": "in:asia-locations", "northamerica-": "in:northamerica-locations"} {
		if strings.HasPrefix(zone, prefix) {
			groups = append(groups, group)
		}
	}
	return groups
}

func knownGroup(g string) bool {
	if strings.HasSuffix(g, "-locations") {
		base := strings.TrimSuffix(strings.TrimPrefix(g, "in:"), "-locations")
		return strings.Count(base, "-") == 1 || base == "us" || base == "eu" || base == "asia" || base == "northamerica"
	}
	return false
}
