package preflight

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/cloudresourcemanager/v3"
)

// vpc is where the podVMs' interface goes: the network (in its own
// project: the host project with Shared VPC), the subnetwork when
// configured as a path, and what the podVMs carry for firewall rules.
type vpc struct {
	project, network string
	// subnet is a configured subnetwork (project, region, name); empty
	// means the network's subnet in each zone's region.
	subnet subnetRef
	tags   []string
	sa     string
}

// subnetRef is a subnetwork's project, region and name.
type subnetRef struct{ project, region, name string }

// splitRef reads projects/P/... (also inside a full URL); P is def when
// the reference names no project.
func splitRef(ref, def string) (project string, segs []string) {
	if i := strings.Index(ref, "/compute/v1/"); i >= 0 {
		ref = ref[i+len("/compute/v1/"):]
	}
	segs = strings.Split(strings.Trim(ref, "/"), "/")
	if len(segs) >= 2 && segs[0] == "projects" {
		return segs[1], segs[2:]
	}
	return def, segs
}

func parseSubnet(ref, def, region string) subnetRef {
	p, segs := splitRef(ref, def)
	if len(segs) == 4 && segs[0] == "regions" {
		return subnetRef{p, segs[1], segs[3]}
	}
	return subnetRef{p, region, segs[len(segs)-1]}
}

// podVMVPC is the VPC of the configuration, or of the template.
func (g *GCE) podVMVPC() vpc {
	v := vpc{tags: append([]string(nil), g.Cfg.NetworkTags...), sa: g.Cfg.ServiceAccount}
	network, subnet := g.Cfg.NetworkURL(), g.Cfg.Subnetwork
	if g.template != nil {
		nic := g.template.GetNetworkInterfaces()[0]
		network, subnet = nic.GetNetwork(), nic.GetSubnetwork()
		v.tags = append(append([]string(nil), g.template.GetTags().GetItems()...), v.tags...)
		v.sa = podVMServiceAccount(g.Cfg, g.template)
	}
	p, segs := splitRef(network, g.Cfg.ProjectID)
	v.project, v.network = p, segs[len(segs)-1]
	if subnet != "" {
		v.subnet = parseSubnet(subnet, v.project, "")
		if !strings.Contains(subnet, "/") {
			v.subnet.project = g.Cfg.ProjectID
		}
	}
	return v
}

// subnetFor finds the subnet podVMs of a region land in: the configured
// one (a bare name is looked up in each region), or the network's own.
func (v vpc) subnetFor(net *computepb.Network, region string) (subnetRef, bool) {
	if v.subnet.name != "" {
		ref := v.subnet
		if ref.region == "" {
			ref.region = region
		}
		return ref, true
	}
	for _, s := range net.GetSubnetworks() {
		if strings.Contains(s, "/regions/"+region+"/subnetworks/") {
			p, _ := splitRef(s, v.project)
			return subnetRef{p, region, lastSegment(s)}, true
		}
	}
	return subnetRef{}, false
}

// checkSharedVPC: a service project's podVMs must use the host project's
// network, and the caller needs compute.subnetworks.use there.
func (g *GCE) checkSharedVPC(ctx context.Context, v vpc) ([]Result, bool) {
	const check = "shared vpc"
	p := g.Cfg.ProjectID
	host, err := g.projects.GetXpnHost(ctx, &computepb.GetXpnHostProjectRequest{Project: p})
	if err != nil {
		return []Result{warn(check, "", "cannot tell whether %s is a Shared VPC service project (projects.getXpnHost: %v)", p, err)}, true
	}
	h := host.GetName()
	switch {
	case h == "" && v.project == p:
		return nil, true
	case h != "" && v.project == p:
		return []Result{fail(check, fmt.Sprintf("set GCP_NETWORK=projects/%[1]s/global/networks/NETWORK and GCP_SUBNETWORK=projects/%[1]s/regions/REGION/subnetworks/SUBNET   # gcloud compute networks subnets list-usable --project=%[2]s", h, p),
			"%s is a Shared VPC service project of %s, but GCP_NETWORK names a network of %s itself: podVMs must use the host project's network", p, h, p)}, false
	case h != v.project:
		what := "attached to no host"
		if h != "" {
			what = "attached to host " + h
		}
		return []Result{fail(check, fmt.Sprintf("gcloud compute shared-vpc associated-projects add %s --host-project=%s", p, v.project),
			"GCP_NETWORK is in project %s, but %s is %s", v.project, p, what)}, false
	}
	rs := []Result{pass(check, "%s is a service project of host %s; network checks run in %s", p, h, h)}
	resp, err := g.crm.Projects.TestIamPermissions("projects/"+h, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: []string{"compute.subnetworks.use"}}).Context(ctx).Do()
	switch {
	case err != nil:
		rs = append(rs, warn("shared vpc permissions", "", "testIamPermissions on host project %s: %v", h, err))
	case !slices.Contains(resp.Permissions, "compute.subnetworks.use"):
		rs = append(rs, fail("shared vpc permissions", fmt.Sprintf("gcloud compute networks subnets add-iam-policy-binding SUBNET --project=%s --region=REGION --member=%s --role=roles/compute.networkUser   # on the podVM subnet only", h, orPlaceholder(g.Member)),
			"the caller may not use subnets of host project %s (compute.subnetworks.use)", h))
	default:
		rs = append(rs, pass("shared vpc permissions", "the caller may use subnets of %s", h))
	}
	return rs, true
}

