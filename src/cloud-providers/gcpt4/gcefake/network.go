// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// infra is the project's network plumbing around the podVMs and the
// caller's IAM grants: what `gcp-t4 preflight` inspects. GCE's defaults
// are the starting point: an auto-mode "default" network with its four
// pre-populated firewall rules, Private Google Access off, no Cloud Router
// and so no Cloud NAT.
type infra struct {
	pga       map[string]bool                // region -> default subnet's privateIpGoogleAccess
	firewalls map[string]*computepb.Firewall // name
	routers   map[string]*computepb.Router   // region/name
	granted   map[string]bool                // permissions the caller holds on the project
	mtu       int32                          // the default network's MTU; 0 is GCE's default
}

// The default network's pre-populated rules, as GCE creates them.
func defaultFirewalls() []*computepb.Firewall {
	all := func(ipProtocol string) *computepb.Allowed {
		return &computepb.Allowed{IPProtocol: proto.String(ipProtocol)}
	}
	ports := func(ipProtocol string, p ...string) *computepb.Allowed {
		return &computepb.Allowed{IPProtocol: proto.String(ipProtocol), Ports: p}
	}
	rule := func(name, desc, src string, allowed ...*computepb.Allowed) *computepb.Firewall {
		return &computepb.Firewall{
			Name: proto.String(name), Description: proto.String(desc),
			Direction: proto.String("INGRESS"), Priority: proto.Int32(65534),
			SourceRanges: []string{src}, Allowed: allowed,
		}
	}
	return []*computepb.Firewall{
		rule("default-allow-icmp", "Allow ICMP from anywhere", "0.0.0.0/0", all("icmp")),
		rule("default-allow-internal", "Allow internal traffic on the default network", "10.128.0.0/9",
			ports("tcp", "0-65535"), ports("udp", "0-65535"), all("icmp")),
		rule("default-allow-rdp", "Allow RDP from anywhere", "0.0.0.0/0", ports("tcp", "3389")),
		rule("default-allow-ssh", "Allow SSH from anywhere", "0.0.0.0/0", ports("tcp", "22")),
	}
}

func newInfra(s *Server) *infra {
	in := &infra{
		pga:       map[string]bool{},
		firewalls: map[string]*computepb.Firewall{},
		routers:   map[string]*computepb.Router{},
		granted:   map[string]bool{},
	}
	for _, fw := range defaultFirewalls() {
		stored, err := s.normalizeFirewall(fw)
		if err != nil {
			panic(fmt.Sprintf("gcefake: default firewall %s: %v", fw.GetName(), err))
		}
		stored.CreationTimestamp = proto.String(worldEpoch)
		in.firewalls[fw.GetName()] = stored
	}
	for _, p := range knownPermissions {
		in.granted[p] = true
	}
	return in
}

// SetPrivateGoogleAccess turns Private Google Access on or off on the
// default network's subnet in region.
func (s *Server) SetPrivateGoogleAccess(region string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world.infra.pga[region] = on
}

