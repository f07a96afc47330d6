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
	agent := flow{"tcp", AgentPort, true}
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
		v := decide(c.fws, "vpc", agent, src, "")
		if v.allowed != c.allow || v.rule != c.by {
			t.Errorf("%s: allowed=%v by %q, want %v by %q", c.name, v.allowed, v.rule, c.allow, c.by)
		}
	}
	sa := rule("sa", 1000, false, "10.0.0.0/8", "tcp", "")
	sa.TargetServiceAccounts = []string{"podvm@p.iam.gserviceaccount.com"}
	if v := decide([]*computepb.Firewall{sa}, "vpc", agent, src, ""); v.allowed {
		t.Error("a service-account rule reached a podVM without that account")
	}
	if v := decide([]*computepb.Firewall{sa}, "vpc", agent, src, "podvm@p.iam.gserviceaccount.com"); !v.allowed {
		t.Error("a service-account rule missed the podVM with that account")
	}
}
