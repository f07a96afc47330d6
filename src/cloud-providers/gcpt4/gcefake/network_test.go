// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"errors"
	"slices"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/cloudresourcemanager/v3"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

func listFirewalls(t *testing.T, s *Server, filter string) []string {
	t.Helper()
	c := newClient(t, s, compute.NewFirewallsRESTClient)
	req := &computepb.ListFirewallsRequest{Project: testProject}
	if filter != "" {
		req.Filter = proto.String(filter)
	}
	it := c.List(testCtx(t), req)
	var names []string
	for {
		fw, err := it.Next()
		if err == iterator.Done {
			return names
		}
		if err != nil {
			t.Fatalf("firewalls.list: %v", err)
		}
		names = append(names, fw.GetName())
	}
}

func TestFirewallsDefaultRulesAddAndDelete(t *testing.T) {
	s := newFake(t)
	got := listFirewalls(t, s, "")
	want := []string{"default-allow-icmp", "default-allow-internal", "default-allow-rdp", "default-allow-ssh"}
	if !slices.Equal(got, want) {
		t.Fatalf("default firewalls = %v, want %v", got, want)
	}
	err := s.AddFirewall(&computepb.Firewall{
		Name:         proto.String("allow-podvm"),
		SourceRanges: []string{"10.128.0.0/20"},
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"15150"}}, {IPProtocol: proto.String("udp"), Ports: []string{"4789"}}},
	})
	if err != nil {
		t.Fatalf("AddFirewall: %v", err)
	}
	c := newClient(t, s, compute.NewFirewallsRESTClient)
	fw, err := c.Get(testCtx(t), &computepb.GetFirewallRequest{Project: testProject, Firewall: "allow-podvm"})
	if err != nil {
		t.Fatal(err)
	}
	if fw.GetDirection() != "INGRESS" || fw.GetPriority() != 1000 || !strings.HasSuffix(fw.GetNetwork(), "/global/networks/default") {
		t.Errorf("defaults not applied: %v", fw)
	}
	if got := listFirewalls(t, s, `name = "allow-podvm"`); !slices.Equal(got, []string{"allow-podvm"}) {
		t.Errorf("filtered list = %v", got)
	}
	if err := s.DeleteFirewall("default-allow-internal"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(listFirewalls(t, s, ""), "default-allow-internal") {
		t.Error("deleted rule still listed")
	}
	if _, err := c.Get(testCtx(t), &computepb.GetFirewallRequest{Project: testProject, Firewall: "default-allow-internal"}); !isCode(err, 404) {
		t.Errorf("get deleted rule: %v, want 404", err)
	}
}

func isCode(err error, code int) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == code
}

