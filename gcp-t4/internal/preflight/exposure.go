package preflight

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// Only the worker nodes should reach a podVM's agent-protocol-forwarder
// (tcp:15150) and VXLAN (udp:4789). VXLAN is unauthenticated: a podVM
// booted from an image a tenant controls, or any other VM of the VPC that
// reaches udp:4789, can inject into other pods' tunnels. default-allow-
// internal (every protocol from 10.128.0.0/9, GCE's default network)
// admits the whole VPC, podVMs included.

// Priorities of the fix rules: the podVM↔podVM deny wins over every
// allow, the nodes' allow (gcloud's default 1000) over the catch-all deny
// of everyone else, which wins over default-allow-internal (65534).
const (
	priorityDenyPodVMs = 900
	priorityDenyOthers = 1100
)

// exposureFixes are the rules that leave the ports to the nodes alone.
func (in firewallInput) exposureFixes() []string {
	tag := in.podVMTarget("target")
	src := strings.Replace(tag, "--target-", "--source-", 1)
	rules := fmt.Sprintf("tcp:%d,udp:%d", AgentPort, VXLANPort)
	return []string{
		firewallCreate(in.project, "caa-podvms-deny-podvms", fmt.Sprintf("--network=%s --direction=INGRESS --action=DENY --rules=%s --priority=%d %s %s",
			in.network, rules, priorityDenyPodVMs, src, tag)),
		firewallCreate(in.project, "caa-nodes-to-podvms", fmt.Sprintf("--network=%s --direction=INGRESS --allow=%s %s %s",
			in.network, rules, in.nodeSource(), tag)) + in.nodeSourceNote(),
		firewallCreate(in.project, "caa-others-deny-podvms", fmt.Sprintf("--network=%s --direction=INGRESS --action=DENY --rules=%s --priority=%d --source-ranges=0.0.0.0/0 %s",
			in.network, rules, priorityDenyOthers, tag)),
	}
}

// withinNodes reports whether every address of p is a node's.
func (in firewallInput) withinNodes(p netip.Prefix) bool {
	if in.nodesAssumed {
		return false
	}
	for _, n := range in.nodes.ranges {
		if n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// checkExposure warns, per port, when anything but the worker nodes may
// reach the podVMs: the podVMs themselves, a range beyond the nodes', or
// instances by tags or service accounts the nodes do not carry.
func (g *GCE) checkExposure(fws []*computepb.Firewall, in firewallInput) []Result {
	var rs []Result
	fix := strings.Join(in.exposureFixes(), "\n")
	if in.podVMTarget("target") == "" {
		// A deny without targets would close the ports on every
		// instance, the nodes' VXLAN included.
		fix = "set GCP_NETWORK_TAGS (default caa-gcp-t4-podvm) so that firewall rules can target the podVMs alone"
	}
	for _, f := range []flow{{"tcp", AgentPort}, {"udp", VXLANPort}} {
		check := fmt.Sprintf("firewall %s:%d others→podVMs (%s)", f.protocol, f.port, in.podVMSubnet)
		var found []string
		note := func(s string) {
			if !slices.Contains(found, s) {
				found = append(found, s)
			}
		}
		for _, r := range in.podVMs.ranges {
			if v := decide(fws, in.network, f, in.podVMs, r, in.podVMs); v.allowed {
				note(fmt.Sprintf("other podVMs (%s) by %s", r, v.rule))
			}
		}
		for _, fw := range fws {
			if fw.GetDisabled() || fw.GetDirection() != "INGRESS" || lastSegment(fw.GetNetwork()) != in.network {
				continue
			}
			if ok, maybe := targets(fw, in.podVMs); !ok && !maybe {
				continue
			}
			allows := false
			for _, a := range fw.GetAllowed() {
				allows = allows || protoMatches(a.GetIPProtocol(), a.GetPorts(), f)
			}
			if !allows {
				continue
			}
			for _, sr := range fw.GetSourceRanges() {
				p, ok := parsePrefix(sr)
				if !ok || in.withinNodes(p) {
					continue
				}
				// Whatever wins for that range (a deny may shadow fw).
				if v := decide(fws, in.network, f, endpoint{known: true}, p, in.podVMs); v.allowed {
					note(fmt.Sprintf("%s by %s", p, v.rule))
				}
			}
			for _, tag := range fw.GetSourceTags() {
				if !in.nodes.known || !slices.Contains(in.nodes.tags, tag) {
					if v := decide(fws, in.network, f, endpoint{known: true, tags: []string{tag}}, netip.MustParsePrefix("255.255.255.255/32"), in.podVMs); v.allowed {
						note(fmt.Sprintf("instances tagged %s by %s", tag, v.rule))
					}
				}
			}
			for _, sa := range fw.GetSourceServiceAccounts() {
				if v := decide(fws, in.network, f, endpoint{known: true, sa: sa}, netip.MustParsePrefix("255.255.255.255/32"), in.podVMs); v.allowed {
					note(fmt.Sprintf("instances running as %s by %s", sa, v.rule))
				}
			}
		}
		if len(found) == 0 {
			rs = append(rs, pass(check, "only the worker nodes (%s) may reach the podVMs' %s port", in.nodesFrom, portName(f)))
			continue
		}
		rs = append(rs, warn(check, fix, "reachable from more than the worker nodes: %s; only the nodes should reach the podVMs' %s port (VXLAN is unauthenticated: a reachable podVM or VM can inject into other pods' tunnels)",
			strings.Join(found, "; "), portName(f)))
	}
	return rs
}