func (g *GCE) checkNetworking(ctx context.Context) []Result {
	v := g.podVMVPC()
	rs, ok := g.checkSharedVPC(ctx, v)
	if !ok {
		return rs
	}
	net, err := g.networks.Get(ctx, &computepb.GetNetworkRequest{Project: v.project, Network: v.network})
	if err != nil {
		fix := ""
		if apiCode(err) == 404 {
			fix = fmt.Sprintf("gcloud compute networks create %s --project=%s --subnet-mode=custom", v.network, v.project)
		}
		return append(rs, fail("network "+v.network, fix, "reading network %s in project %s: %v", v.network, v.project, err))
	}
	from := ""
	if g.template != nil {
		from = " (from the instance template)"
	}
	rs = append(rs, pass("network "+v.network, "exists in project %s%s", v.project, from))
	rs = append(rs, checkMTU(v.project, net))
	fws, err := g.listFirewalls(ctx, v.project)
	if err != nil {
		rs = append(rs, fail("firewall", "", "listing firewall rules of %s: %v", v.project, err))
	}
	subnets := map[string]*computepb.Subnetwork{} // self link -> subnet
	var nodes endpoint
	nodesFrom := ""
	for _, region := range g.regionNames() {
		ref, ok := v.subnetFor(net, region)
		if !ok {
			rs = append(rs, fail("subnetwork in "+region, fmt.Sprintf("gcloud compute networks subnets create podvms --project=%s --network=%s --region=%s --range=10.10.0.0/20 --enable-private-ip-google-access   # then GCP_SUBNETWORK=podvms", v.project, v.network, region),
				"network %s has no subnet in %s and GCP_SUBNETWORK is not set", v.network, region))
			continue
		}
		sub, err := g.subnetworks.Get(ctx, &computepb.GetSubnetworkRequest{Project: ref.project, Region: ref.region, Subnetwork: ref.name})
		if err != nil {
			fix := ""
			if apiCode(err) == 404 {
				fix = fmt.Sprintf("gcloud compute networks subnets create %s --project=%s --network=%s --region=%s --range=10.10.0.0/20 --enable-private-ip-google-access", ref.name, ref.project, v.network, ref.region)
			}
			rs = append(rs, fail("subnetwork "+ref.name+" in "+region, fix, "reading the subnet: %v", err))
			continue
		}
		if lastSegment(sub.GetNetwork()) != v.network {
			rs = append(rs, fail("subnetwork "+ref.name+" in "+region, "set GCP_SUBNETWORK to a subnet of "+v.network, "belongs to network %s, not %s", lastSegment(sub.GetNetwork()), v.network))
			continue
		}
		subnets[sub.GetSelfLink()] = sub
		rs = append(rs, pass("subnetwork "+ref.name+" in "+region, "exists, %s", sub.GetIpCidrRange()))
		nat := g.checkNAT(ctx, v.project, net, sub, region)
		rs = append(rs, g.checkPGA(sub, ref.project, region, nat.Status == Pass), nat)
		if fws == nil {
			continue
		}
		podRange, err := netip.ParsePrefix(sub.GetIpCidrRange())
		if err != nil {
			rs = append(rs, fail("firewall", "", "subnet %s has no usable range %q", sub.GetName(), sub.GetIpCidrRange()))
			continue
		}
		if nodesFrom == "" {
			var r []Result
			nodes, nodesFrom, r = g.nodeEndpoint(ctx, net, subnets, podRange)
			rs = append(rs, r...)
		}
		rs = append(rs, g.checkFirewalls(fws, firewallInput{
			project: v.project, network: v.network, podVMSubnet: sub.GetName(), nodesFrom: nodesFrom, nodes: nodes,
			nodesAssumed: len(g.NodeCIDRs) == 0 && len(g.NodeIPs) == 0,
			podVMs:       endpoint{ranges: []netip.Prefix{podRange}, tags: v.tags, sa: v.sa, known: true},
		})...)
	}
	return rs
}