func TestFirewallRejectsWhatGCERejects(t *testing.T) {
	s := newFake(t)
	tcp := []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"15150"}}}
	cases := map[string]*computepb.Firewall{
		"bad name":          {Name: proto.String("Allow_All"), Allowed: tcp},
		"no rules":          {Name: proto.String("x")},
		"allowed + denied":  {Name: proto.String("x"), Allowed: tcp, Denied: []*computepb.Denied{{IPProtocol: proto.String("tcp")}}},
		"bad protocol":      {Name: proto.String("x"), Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tpc")}}},
		"ports on icmp":     {Name: proto.String("x"), Allowed: []*computepb.Allowed{{IPProtocol: proto.String("icmp"), Ports: []string{"1"}}}},
		"port out of range": {Name: proto.String("x"), Allowed: []*computepb.Allowed{{IPProtocol: proto.String("udp"), Ports: []string{"70000"}}}},
		"bad direction":     {Name: proto.String("x"), Direction: proto.String("IN"), Allowed: tcp},
		"egress source":     {Name: proto.String("x"), Direction: proto.String("EGRESS"), SourceRanges: []string{"10.0.0.0/8"}, Allowed: tcp},
		"bad cidr":          {Name: proto.String("x"), SourceRanges: []string{"10.0.0.0/33"}, Allowed: tcp},
		"unknown network":   {Name: proto.String("x"), Network: proto.String("global/networks/other"), Allowed: tcp},
		"tags and sa":       {Name: proto.String("x"), TargetTags: []string{"a"}, TargetServiceAccounts: []string{"a@b"}, Allowed: tcp},
		"duplicate":         {Name: proto.String("default-allow-ssh"), Allowed: tcp},
	}
	for name, fw := range cases {
		if err := s.AddFirewall(fw); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func natRouter(name, mode string, subnets ...string) *computepb.Router {
	nat := &computepb.RouterNat{
		Name:                          proto.String(name + "-nat"),
		NatIpAllocateOption:           proto.String("AUTO_ONLY"),
		SourceSubnetworkIpRangesToNat: proto.String(mode),
	}
	for _, sn := range subnets {
		nat.Subnetworks = append(nat.Subnetworks, &computepb.RouterNatSubnetworkToNat{Name: proto.String(sn)})
	}
	return &computepb.Router{Name: proto.String(name), Network: proto.String("global/networks/default"), Nats: []*computepb.RouterNat{nat}}
}

func TestRoutersWithNAT(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s, compute.NewRoutersRESTClient)
	it := c.List(testCtx(t), &computepb.ListRoutersRequest{Project: testProject, Region: "us-central1"})
	if _, err := it.Next(); err != iterator.Done {
		t.Fatalf("a new project has no routers; got %v", err)
	}
	if err := s.AddRouter("us-central1", natRouter("nat-router", "LIST_OF_SUBNETWORKS", "regions/us-central1/subnetworks/default")); err != nil {
		t.Fatalf("AddRouter: %v", err)
	}
	r, err := c.Get(testCtx(t), &computepb.GetRouterRequest{Project: testProject, Region: "us-central1", Router: "nat-router"})
	if err != nil {
		t.Fatal(err)
	}
	sn := r.GetNats()[0].GetSubnetworks()
	if len(sn) != 1 || sn[0].GetName() != s.subnetURL("us-central1") || sn[0].GetSourceIpRangesToNat()[0] != "ALL_IP_RANGES" {
		t.Errorf("nat subnetworks = %v", sn)
	}
	it = c.List(testCtx(t), &computepb.ListRoutersRequest{Project: testProject, Region: "us-central1"})
	if got, err := it.Next(); err != nil || got.GetName() != "nat-router" {
		t.Errorf("list = %v, %v", got, err)
	}
	if _, err := c.Get(testCtx(t), &computepb.GetRouterRequest{Project: testProject, Region: "us-east1", Router: "nat-router"}); !isCode(err, 404) {
		t.Errorf("router in another region: %v, want 404", err)
	}

	bad := map[string]struct {
		region string
		r      *computepb.Router
	}{
		"list without subnets":   {"us-central1", natRouter("a", "LIST_OF_SUBNETWORKS")},
		"subnets without list":   {"us-central1", natRouter("b", "ALL_SUBNETWORKS_ALL_IP_RANGES", "regions/us-central1/subnetworks/default")},
		"subnet of other region": {"us-central1", natRouter("c", "LIST_OF_SUBNETWORKS", "regions/us-east1/subnetworks/default")},
		"unknown subnet":         {"us-central1", natRouter("d", "LIST_OF_SUBNETWORKS", "regions/us-central1/subnetworks/nope")},
		"bad mode":               {"us-central1", natRouter("e", "ALL")},
		"unknown region":         {"mars-west1", natRouter("f", "ALL_SUBNETWORKS_ALL_IP_RANGES")},
		"duplicate":              {"us-central1", natRouter("nat-router", "ALL_SUBNETWORKS_ALL_IP_RANGES")},
		"no network":             {"us-central1", &computepb.Router{Name: proto.String("g")}},
	}
	for name, b := range bad {
		if err := s.AddRouter(b.region, b.r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSubnetPrivateGoogleAccess(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s, compute.NewSubnetworksRESTClient)
	get := func() bool {
		sn, err := c.Get(testCtx(t), &computepb.GetSubnetworkRequest{Project: testProject, Region: "us-central1", Subnetwork: "default"})
		if err != nil {
			t.Fatal(err)
		}
		return sn.GetPrivateIpGoogleAccess()
	}
	if get() {
		t.Error("Private Google Access is off by default on GCE")
	}
	s.SetPrivateGoogleAccess("us-central1", true)
	if !get() {
		t.Error("Private Google Access not reported after enabling it")
	}
}

func crmService(t *testing.T, s *Server) *cloudresourcemanager.Service {
	t.Helper()
	// The discovery-based clients join paths to an endpoint ending in "/".
	svc, err := cloudresourcemanager.NewService(testCtx(t), option.WithEndpoint(s.URL()+"/"), option.WithoutAuthentication(), option.WithHTTPClient(s.ts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func TestTestIamPermissions(t *testing.T) {
	s := newFake(t)
	svc := crmService(t, s)
	ask := []string{"compute.instances.create", "compute.instances.delete"}
	resp, err := svc.Projects.TestIamPermissions("projects/"+testProject, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: ask}).Context(testCtx(t)).Do()
	if err != nil {
		t.Fatalf("testIamPermissions: %v", err)
	}
	if !slices.Equal(resp.Permissions, ask) {
		t.Errorf("granted = %v, want %v", resp.Permissions, ask)
	}
	s.RevokePermissions("compute.instances.delete")
	resp, err = svc.Projects.TestIamPermissions("projects/"+testProject, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: ask}).Context(testCtx(t)).Do()
	if err != nil || !slices.Equal(resp.Permissions, ask[:1]) {
		t.Errorf("after revoke: %v, %v", resp, err)
	}
	if s.CountCalls("projects.testIamPermissions") != 2 {
		t.Errorf("calls not recorded")
	}
	for name, c := range map[string]struct {
		resource string
		perms    []string
		code     int
	}{
		"wildcard":      {"projects/" + testProject, []string{"compute.*"}, 400},
		"unknown":       {"projects/" + testProject, []string{"compute.instances.fly"}, 400},
		"other project": {"projects/someone-else", ask, 403},
	} {
		_, err := svc.Projects.TestIamPermissions(c.resource, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: c.perms}).Context(testCtx(t)).Do()
		if !isCode(err, c.code) {
			t.Errorf("%s: err = %v, want %d", name, err, c.code)
		}
	}
}
