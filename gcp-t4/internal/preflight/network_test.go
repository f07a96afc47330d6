package preflight

import (
	"context"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// addNodeVM creates a GKE-like node VM with network tags in the fake and
// returns its internal address.
func addNodeVM(t *testing.T, project *gcefake.Server, name string, tags ...string) string {
	t.Helper()
	c, err := compute.NewInstancesRESTClient(context.Background(), project.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	op, err := c.Insert(context.Background(), &computepb.InsertInstanceRequest{Project: project.Project(), Zone: "us-central1-a", InstanceResource: &computepb.Instance{
		Name: proto.String(name), MachineType: proto.String("zones/us-central1-a/machineTypes/n1-standard-4"),
		Tags: &computepb.Tags{Items: tags},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/demo-project/global/images/podvm-t4")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"), Subnetwork: proto.String("regions/us-central1/subnetworks/default")}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	inst, err := c.Get(context.Background(), &computepb.GetInstanceRequest{Project: project.Project(), Zone: "us-central1-a", Instance: name})
	if err != nil {
		t.Fatal(err)
	}
	return inst.GetNetworkInterfaces()[0].GetNetworkIP()
}

// TestFirewallFixesTargetPodVMsOnly: with the nodes' VMs readable, the
// fixes admit the node tag and target the podVM tag (no /32, no rule for
// every VM of the VPC, nothing podVM-to-podVM); a rule by those tags
// passes; a 0.0.0.0/0 rule is a warning.
func TestFirewallFixesTargetPodVMsOnly(t *testing.T) {
	project := readyProject(t)
	if err := project.DeleteFirewall("default-allow-internal"); err != nil {
		t.Fatal(err)
	}
	ip := addNodeVM(t, project, "gke-c-peer-1", "gke-c-1234-node")
	objs := readyCluster()
	n := gkeNode("n1", "ubuntu", "containerd://2.0.6", ip, "runc", "kata-remote")
	n.Spec.ProviderID = "gce://demo-project/us-central1-a/gke-c-peer-1"
	objs[0], objs[1] = n, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unused"}}
	run := func() []Result {
		return Run(ctx(t), Options{Cfg: baseConfig(project), Kube: fake.NewClientset(objs...), Cluster: &Cluster{RuntimeClass: "kata-remote", Namespace: ns, DaemonSet: dsName}}, quiet())
	}
	rs := run()
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Fail, "no rule (nodes: node subnet default 10.128.0.0/20, tags gke-c-1234-node)",
		"--allow=tcp:15150,udp:4789 --source-tags=gke-c-1234-node --target-tags=caa-gcp-t4-podvm")
	expect(t, rs, "firewall udp:4789 podVMs→nodes", Fail, "no rule", "--allow=udp:4789 --source-tags=caa-gcp-t4-podvm --target-tags=gke-c-1234-node")

	toPodVMs := &computepb.Firewall{Name: proto.String("caa-nodes-to-podvms"), SourceTags: []string{"gke-c-1234-node"}, TargetTags: []string{"caa-gcp-t4-podvm"},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"15150"}}, {IPProtocol: proto.String("udp"), Ports: []string{"4789"}}}}
	toNodes := &computepb.Firewall{Name: proto.String("caa-podvms-to-nodes-vxlan"), SourceTags: []string{"caa-gcp-t4-podvm"}, TargetTags: []string{"gke-c-1234-node"},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String("udp"), Ports: []string{"4789"}}}}
	for _, fw := range []*computepb.Firewall{toPodVMs, toNodes} {
		if err := project.AddFirewall(fw); err != nil {
			t.Fatal(err)
		}
	}
	rs = run()
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Pass, "allowed by caa-nodes-to-podvms", "")
	expect(t, rs, "firewall udp:4789 nodes→podVMs", Pass, "allowed by caa-nodes-to-podvms", "")
	expect(t, rs, "firewall udp:4789 podVMs→nodes", Pass, "allowed by caa-podvms-to-nodes-vxlan", "")
	// A rule for other tags does not reach podVMs.
	if err := project.DeleteFirewall("caa-nodes-to-podvms"); err != nil {
		t.Fatal(err)
	}
	toPodVMs.TargetTags = []string{"web"}
	if err := project.AddFirewall(toPodVMs); err != nil {
		t.Fatal(err)
	}
	expect(t, run(), "firewall tcp:15150 nodes→podVMs", Fail, "no rule", "")

	// Open to the world: allowed, but said.
	wide := readyProject(t)
	if err := wide.AddFirewall(allow("open-agent", 900, "0.0.0.0/0", nil, "tcp:15150", "udp:4789")); err != nil {
		t.Fatal(err)
	}
	rs = Run(ctx(t), Options{Cfg: baseConfig(wide)}, quiet())
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Warn, "allowed by open-agent from 0.0.0.0/0", "then remove tcp:15150 from open-agent")
	expect(t, rs, "firewall udp:4789 podVMs→nodes", Warn, "from 0.0.0.0/0", "")
}

