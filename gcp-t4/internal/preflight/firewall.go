package preflight

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/cloudresourcemanager/v3"
)

// flow is traffic a firewall rule must let in.
type flow struct {
	protocol string
	port     int
	// toPodVM: the target is a podVM (no network tags; the configured
	// service account, if any). Otherwise the target is a worker node,
	// whose tags preflight cannot see.
	toPodVM bool
}

// verdict is what the first matching rule decides for one source.
type verdict struct {
	allowed bool
	rule    string
	// tagged: the deciding allow rule only targets tagged instances.
	tagged bool
}

var protocolNumbers = map[string]string{"tcp": "6", "udp": "17"}

func protoMatches(ruleProto string, ports []string, f flow) bool {
	if ruleProto != f.protocol && ruleProto != "all" && ruleProto != protocolNumbers[f.protocol] {
		return false
	}
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		lo, hi, ok := portRange(p)
		if ok && f.port >= lo && f.port <= hi {
			return true
		}
	}
	return false
}

func portRange(p string) (int, int, bool) {
	a, b, isRange := strings.Cut(p, "-")
	lo, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	hi := lo
	if isRange {
		if hi, err = strconv.Atoi(b); err != nil {
			return 0, 0, false
		}
	}
	return lo, hi, true
}

// covers reports whether a rule's source ranges include all of src.
func covers(ranges []string, src netip.Prefix) bool {
	for _, r := range ranges {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			a, aerr := netip.ParseAddr(r)
			if aerr != nil {
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Bits() <= src.Bits() && p.Contains(src.Addr()) {
			return true
		}
	}
	return false
}

// decide evaluates the rules as GCE does for ingress: the matching rule
// with the lowest priority number wins, a deny beating an allow of equal
// priority; no match is the implied deny.
func decide(fws []*computepb.Firewall, network string, f flow, src netip.Prefix, serviceAccount string) verdict {
	type cand struct {
		fw     *computepb.Firewall
		deny   bool
		tagged bool
	}
	var cands []cand
	for _, fw := range fws {
		if fw.GetDisabled() || fw.GetDirection() != "INGRESS" || lastSegment(fw.GetNetwork()) != network || !covers(fw.GetSourceRanges(), src) {
			continue
		}
		tagged := false
		if f.toPodVM {
			if len(fw.GetTargetTags()) > 0 {
				continue
			}
			if sas := fw.GetTargetServiceAccounts(); len(sas) > 0 && !slices.Contains(sas, serviceAccount) {
				continue
			}
		} else {
			tagged = len(fw.GetTargetTags()) > 0 || len(fw.GetTargetServiceAccounts()) > 0
		}
		for _, a := range fw.GetAllowed() {
			if protoMatches(a.GetIPProtocol(), a.GetPorts(), f) {
				cands = append(cands, cand{fw: fw, tagged: tagged})
				break
			}
		}
		for _, d := range fw.GetDenied() {
			if protoMatches(d.GetIPProtocol(), d.GetPorts(), f) {
				cands = append(cands, cand{fw: fw, deny: true, tagged: tagged})
				break
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.fw.GetPriority() != b.fw.GetPriority() {
			return a.fw.GetPriority() < b.fw.GetPriority()
		}
		return a.deny && !b.deny
	})
	// A deny aimed at tagged nodes may not hit ours; an untargeted one
	// does. Take the first rule that surely applies, noting tagged allows.
	var taggedAllow string
	for _, c := range cands {
		if c.deny && c.tagged {
			continue
		}
		if c.deny {
			return verdict{rule: c.fw.GetName()}
		}
		if c.tagged {
			if taggedAllow == "" {
				taggedAllow = c.fw.GetName()
			}
			continue
		}
		return verdict{allowed: true, rule: c.fw.GetName()}
	}
	if taggedAllow != "" {
		return verdict{allowed: true, rule: taggedAllow, tagged: true}
	}
	return verdict{}
}

func prefixStrings(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (g *GCE) checkFirewalls(fws []*computepb.Firewall, net *computepb.Network, sub *computepb.Subnetwork) []Result {
	podRange, err := netip.ParsePrefix(sub.GetIpCidrRange())
	if err != nil {
		return []Result{fail("firewall", "", "subnet %s has no usable range %q", sub.GetName(), sub.GetIpCidrRange())}
	}
	nodes := g.NodeCIDRs
	assumed := ""
	if len(nodes) == 0 {
		nodes = []netip.Prefix{podRange}
		assumed = " (nodes assumed in the podVM subnet; pass -node-cidrs or -kubeconfig to check their real addresses)"
	}
	netName := net.GetName()
	var rs []Result
	for _, f := range []flow{{"tcp", AgentPort, true}, {"udp", VXLANPort, true}} {
		check := fmt.Sprintf("firewall %s:%d nodes→podVMs (%s)", f.protocol, f.port, sub.GetName())
		fix := fmt.Sprintf("gcloud compute firewall-rules create caa-nodes-to-podvms --project=%s --network=%s --direction=INGRESS --allow=tcp:%d,udp:%d --source-ranges=%s",
			g.Cfg.ProjectID, netName, AgentPort, VXLANPort, prefixStrings(nodes))
		var blocked, via []string
		for _, src := range nodes {
			v := decide(fws, netName, f, src, g.Cfg.ServiceAccount)
			if !v.allowed {
				why := "no rule"
				if v.rule != "" {
					why = "denied by " + v.rule
				}
				blocked = append(blocked, src.String()+": "+why)
			} else if !slices.Contains(via, v.rule) {
				via = append(via, v.rule)
			}
		}
		if len(blocked) > 0 {
			rs = append(rs, fail(check, fix, "blocked from %s%s", strings.Join(blocked, "; "), assumed))
		} else {
			rs = append(rs, pass(check, "allowed by %s%s", strings.Join(via, ","), assumed))
		}
	}
	f := flow{"udp", VXLANPort, false}
	check := fmt.Sprintf("firewall udp:%d podVMs→nodes (%s)", VXLANPort, sub.GetName())
	fix := fmt.Sprintf("gcloud compute firewall-rules create caa-podvms-to-nodes-vxlan --project=%s --network=%s --direction=INGRESS --allow=udp:%d --source-ranges=%s",
		g.Cfg.ProjectID, netName, VXLANPort, podRange)
	switch v := decide(fws, netName, f, podRange, ""); {
	case !v.allowed && v.rule != "":
		rs = append(rs, fail(check, fix, "denied by %s", v.rule))
	case !v.allowed:
		rs = append(rs, fail(check, fix, "no rule lets the podVM subnet %s reach the nodes on udp:%d", podRange, VXLANPort))
	case v.tagged:
		rs = append(rs, warn(check, fix, "allowed by %s only for its target tags or service accounts; make sure the worker nodes carry them", v.rule))
	default:
		rs = append(rs, pass(check, "allowed by %s", v.rule))
	}
	return rs
}

// requiredPermissions are what the provider's calls need on the project.
func (g *GCE) requiredPermissions() []string {
	perms := []string{
		"compute.instances.create", "compute.instances.delete", "compute.instances.get", "compute.instances.list",
		"compute.instances.setMetadata", "compute.instances.setLabels", "compute.disks.create",
		"compute.zoneOperations.get", "compute.acceleratorTypes.get", "compute.acceleratorTypes.list",
	}
	if g.Cfg.InstanceTemplate != "" {
		perms = append(perms, "compute.instanceTemplates.get", "compute.instanceTemplates.useReadOnly")
	} else {
		perms = append(perms, "compute.images.get", "compute.images.getFromFamily", "compute.images.useReadOnly")
		if g.Cfg.Subnetwork != "" {
			perms = append(perms, "compute.subnetworks.use")
		} else {
			perms = append(perms, "compute.networks.use", "compute.subnetworks.use")
		}
	}
	if g.Cfg.ServiceAccount != "" {
		perms = append(perms, "compute.instances.setServiceAccount", "iam.serviceAccounts.actAs")
	}
	return perms
}

func (g *GCE) checkPermissions(ctx context.Context) Result {
	const check = "permissions"
	want := g.requiredPermissions()
	resp, err := g.crm.Projects.TestIamPermissions("projects/"+g.Cfg.ProjectID, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: want}).Context(ctx).Do()
	if err != nil {
		return fail(check, fmt.Sprintf("gcloud services enable cloudresourcemanager.googleapis.com --project=%s", g.Cfg.ProjectID), "testIamPermissions on project %s: %v", g.Cfg.ProjectID, err)
	}
	var missing []string
	for _, p := range want {
		if !slices.Contains(resp.Permissions, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return pass(check, "the caller may create and delete podVMs (%d permissions)", len(want))
	}
	member := g.Member
	if member == "" {
		member = "serviceAccount:CAA_SERVICE_ACCOUNT_EMAIL"
	}
	fix := fmt.Sprintf("gcloud projects add-iam-policy-binding %[1]s --member=%[2]s --role=roles/compute.instanceAdmin.v1 && gcloud projects add-iam-policy-binding %[1]s --member=%[2]s --role=roles/iam.serviceAccountUser", g.Cfg.ProjectID, member)
	return fail(check, fix, "missing %s", strings.Join(missing, ", "))
}

func (g *GCE) checkImage(ctx context.Context) Result {
	check := "image"
	if g.Cfg.InstanceTemplate != "" {
		return warn(check, "", "GCP_INSTANCE_TEMPLATE is set: the image comes from the template; not checked")
	}
	project, name, family, err := g.Cfg.ImageRef()
	if err != nil {
		return fail(check, "", "%v", err)
	}
	var img *computepb.Image
	what := "image " + name
	if family != "" {
		what = "image family " + family
		img, err = g.images.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: project, Family: family})
	} else {
		img, err = g.images.Get(ctx, &computepb.GetImageRequest{Project: project, Image: name})
	}
	check = "image " + g.Cfg.ImageName
	if err != nil {
		fix := ""
		if apiCode(err) == 404 {
			fix = fmt.Sprintf("make podvm   # then: gcloud compute images create %s --project=%s --source-uri=gs://BUCKET/podvm.tar.gz --guest-os-features=UEFI_COMPATIBLE", orDefault(name, family), project)
		}
		return fail(check, fix, "reading %s in project %s: %v", what, project, err)
	}
	switch img.GetDeprecated().GetState() {
	case "DEPRECATED", "OBSOLETE", "DELETED":
		return fail(check, "set PODVM_IMAGE_NAME to a current image", "%s is %s", img.GetName(), img.GetDeprecated().GetState())
	}
	if img.GetStatus() != "READY" {
		return fail(check, fmt.Sprintf("gcloud compute images describe %s --project=%s --format='value(status)'", img.GetName(), project), "%s is %s, not READY", img.GetName(), img.GetStatus())
	}
	uefi := false
	for _, f := range img.GetGuestOsFeatures() {
		uefi = uefi || f.GetType() == "UEFI_COMPATIBLE"
	}
	if !uefi {
		return fail(check, fmt.Sprintf("gcloud compute images create %s-uefi --project=%s --source-image=%s --source-image-project=%s --guest-os-features=UEFI_COMPATIBLE   # then PODVM_IMAGE_NAME=%s-uefi", img.GetName(), project, img.GetName(), project, img.GetName()),
			"%s lacks the UEFI_COMPATIBLE guest OS feature: the podVM image boots with UEFI", img.GetName())
	}
	if size := img.GetDiskSizeGb(); size > int64(g.Cfg.RootVolumeSize) {
		return pass(check, "%s is READY and UEFI_COMPATIBLE; boot disks will be %d GB (its size, above ROOT_VOLUME_SIZE=%d)", img.GetName(), size, g.Cfg.RootVolumeSize)
	}
	return pass(check, "%s is READY and UEFI_COMPATIBLE", img.GetName())
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