// nodeEndpoint is the worker nodes as a firewall source or target: the
// subnets holding their addresses (the node pool's range, which survives
// GKE recreating nodes, unlike their /32s), the -node-cidrs given, or the
// podVM subnet when nothing is known; and their network tags.
func (g *GCE) nodeEndpoint(ctx context.Context, net *computepb.Network, known map[string]*computepb.Subnetwork, podRange netip.Prefix) (endpoint, string, []Result) {
	ep := endpoint{tags: g.NodeTags, known: len(g.NodeTags) > 0}
	tagNote := ""
	if ep.known {
		tagNote = ", tags " + strings.Join(g.NodeTags, ",")
	}
	switch {
	case len(g.NodeCIDRs) > 0:
		ep.ranges = g.NodeCIDRs
		return ep, "-node-cidrs " + prefixStrings(g.NodeCIDRs) + tagNote, nil
	case len(g.NodeIPs) == 0:
		ep.ranges = []netip.Prefix{podRange}
		return ep, "assumed in the podVM subnet; pass -kubeconfig or -node-cidrs to check their real addresses" + tagNote, nil
	}
	var ranges []netip.Prefix
	var names, outside []string
	holds := func(sub *computepb.Subnetwork, ip netip.Addr) bool {
		p, err := netip.ParsePrefix(sub.GetIpCidrRange())
		return err == nil && p.Contains(ip)
	}
	for _, ip := range g.NodeIPs {
		found := false
		for _, sub := range known {
			if holds(sub, ip) {
				found = true
				p, _ := netip.ParsePrefix(sub.GetIpCidrRange())
				if !slices.Contains(names, sub.GetName()+" "+p.String()) {
					ranges, names = append(ranges, p), append(names, sub.GetName()+" "+p.String())
				}
				break
			}
		}
		if found {
			continue
		}
		// Look through the network's other subnets.
		for _, link := range net.GetSubnetworks() {
			if known[link] != nil {
				continue
			}
			proj, segs := splitRef(link, "")
			if len(segs) != 4 {
				continue
			}
			sub, err := g.subnetworks.Get(ctx, &computepb.GetSubnetworkRequest{Project: proj, Region: segs[1], Subnetwork: segs[3]})
			if err != nil {
				continue
			}
			known[sub.GetSelfLink()] = sub
			if holds(sub, ip) {
				found = true
				p, _ := netip.ParsePrefix(sub.GetIpCidrRange())
				ranges, names = append(ranges, p), append(names, sub.GetName()+" "+p.String())
				break
			}
		}
		if !found {
			outside = append(outside, ip.String())
		}
	}
	var rs []Result
	if len(outside) > 0 {
		rs = append(rs, fail("nodes in network "+net.GetName(), "run CAA on nodes of the podVMs' VPC (or peer the VPCs and pass -node-cidrs)",
			"node addresses %s are in no subnet of %s: CAA on those nodes cannot reach podVMs directly", strings.Join(outside, ", "), net.GetName()))
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].String() < ranges[j].String() })
	ep.ranges = ranges
	return ep, "node subnet " + strings.Join(names, ", ") + tagNote, rs
}

func (g *GCE) checkPGA(sub *computepb.Subnetwork, project, region string, natOK bool) Result {
	check := fmt.Sprintf("private google access on %s", sub.GetName())
	fix := fmt.Sprintf("gcloud compute networks subnets update %s --project=%s --region=%s --enable-private-ip-google-access", sub.GetName(), project, region)
	switch {
	case sub.GetPrivateIpGoogleAccess():
		return pass(check, "on: podVMs reach Google APIs and registries (gcr.io, *.pkg.dev) without an external IP")
	case natOK:
		return warn(check, fix, "off: podVMs reach Google APIs through Cloud NAT instead; turning it on keeps that traffic inside Google's network")
	}
	return fail(check, fix, "off, and no Cloud NAT either: private podVMs cannot pull images or reach Google APIs")
}