// TestSharedVPCIsCheckedInTheHostProject: a service project's podVMs must
// use the host's network; the checks read the host's network, subnets,
// firewall rules and routers, and the caller's subnet use there.
func TestSharedVPCIsCheckedInTheHostProject(t *testing.T) {
	project := readyProject(t)
	project.SetSharedVPCHost("host-project")
	cfg := baseConfig(project)
	rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "shared vpc", Fail, "demo-project is a Shared VPC service project of host-project", "GCP_NETWORK=projects/host-project/global/networks/NETWORK")
	if _, ok := find(rs, "firewall"); ok {
		t.Error("firewall checks ran against the service project's own (absent) network")
	}
	cfg.Network = "projects/host-project/global/networks/default"
	cfg.Subnetwork = "projects/host-project/regions/us-central1/subnetworks/default"
	project.ResetCalls()
	rs = Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "shared vpc", Pass, "service project of host host-project", "")
	expect(t, rs, "shared vpc permissions", Pass, "may use subnets of host-project", "")
	expect(t, rs, "network default", Pass, "exists in project host-project", "")
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Pass, "", "")
	for _, kind := range []string{"firewalls.list", "subnetworks.get", "routers.list", "networks.get"} {
		found := false
		for _, c := range project.Calls() {
			if c.Kind == kind {
				found = true
				if !strings.Contains(c.Path, "/projects/host-project/") {
					t.Errorf("%s went to %s, not the host project", kind, c.Path)
				}
			}
		}
		if !found {
			t.Errorf("no %s call", kind)
		}
	}
	project.RevokePermissions("compute.subnetworks.use")
	expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), "shared vpc permissions", Fail, "compute.subnetworks.use", "--role=roles/compute.networkUser")
	// A network of a project this one is not attached to.
	cfg.Network, cfg.Subnetwork = "projects/elsewhere/global/networks/default", ""
	expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), "shared vpc", Fail, "attached to host host-project", "shared-vpc associated-projects add demo-project --host-project=elsewhere")
}

// TestTemplateModeChecksTheNetwork: the template's network, tags and
// service account are checked as GCP_NETWORK would be.
func TestTemplateModeChecksTheNetwork(t *testing.T) {
	project := readyProject(t)
	if err := project.DeleteFirewall("default-allow-internal"); err != nil {
		t.Fatal(err)
	}
	project.AddInstanceTemplate("", &computepb.InstanceTemplate{Name: proto.String("t4"), Properties: &computepb.InstanceProperties{
		MachineType: proto.String("n1-standard-4"), Tags: &computepb.Tags{Items: []string{"gpu-vms"}},
		GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("https://www.googleapis.com/compute/v1/projects/demo-project/global/networks/default"), Subnetwork: proto.String("regions/us-central1/subnetworks/default")}},
	}})
	cfg := baseConfig(project)
	cfg.InstanceTemplate, cfg.ImageName, cfg.Network, cfg.Subnetwork = "t4", "", "", ""
	rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "instance template t4", Pass, "network default", "")
	expect(t, rs, "network default", Pass, "from the instance template", "")
	expect(t, rs, "subnetwork default in us-central1", Pass, "10.128.0.0/20", "")
	expect(t, rs, "cloud nat in us-central1", Pass, "", "")
	expect(t, rs, "firewall tcp:15150 nodes→podVMs", Fail, "no rule", "--target-tags=caa-gcp-t4-podvm")
	// A rule for the template's own tag reaches the podVMs too.
	if err := project.AddFirewall(&computepb.Firewall{Name: proto.String("gpu"), SourceRanges: []string{"10.128.0.0/20"}, TargetTags: []string{"gpu-vms"},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp")}, {IPProtocol: proto.String("udp")}}}); err != nil {
		t.Fatal(err)
	}
	expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), "firewall tcp:15150 nodes→podVMs", Pass, "allowed by gpu", "")
	cfg.InstanceTemplate = "missing"
	expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), "instance template missing", Fail, "not found", "instance-templates list")
}

// TestOrgPolicies: what the organisation forbids fails before a create
// does.
func TestOrgPolicies(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy gcefake.OrgPolicy
		check  string
		status Status
		detail string
		fix    string
	}{
		{"untrusted image project", gcefake.OrgPolicy{Constraint: "constraints/compute.trustedImageProjects", ListPolicy: &gcefake.ListPolicy{AllowedValues: []string{"projects/debian-cloud"}}},
			"org policy trusted image projects", Fail, "image project demo-project is not trusted", "org-policies allow constraints/compute.trustedImageProjects projects/demo-project"},
		{"trusted image project", gcefake.OrgPolicy{Constraint: "constraints/compute.trustedImageProjects", ListPolicy: &gcefake.ListPolicy{AllowedValues: []string{"projects/demo-project"}}},
			"org policy trusted image projects", Pass, "allowed by projects/demo-project", ""},
		{"shielded vm required", gcefake.OrgPolicy{Constraint: "constraints/compute.requireShieldedVm", BooleanPolicy: &gcefake.BooleanPolicy{Enforced: true}},
			"org policy shielded vm", Fail, "is enforced", "disable-enforce constraints/compute.requireShieldedVm --project=demo-project"},
		{"location outside", gcefake.OrgPolicy{Constraint: "constraints/gcp.resourceLocations", ListPolicy: &gcefake.ListPolicy{AllowedValues: []string{"in:europe-west4-locations"}}},
			"org policy resource locations", Fail, "may not be created in us-central1-a", "GCP_ZONE"},
		{"location inside", gcefake.OrgPolicy{Constraint: "constraints/gcp.resourceLocations", ListPolicy: &gcefake.ListPolicy{AllowedValues: []string{"in:us-locations"}}},
			"org policy resource locations", Pass, "every zone is allowed", ""},
		{"location by an unknown group", gcefake.OrgPolicy{Constraint: "constraints/gcp.resourceLocations", ListPolicy: &gcefake.ListPolicy{AllowedValues: []string{"under:organizations/123"}}},
			"org policy resource locations", Warn, "cannot evaluate", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			project := readyProject(t)
			project.SetOrgPolicy(c.policy)
			expect(t, Run(ctx(t), Options{Cfg: baseConfig(project)}, quiet()), c.check, c.status, c.detail, c.fix)
		})
	}
	project := readyProject(t)
	project.FailNext("POST", "projects.getEffectiveOrgPolicy", 403, 3)
	expect(t, Run(ctx(t), Options{Cfg: baseConfig(project)}, quiet()), "org policy", Warn, "cannot read the effective policy", "--effective")
}
