package preflight

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// flow is traffic a firewall rule must let in.
type flow struct {
	protocol string
	port     int
}

// endpoint is one side of a flow: the instances' addresses, and the
// network tags and service account they carry.
type endpoint struct {
	ranges []netip.Prefix
	tags   []string
	sa     string
	// known: tags and sa are what the instances really carry (podVMs:
	// the provider sets them; nodes: read from their VMs or -node-tags).
	known bool
}

// verdict is what the first matching rule decides for one source range.
type verdict struct {
	allowed bool
	rule    string
	// uncertain: the deciding allow rule targets (or admits) by tags or
	// service accounts preflight could not see on the instances.
	uncertain bool
	// wide: the deciding allow rule admits 0.0.0.0/0.
	wide bool
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

func parsePrefix(r string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(r)
	if err != nil {
		a, aerr := netip.ParseAddr(r)
		if aerr != nil {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p, true
}

// covers reports whether a rule's source ranges include all of src.
func covers(ranges []string, src netip.Prefix) bool {
	for _, r := range ranges {
		p, ok := parsePrefix(r)
		if ok && p.Bits() <= src.Bits() && p.Contains(src.Addr()) {
			return true
		}
	}
	return false
}

func everywhere(ranges []string) bool {
	for _, r := range ranges {
		if p, ok := parsePrefix(r); ok && p.Bits() == 0 {
			return true
		}
	}
	return false
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// targets says whether a rule applies to dst: surely, possibly (it
// targets tags or accounts preflight cannot see on dst), or not. GCE: no
// targets means every instance of the network.
func targets(fw *computepb.Firewall, dst endpoint) (applies, maybe bool) {
	tags, sas := fw.GetTargetTags(), fw.GetTargetServiceAccounts()
	switch {
	case len(tags) == 0 && len(sas) == 0:
		return true, false
	case !dst.known:
		return false, true
	case len(tags) > 0:
		return intersects(tags, dst.tags), false
	default:
		return slices.Contains(sas, dst.sa), false
	}
}

// admits says whether a rule's sources include src's range r: by range,
// or (GCE matches either) by the source tags or service accounts src's
// instances carry; maybe when that depends on tags preflight cannot see.
func admits(fw *computepb.Firewall, src endpoint, r netip.Prefix) (yes, maybe bool) {
	if covers(fw.GetSourceRanges(), r) {
		return true, false
	}
	byTag := len(fw.GetSourceTags()) > 0 || len(fw.GetSourceServiceAccounts()) > 0
	switch {
	case !byTag:
		return false, false
	case !src.known:
		return false, true
	}
	return intersects(fw.GetSourceTags(), src.tags) || slices.Contains(fw.GetSourceServiceAccounts(), src.sa), false
}

// decide evaluates the ingress rules as GCE does for traffic from range r
// of src to dst: the matching rule with the lowest priority number wins,
// a deny beating an allow of equal priority; no match is the implied deny.
// A rule that only possibly matches (tags preflight cannot see) is
// skipped when it denies and noted when it allows.
func decide(fws []*computepb.Firewall, network string, f flow, src endpoint, r netip.Prefix, dst endpoint) verdict {
	type cand struct {
		fw          *computepb.Firewall
		deny, maybe bool
	}
	var cands []cand
	for _, fw := range fws {
		if fw.GetDisabled() || fw.GetDirection() != "INGRESS" || lastSegment(fw.GetNetwork()) != network {
			continue
		}
		tOK, tMaybe := targets(fw, dst)
		sOK, sMaybe := admits(fw, src, r)
		if !(tOK || tMaybe) || !(sOK || sMaybe) {
			continue
		}
		maybe := tMaybe || sMaybe
		for _, a := range fw.GetAllowed() {
			if protoMatches(a.GetIPProtocol(), a.GetPorts(), f) {
				cands = append(cands, cand{fw: fw, maybe: maybe})
				break
			}
		}
		for _, d := range fw.GetDenied() {
			if protoMatches(d.GetIPProtocol(), d.GetPorts(), f) {
				cands = append(cands, cand{fw: fw, deny: true, maybe: maybe})
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
	var maybeAllow *computepb.Firewall
	for _, c := range cands {
		switch {
		case c.deny && c.maybe:
			continue
		case c.deny:
			return verdict{rule: c.fw.GetName()}
		case c.maybe:
			if maybeAllow == nil {
				maybeAllow = c.fw
			}
			continue
		}
		return verdict{allowed: true, rule: c.fw.GetName(), wide: everywhere(c.fw.GetSourceRanges())}
	}
	if maybeAllow != nil {
		return verdict{allowed: true, rule: maybeAllow.GetName(), uncertain: true, wide: everywhere(maybeAllow.GetSourceRanges())}
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

// firewallInput is what the firewall checks compare.
type firewallInput struct {
	project, network string
	podVMs, nodes    endpoint
	podVMSubnet      string
	// nodesFrom says where the nodes' ranges came from, for the detail.
	nodesFrom string
	// nodesAssumed: the nodes' addresses are unknown and the podVM subnet
	// stands in for them (no kubeconfig, no -node-cidrs).
	nodesAssumed bool
}

// podVMTarget is how a fix names the podVMs: their network tag (the
// provider's GCP_NETWORK_TAGS), else their service account.
func (in firewallInput) podVMTarget(flag string) string {
	if len(in.podVMs.tags) > 0 {
		return fmt.Sprintf("--%s-tags=%s", flag, in.podVMs.tags[len(in.podVMs.tags)-1])
	}
	if in.podVMs.sa != "" {
		return fmt.Sprintf("--%s-service-accounts=%s", flag, in.podVMs.sa)
	}
	return ""
}

// nodeSource is how a fix names the nodes as a source: their tags, else
// the node pool's subnet ranges when they hold no podVM; never a range
// that admits podVMs (podVM-to-podVM is what the fixes keep closed).
func (in firewallInput) nodeSource() string {
	if in.nodes.known && len(in.nodes.tags) > 0 {
		return "--source-tags=" + strings.Join(in.nodes.tags, ",")
	}
	overlaps := in.nodesAssumed
	for _, n := range in.nodes.ranges {
		for _, p := range in.podVMs.ranges {
			overlaps = overlaps || n.Overlaps(p)
		}
	}
	if overlaps {
		return "--source-tags=NODE_TAG"
	}
	return "--source-ranges=" + prefixStrings(in.nodes.ranges)
}

// nodeSourceNote ends a fix whose source is the NODE_TAG placeholder.
func (in firewallInput) nodeSourceNote() string {
	if in.nodeSource() != "--source-tags=NODE_TAG" {
		return ""
	}
	return "   # NODE_TAG: the nodes share the podVMs' subnet, so only their network tag tells them apart: gcloud compute instances describe NODE --zone=ZONE --format='value(tags.items)' (GKE: gke-CLUSTER-…-node); or pass -node-tags"
}

func (in firewallInput) nodeTarget() string {
	if in.nodes.known && len(in.nodes.tags) > 0 {
		return "--target-tags=" + strings.Join(in.nodes.tags, ",")
	}
	return "--target-tags=NODE_TAG   # the nodes' network tag: gcloud compute instances describe NODE --zone=ZONE --format='value(tags.items)' (GKE: gke-CLUSTER-…-node)"
}

func (g *GCE) checkFirewalls(fws []*computepb.Firewall, in firewallInput) []Result {
	var rs []Result
	toPodVMs := firewallCreate(in.project, "caa-nodes-to-podvms", fmt.Sprintf("--network=%s --direction=INGRESS --allow=tcp:%d,udp:%d %s %s",
		in.network, AgentPort, VXLANPort, in.nodeSource(), in.podVMTarget("target"))) + in.nodeSourceNote()
	srcRanges := in.nodes.ranges
	if len(srcRanges) == 0 && in.nodes.known {
		// Tags only: any address of a node; the subnet stands in.
		srcRanges = in.podVMs.ranges
	}
	for _, f := range []flow{{"tcp", AgentPort}, {"udp", VXLANPort}} {
		check := fmt.Sprintf("firewall %s:%d nodes→podVMs (%s)", f.protocol, f.port, in.podVMSubnet)
		var blocked, via, maybe, wide []string
		for _, r := range srcRanges {
			v := decide(fws, in.network, f, in.nodes, r, in.podVMs)
			switch {
			case !v.allowed && v.rule != "":
				blocked = append(blocked, r.String()+": denied by "+v.rule)
			case !v.allowed:
				blocked = append(blocked, r.String()+": no rule")
			default:
				if !slices.Contains(via, v.rule) {
					via = append(via, v.rule)
				}
				if v.uncertain && !slices.Contains(maybe, v.rule) {
					maybe = append(maybe, v.rule)
				}
				if v.wide && !slices.Contains(wide, v.rule) {
					wide = append(wide, v.rule)
				}
			}
		}
		switch {
		case len(blocked) > 0:
			rs = append(rs, fail(check, toPodVMs, "blocked from %s (nodes: %s)", strings.Join(blocked, "; "), in.nodesFrom))
		case len(maybe) > 0:
			rs = append(rs, warn(check, toPodVMs, "allowed by %s only if the nodes carry its source tags or accounts, which preflight could not read (pass -node-tags)", strings.Join(maybe, ",")))
		case len(wide) > 0:
			rs = append(rs, warn(check, toPodVMs+fmt.Sprintf("   # then remove %s:%d from %s", f.protocol, f.port, strings.Join(wide, ",")),
				"allowed by %s from 0.0.0.0/0: the podVMs' %s port is open to every address that routes to the VPC; allow the nodes only, on the podVMs only", strings.Join(wide, ","), portName(f)))
		default:
			rs = append(rs, pass(check, "allowed by %s (nodes: %s)", strings.Join(via, ","), in.nodesFrom))
		}
	}
	rs = append(rs, g.checkExposure(fws, in)...)
	// VXLAN back from the podVMs to the nodes.
	f := flow{"udp", VXLANPort}
	check := fmt.Sprintf("firewall udp:%d podVMs→nodes (%s)", VXLANPort, in.podVMSubnet)
	fix := firewallCreate(in.project, "caa-podvms-to-nodes-vxlan", fmt.Sprintf("--network=%s --direction=INGRESS --allow=udp:%d %s %s",
		in.network, VXLANPort, in.podVMTarget("source"), in.nodeTarget()))
	var v verdict
	for _, r := range in.podVMs.ranges {
		v = decide(fws, in.network, f, in.podVMs, r, in.nodes)
		if !v.allowed {
			break
		}
	}
	switch {
	case !v.allowed && v.rule != "":
		rs = append(rs, fail(check, fix, "denied by %s", v.rule))
	case !v.allowed:
		rs = append(rs, fail(check, fix, "no rule lets the podVMs (%s) reach the nodes on udp:%d", in.podVMTarget("source"), VXLANPort))
	case v.uncertain:
		rs = append(rs, warn(check, fix, "allowed by %s only for its target tags or service accounts; make sure the worker nodes carry them (or pass -node-tags)", v.rule))
	case v.wide:
		rs = append(rs, warn(check, fix+fmt.Sprintf("   # then remove udp:%d from %s", VXLANPort, v.rule), "allowed by %s from 0.0.0.0/0: the nodes' VXLAN port is open to every address that routes to the VPC; allow the podVMs only", v.rule))
	default:
		rs = append(rs, pass(check, "allowed by %s", v.rule))
	}
	return rs
}

// firewallCreate is a rule's create command made safe to run twice, as a
// reader re-running preflight's fixes will: gcloud's create fails on a
// name that exists, so it runs only where describe finds none. A rule of
// that name with other settings is left as it is; the next preflight run
// judges it.
func firewallCreate(project, name, args string) string {
	return fmt.Sprintf("gcloud compute firewall-rules describe %[2]s --project=%[1]s >/dev/null 2>&1 || gcloud compute firewall-rules create %[2]s --project=%[1]s %[3]s", project, name, args)
}

func portName(f flow) string {
	if f.port == AgentPort {
		return "agent-protocol-forwarder"
	}
	return "VXLAN"
}
