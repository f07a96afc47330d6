package preflight

import (
	"net/netip"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

func rule(name string, prio int32, deny bool, src, protocol, port string) *computepb.Firewall {
	fw := &computepb.Firewall{Name: proto.String(name), Priority: proto.Int32(prio), Direction: proto.String("INGRESS"),
		Network: proto.String("projects/p/global/networks/vpc"), SourceRanges: []string{src}}
	var ports []string
	if port != "" {
		ports = []string{port}
	}
	if deny {
		fw.Denied = []*computepb.Denied{{IPProtocol: proto.String(protocol), Ports: ports}}
	} else {
		fw.Allowed = []*computepb.Allowed{{IPProtocol: proto.String(protocol), Ports: ports}}
	}
	return fw
}

func TestDecideFollowsGCEPrecedence(t *testing.T) {
	src := netip.MustParsePrefix("10.0.1.0/24")
	nodes := endpoint{ranges: []netip.Prefix{src}}
	podvm := endpoint{tags: []string{"caa-gcp-t4-podvm"}, sa: "podvm@p.iam.gserviceaccount.com", known: true}
	agent := flow{"tcp", AgentPort}
	disabled := rule("off", 1, true, "0.0.0.0/0", "all", "")
	disabled.Disabled = proto.Bool(true)
	otherNet := rule("other", 1, true, "0.0.0.0/0", "all", "")
	otherNet.Network = proto.String("global/networks/else")
	cases := []struct {
		name  string
		fws   []*computepb.Firewall
		allow bool
		by    string
	}{
		{"no rules: implied deny", nil, false, ""},
		{"range allow", []*computepb.Firewall{rule("a", 1000, false, "10.0.0.0/16", "tcp", "15000-16000")}, true, "a"},
		{"port outside range", []*computepb.Firewall{rule("a", 1000, false, "10.0.0.0/16", "tcp", "22")}, false, ""},
		{"source too narrow", []*computepb.Firewall{rule("a", 1000, false, "10.0.1.0/25", "tcp", "")}, false, ""},
		{"protocol all and by number", []*computepb.Firewall{rule("n", 1000, false, "10.0.0.0/8", "6", "")}, true, "n"},
		{"deny at equal priority wins", []*computepb.Firewall{rule("a", 1000, false, "10.0.0.0/8", "tcp", ""), rule("d", 1000, true, "10.0.0.0/8", "all", "")}, false, "d"},
		{"lower number wins", []*computepb.Firewall{rule("a", 900, false, "10.0.0.0/8", "tcp", ""), rule("d", 1000, true, "10.0.0.0/8", "all", "")}, true, "a"},
		{"disabled and other network ignored", []*computepb.Firewall{disabled, otherNet, rule("a", 1000, false, "10.0.0.0/8", "all", "")}, true, "a"},
	}
	for _, c := range cases {
		v := decide(c.fws, "vpc", agent, nodes, src, podvm)
		if v.allowed != c.allow || v.rule != c.by {
			t.Errorf("%s: allowed=%v by %q, want %v by %q", c.name, v.allowed, v.rule, c.allow, c.by)
		}
	}
	tagged := func(name string, tags, sas []string) *computepb.Firewall {
		fw := rule(name, 1000, false, "10.0.0.0/8", "tcp", "")
		fw.TargetTags, fw.TargetServiceAccounts = tags, sas
		return fw
	}
	for _, c := range []struct {
		fw    *computepb.Firewall
		allow bool
	}{
		{tagged("podvm-tag", []string{"caa-gcp-t4-podvm"}, nil), true},
		{tagged("other-tag", []string{"gke-node"}, nil), false},
		{tagged("podvm-sa", nil, []string{"podvm@p.iam.gserviceaccount.com"}), true},
		{tagged("other-sa", nil, []string{"x@p.iam.gserviceaccount.com"}), false},
	} {
		if v := decide([]*computepb.Firewall{c.fw}, "vpc", agent, nodes, src, podvm); v.allowed != c.allow || v.uncertain {
			t.Errorf("%s: %+v, want allowed=%v", c.fw.GetName(), v, c.allow)
		}
	}
	// Source tags: GCE matches a rule whose source tags the sender carries,
	// whatever its address; unknown sender tags leave it uncertain.
	bySrcTag := rule("from-nodes", 1000, false, "192.168.0.0/16", "tcp", "")
	bySrcTag.SourceTags = []string{"gke-node"}
	if v := decide([]*computepb.Firewall{bySrcTag}, "vpc", agent, endpoint{ranges: nodes.ranges, tags: []string{"gke-node"}, known: true}, src, podvm); !v.allowed || v.uncertain {
		t.Errorf("source tag carried: %+v", v)
	}
	if v := decide([]*computepb.Firewall{bySrcTag}, "vpc", agent, nodes, src, podvm); !v.allowed || !v.uncertain {
		t.Errorf("source tag, sender tags unknown: %+v, want an uncertain allow", v)
	}
	if v := decide([]*computepb.Firewall{rule("any", 1000, false, "0.0.0.0/0", "tcp", "")}, "vpc", agent, nodes, src, podvm); !v.allowed || !v.wide {
		t.Errorf("0.0.0.0/0: %+v, want a wide allow", v)
	}
}