// AddFirewall creates a firewall rule, validated as firewalls.insert
// validates it; the error is what GCE would answer.
func (s *Server) AddFirewall(fw *computepb.Firewall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := s.normalizeFirewall(fw)
	if err != nil {
		return err
	}
	if s.world.infra.firewalls[stored.GetName()] != nil {
		return apiErr(http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/global/firewalls/%s' already exists", s.project, stored.GetName()))
	}
	stored.CreationTimestamp = proto.String(s.stamp())
	s.world.infra.firewalls[stored.GetName()] = stored
	return nil
}

// DeleteFirewall removes a firewall rule.
func (s *Server) DeleteFirewall(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.world.infra.firewalls[name] == nil {
		return resourceNotFound(fmt.Sprintf("projects/%s/global/firewalls/%s", s.project, name))
	}
	delete(s.world.infra.firewalls, name)
	return nil
}

var firewallProtocols = []string{"tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"}

// normalizeFirewall applies GCE's defaults and rejections to a rule.
func (s *Server) normalizeFirewall(in *computepb.Firewall) (*computepb.Firewall, error) {
	fw := proto.Clone(in).(*computepb.Firewall)
	if !nameRE.MatchString(fw.GetName()) {
		return nil, invalidField("resource.name", fw.GetName(), "Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
	}
	if fw.Network == nil {
		fw.Network = proto.String("global/networks/" + defaultNetwork)
	}
	if r, ok := s.parseRef(fw.GetNetwork()); !ok {
		return nil, invalidField("resource.network", fw.GetNetwork(), "Must be the URL to a Compute resource of the correct type.")
	} else if name, global := r.global("networks"); !global || r.project != s.vpcProject() || name != defaultNetwork {
		return nil, resourceNotFound(r.path())
	}
	fw.Network = proto.String(s.networkURL())
	switch fw.GetDirection() {
	case "":
		fw.Direction = proto.String("INGRESS")
	case "INGRESS", "EGRESS":
	default:
		return nil, invalidField("resource.direction", fw.GetDirection(), "Must be INGRESS or EGRESS.")
	}
	if fw.Priority == nil {
		fw.Priority = proto.Int32(1000)
	}
	if p := fw.GetPriority(); p < 0 || p > 65535 {
		return nil, invalidField("resource.priority", strconv.Itoa(int(p)), "Must be between 0 and 65535.")
	}
	if (len(fw.Allowed) == 0) == (len(fw.Denied) == 0) {
		return nil, invalidf("Invalid value for field 'resource': exactly one of 'allowed' or 'denied' must be specified.")
	}
	type rule struct {
		protocol string
		ports    []string
	}
	var rules []rule
	for _, a := range fw.Allowed {
		rules = append(rules, rule{a.GetIPProtocol(), a.GetPorts()})
	}
	for _, d := range fw.Denied {
		rules = append(rules, rule{d.GetIPProtocol(), d.GetPorts()})
	}
	for i, r := range rules {
		field := fmt.Sprintf("resource.allowed[%d]", i)
		if len(fw.Denied) > 0 {
			field = fmt.Sprintf("resource.denied[%d]", i)
		}
		if _, err := strconv.Atoi(r.protocol); err != nil && !slices.Contains(firewallProtocols, r.protocol) {
			return nil, invalidField(field+".IPProtocol", r.protocol, "Must be tcp, udp, icmp, esp, ah, sctp, ipip, all or an IP protocol number.")
		}
		if len(r.ports) > 0 && r.protocol != "tcp" && r.protocol != "udp" && r.protocol != "sctp" {
			return nil, invalidField(field+".ports", strings.Join(r.ports, ","), "Ports may only be specified for tcp, udp or sctp.")
		}
		for _, p := range r.ports {
			if _, _, ok := parsePortRange(p); !ok {
				return nil, invalidField(field+".ports", p, "Must be a port or a port range between 0 and 65535.")
			}
		}
	}
	ingress := fw.GetDirection() == "INGRESS"
	if !ingress && (len(fw.SourceRanges) > 0 || len(fw.SourceTags) > 0 || len(fw.SourceServiceAccounts) > 0) {
		return nil, invalidf("Invalid value for field 'resource.sourceRanges': EGRESS rules take destinationRanges, not sources.")
	}
	if len(fw.SourceTags) > 0 && len(fw.SourceServiceAccounts) > 0 {
		return nil, invalidf("Invalid value for field 'resource.sourceServiceAccounts': source service accounts cannot be combined with source tags.")
	}
	if len(fw.TargetTags) > 0 && len(fw.TargetServiceAccounts) > 0 {
		return nil, invalidf("Invalid value for field 'resource.targetServiceAccounts': target service accounts cannot be combined with target tags.")
	}
	for field, list := range map[string][]string{"resource.sourceRanges": fw.SourceRanges, "resource.destinationRanges": fw.DestinationRanges} {
		for _, c := range list {
			if _, err := netip.ParsePrefix(c); err != nil {
				if _, err := netip.ParseAddr(c); err != nil {
					return nil, invalidField(field, c, "Must be an IP range in CIDR notation.")
				}
			}
		}
	}
	// GCE: an ingress rule without any source applies to 0.0.0.0/0; an
	// egress rule without destinations to 0.0.0.0/0.
	if ingress && len(fw.SourceRanges) == 0 && len(fw.SourceTags) == 0 && len(fw.SourceServiceAccounts) == 0 {
		fw.SourceRanges = []string{"0.0.0.0/0"}
	}
	if !ingress && len(fw.DestinationRanges) == 0 {
		fw.DestinationRanges = []string{"0.0.0.0/0"}
	}
	if fw.Disabled == nil {
		fw.Disabled = proto.Bool(false)
	}
	fw.Kind = proto.String("compute#firewall")
	fw.Id = proto.Uint64(stableID("firewall/" + fw.GetName()))
	fw.SelfLink = proto.String(s.projectURL() + "/global/firewalls/" + fw.GetName())
	return fw, nil
}

// parsePortRange parses "N" or "N-M" within 0-65535.
func parsePortRange(p string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(p, "-")
	lo, err := strconv.Atoi(a)
	if err != nil || lo < 0 || lo > 65535 {
		return 0, 0, false
	}
	hi = lo
	if isRange {
		if hi, err = strconv.Atoi(b); err != nil || hi < lo || hi > 65535 {
			return 0, 0, false
		}
	}
	return lo, hi, true
}

func firewallGetter(fw *computepb.Firewall) fieldGetter {
	return simpleGetter(map[string]string{
		"name":      fw.GetName(),
		"network":   fw.GetNetwork(),
		"direction": fw.GetDirection(),
		"disabled":  strconv.FormatBool(fw.GetDisabled()),
		"priority":  strconv.Itoa(int(fw.GetPriority())),
	})
}

func (s *Server) handleFirewallsList(rc *reqCtx) (proto.Message, error) {
	names := make([]string, 0, len(s.world.infra.firewalls))
	for n := range s.world.infra.firewalls {
		names = append(names, n)
	}
	sort.Strings(names)
	fws := make([]*computepb.Firewall, 0, len(names))
	for _, n := range names {
		fws = append(fws, s.world.infra.firewalls[n])
	}
	pg, next, err := listPage(rc, fws, firewallGetter)
	if err != nil {
		return nil, err
	}
	return &computepb.FirewallList{Kind: proto.String("compute#firewallList"), SelfLink: proto.String(s.projectURL() + "/global/firewalls"), Items: pg, NextPageToken: next}, nil
}

func (s *Server) handleFirewallsGet(rc *reqCtx) (proto.Message, error) {
	fw := s.world.infra.firewalls[rc.params["firewall"]]
	if fw == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/global/firewalls/%s", s.project, rc.params["firewall"]))
	}
	return fw, nil
}

// NAT source modes GCE accepts for a Cloud NAT.
var natSourceModes = []string{"ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES", "LIST_OF_SUBNETWORKS"}

// AddRouter creates a Cloud Router (with its Cloud NATs) in region,
// validated as routers.insert validates it.
func (s *Server) AddRouter(region string, in *computepb.Router) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg := s.world.regionByName[region]
	if reg == nil {
		return resourceNotFound(fmt.Sprintf("projects/%s/regions/%s", s.project, region))
	}
	r := proto.Clone(in).(*computepb.Router)
	if !nameRE.MatchString(r.GetName()) {
		return invalidField("resource.name", r.GetName(), "Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
	}
	if r.Network == nil {
		return invalidField("resource.network", "", "Network is required.")
	}
	if ref, ok := s.parseRef(r.GetNetwork()); !ok {
		return invalidField("resource.network", r.GetNetwork(), "Must be the URL to a Compute resource of the correct type.")
	} else if name, global := ref.global("networks"); !global || ref.project != s.vpcProject() || name != defaultNetwork {
		return resourceNotFound(ref.path())
	}
	r.Network = proto.String(s.networkURL())
	seen := map[string]bool{}
	for i, nat := range r.Nats {
		field := fmt.Sprintf("resource.nats[%d]", i)
		if !nameRE.MatchString(nat.GetName()) || seen[nat.GetName()] {
			return invalidField(field+".name", nat.GetName(), "Must be a unique name matching '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'.")
		}
		seen[nat.GetName()] = true
		switch nat.GetNatIpAllocateOption() {
		case "AUTO_ONLY":
		case "MANUAL_ONLY":
			if len(nat.NatIps) == 0 {
				return invalidField(field+".natIps", "", "MANUAL_ONLY needs at least one NAT IP.")
			}
		default:
			return invalidField(field+".natIpAllocateOption", nat.GetNatIpAllocateOption(), "Must be AUTO_ONLY or MANUAL_ONLY.")
		}
		mode := nat.GetSourceSubnetworkIpRangesToNat()
		if !slices.Contains(natSourceModes, mode) {
			return invalidField(field+".sourceSubnetworkIpRangesToNat", mode, "Must be one of "+strings.Join(natSourceModes, ", ")+".")
		}
		if (mode == "LIST_OF_SUBNETWORKS") != (len(nat.Subnetworks) > 0) {
			return invalidField(field+".subnetworks", "", "Subnetworks must be listed exactly when sourceSubnetworkIpRangesToNat is LIST_OF_SUBNETWORKS.")
		}
		for j, sn := range nat.Subnetworks {
			ref, ok := s.parseRef(sn.GetName())
			subRegion, subName, regional := ref.regional("subnetworks")
			if !ok || !regional || ref.project != s.vpcProject() || subName != defaultNetwork {
				return resourceNotFound(ref.path())
			}
			if subRegion != region {
				return invalidField(fmt.Sprintf("%s.subnetworks[%d].name", field, j), sn.GetName(), fmt.Sprintf("Subnetwork must be in region '%s', the region of the router.", region))
			}
			sn.Name = proto.String(s.subnetURL(region))
			if len(sn.SourceIpRangesToNat) == 0 {
				sn.SourceIpRangesToNat = []string{"ALL_IP_RANGES"}
			}
		}
	}
	key := region + "/" + r.GetName()
	if s.world.infra.routers[key] != nil {
		return apiErr(http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/regions/%s/routers/%s' already exists", s.project, region, r.GetName()))
	}
	r.Kind = proto.String("compute#router")
	r.Id = proto.Uint64(stableID("router/" + key))
	r.Region = proto.String(s.regionURL(region))
	r.SelfLink = proto.String(s.regionURL(region) + "/routers/" + r.GetName())
	r.CreationTimestamp = proto.String(s.stamp())
	s.world.infra.routers[key] = r
	return nil
}

func (s *Server) regionRouters(region string) []*computepb.Router {
	var out []*computepb.Router
	for key, r := range s.world.infra.routers {
		if strings.HasPrefix(key, region+"/") {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func (s *Server) handleRoutersList(rc *reqCtx) (proto.Message, error) {
	region := rc.params["region"]
	if s.world.regionByName[region] == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/regions/%s", s.project, region))
	}
	pg, next, err := listPage(rc, s.regionRouters(region), func(r *computepb.Router) fieldGetter {
		return simpleGetter(map[string]string{"name": r.GetName(), "network": r.GetNetwork()})
	})
	if err != nil {
		return nil, err
	}
	return &computepb.RouterList{Kind: proto.String("compute#routerList"), SelfLink: proto.String(s.regionURL(region) + "/routers"), Items: pg, NextPageToken: next}, nil
}

func (s *Server) handleRoutersGet(rc *reqCtx) (proto.Message, error) {
	region := rc.params["region"]
	r := s.world.infra.routers[region+"/"+rc.params["router"]]
	if r == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/regions/%s/routers/%s", s.project, region, rc.params["router"]))
	}
	return r, nil
}
