package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"google.golang.org/protobuf/proto"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func baseConfig(fake *gcefake.Server) gcpt4.Config {
	return gcpt4.Config{
		ProjectID:         fake.Project(),
		Zone:              "us-central1-a",
		FallbackZones:     nil,
		ImageName:         "podvm-t4",
		Network:           "default",
		Subnetwork:        "default",
		DiskType:          "pd-balanced",
		RootVolumeSize:    50,
		ClusterID:         "5e2f3c1a-0000-4000-8000-000000000001",
		ProvisioningModel: setting.ProvisioningStandard,
		NetworkTags:       []string{gcpt4.DefaultNetworkTag},
		Endpoint:          fake.URL(),
	}
}

// readyProject is a fake project a deployment would succeed in: GCE's
// defaults plus a Cloud NAT and Private Google Access.
func readyProject(t *testing.T) *gcefake.Server {
	t.Helper()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	if err := fake.SetReadyForCAA(); err != nil {
		t.Fatal(err)
	}
	return fake
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func find(rs []Result, prefix string) (Result, bool) {
	for _, r := range rs {
		if strings.HasPrefix(r.Check, prefix) {
			return r, true
		}
	}
	return Result{}, false
}

func expect(t *testing.T, rs []Result, prefix string, status Status, detail, fix string) {
	t.Helper()
	r, ok := find(rs, prefix)
	if !ok {
		t.Errorf("no check %q in %v", prefix, rs)
		return
	}
	if r.Status != status || !strings.Contains(r.Detail, detail) || !strings.Contains(r.Fix, fix) {
		t.Errorf("check %q = %s %q fix %q; want %s with %q, fix containing %q", r.Check, r.Status, r.Detail, r.Fix, status, detail, fix)
	}
}

func TestReadyProjectPasses(t *testing.T) {
	fake := readyProject(t)
	cfg := baseConfig(fake)
	cfg.FallbackZones = []string{"us-central1-b"}
	cfg.Credentials = caaKey() // CAA's own key: its permissions are what testIamPermissions tests
	rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
	for _, r := range rs {
		// The default network's default-allow-internal admits the whole
		// VPC to the podVMs' ports: a warning (exposure_test.go).
		if r.Status != Pass && !strings.Contains(r.Check, "others→podVMs") {
			t.Errorf("%s: %s %s (fix %s)", r.Check, r.Status, r.Detail, r.Fix)
		}
	}
	for _, c := range []string{"config", "credentials", "accelerator nvidia-tesla-t4 in us-central1-a", "accelerator nvidia-tesla-t4 in us-central1-b",
		"quota NVIDIA_T4_GPUS in us-central1", "quota GPUS_ALL_REGIONS", "network default", "subnetwork default in us-central1",
		"private google access", "cloud nat in us-central1", "firewall tcp:15150 nodes→podVMs", "firewall udp:4789 nodes→podVMs",
		"firewall udp:4789 podVMs→nodes", "image podvm-t4", "permissions serviceAccount:" + caaAccount, "mtu default"} {
		if _, ok := find(rs, c); !ok {
			t.Errorf("check %q missing", c)
		}
	}
	if n := fake.CountCalls("projects.testIamPermissions"); n != 1 {
		t.Errorf("testIamPermissions calls = %d", n)
	}
}

func TestProjectChecksFail(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(*gcefake.Server, *gcpt4.Config)
		check  string
		status Status
		detail string
		fix    string
	}{
		{"invalid config", func(_ *gcefake.Server, c *gcpt4.Config) { c.ProjectID = "" }, "config", Fail, "GCP_PROJECT_ID", "docs/provider.md"},
		{"unknown project", func(_ *gcefake.Server, c *gcpt4.Config) { c.ProjectID = "other-project" }, "credentials", Fail, "does not exist", "gcloud projects list"},
		{"auto zones", func(_ *gcefake.Server, c *gcpt4.Config) { c.FallbackZones = []string{"auto"} }, "accelerator nvidia-tesla-t4 zones in us-central1", Pass, "us-central1-a,us-central1-b,us-central1-f", ""},
		{"auto zones, region without T4", func(_ *gcefake.Server, c *gcpt4.Config) {
			c.Zone, c.FallbackZones, c.Subnetwork = "us-east5-a", []string{"auto"}, ""
		}, "accelerator nvidia-tesla-t4 zones in us-east5", Fail, "no zone of us-east5", "gcloud compute accelerator-types list"},
		{"zone without T4", func(_ *gcefake.Server, c *gcpt4.Config) { c.FallbackZones = []string{"us-central1-c"} }, "accelerator nvidia-tesla-t4 in us-central1-c", Fail, "does not offer", "gcloud compute accelerator-types list"},
		{"no T4 quota", func(f *gcefake.Server, _ *gcpt4.Config) { f.SetQuota("us-central1", "NVIDIA_T4_GPUS", 0) }, "quota NVIDIA_T4_GPUS in us-central1", Fail, "limit is 0", "--quota-id=NVIDIA-T4-GPUS-per-project-region --preferred-value=4 --dimensions=region=us-central1"},
		{"little T4 quota", func(f *gcefake.Server, _ *gcpt4.Config) { f.SetQuota("us-central1", "NVIDIA_T4_GPUS", 2) }, "quota NVIDIA_T4_GPUS in us-central1", Warn, "2 of 2 free, the largest profile needs 4", "gcloud beta quotas"},
		{"no spot quota", func(f *gcefake.Server, c *gcpt4.Config) {
			c.ProvisioningModel = setting.ProvisioningSpot
			f.SetQuota("us-central1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0)
		}, "quota PREEMPTIBLE_NVIDIA_T4_GPUS in us-central1", Fail, "limit is 0", "PREEMPTIBLE-NVIDIA-T4-GPUS"},
		{"no global GPU quota", func(f *gcefake.Server, _ *gcpt4.Config) { f.SetQuota("", "GPUS_ALL_REGIONS", 0) }, "quota GPUS_ALL_REGIONS", Fail, "limit is 0", "--quota-id=GPUS-ALL-REGIONS-per-project --preferred-value=4"},
		{"missing network", func(_ *gcefake.Server, c *gcpt4.Config) { c.Network = "podvms" }, "network podvms", Fail, "not found", "gcloud compute networks create podvms"},
		{"missing subnet", func(_ *gcefake.Server, c *gcpt4.Config) { c.Subnetwork = "podvms" }, "subnetwork podvms in us-central1", Fail, "not found", "gcloud compute networks subnets create podvms"},
		{"no private google access, NAT present", func(f *gcefake.Server, _ *gcpt4.Config) { f.SetPrivateGoogleAccess("us-central1", false) }, "private google access", Warn, "through Cloud NAT", "--enable-private-ip-google-access"},
		{"image without UEFI", func(f *gcefake.Server, c *gcpt4.Config) {
			f.AddImage(f.Project(), &computepb.Image{Name: proto.String("podvm-bios"), DiskSizeGb: proto.Int64(20)})
			c.ImageName = "podvm-bios"
		}, "image podvm-bios", Fail, "UEFI_COMPATIBLE", "--guest-os-features=UEFI_COMPATIBLE"},
		{"missing image", func(_ *gcefake.Server, c *gcpt4.Config) {
			c.ImageName = "projects/demo-project/global/images/family/nope"
		}, "image projects/demo-project/global/images/family/nope", Fail, "not found", "make podvm"},
		{"deprecated image", func(f *gcefake.Server, c *gcpt4.Config) {
			f.AddImage(f.Project(), &computepb.Image{Name: proto.String("podvm-old"), GuestOsFeatures: []*computepb.GuestOsFeature{{Type: proto.String("UEFI_COMPATIBLE")}},
				Deprecated: &computepb.DeprecationStatus{State: proto.String("DEPRECATED")}})
			c.ImageName = "podvm-old"
		}, "image podvm-old", Fail, "DEPRECATED", "PODVM_IMAGE_NAME"},
		{"no delete permission", func(f *gcefake.Server, _ *gcpt4.Config) { f.RevokePermissions("compute.instances.delete") }, "permissions", Fail, "compute.instances.delete",
			"gcloud iam roles create caaGcpT4 --project=demo-project"},
		{"service account without actAs", func(f *gcefake.Server, c *gcpt4.Config) {
			c.ServiceAccount = "podvm@demo-project.iam.gserviceaccount.com"
			f.AddServiceAccount(c.ServiceAccount)
		}, "actAs podvm@demo-project.iam.gserviceaccount.com", Fail, "may not attach",
			"gcloud iam service-accounts add-iam-policy-binding podvm@demo-project.iam.gserviceaccount.com --project=demo-project --member=serviceAccount:caa@demo-project.iam.gserviceaccount.com --role=roles/iam.serviceAccountUser"},
		{"service account missing", func(_ *gcefake.Server, c *gcpt4.Config) {
			c.ServiceAccount = "podvm@demo-project.iam.gserviceaccount.com"
		},
			"actAs podvm@demo-project.iam.gserviceaccount.com", Fail, "does not exist", "gcloud iam service-accounts create podvm"},
		{"service account with actAs", func(f *gcefake.Server, c *gcpt4.Config) {
			c.ServiceAccount = "podvm@demo-project.iam.gserviceaccount.com"
			f.AddServiceAccount(c.ServiceAccount, "iam.serviceAccounts.actAs")
		}, "actAs podvm@demo-project.iam.gserviceaccount.com", Pass, "may attach", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := readyProject(t)
			cfg := baseConfig(fake)
			cfg.Credentials = caaKey() // the permission checks test the caller: CAA's key
			c.setup(fake, &cfg)
			expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), c.check, c.status, c.detail, c.fix)
		})
	}
}

func TestNATChecks(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	cfg := baseConfig(fake)
	rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
	// GCE's defaults: no router, Private Google Access off.
	expect(t, rs, "cloud nat in us-central1", Fail, "no Cloud Router with NAT", "gcloud compute routers create caa-nat-router")
	expect(t, rs, "private google access", Fail, "no Cloud NAT either", "--enable-private-ip-google-access")

	if err := fake.AddRouter("us-central1", &computepb.Router{Name: proto.String("bgp"), Network: proto.String("global/networks/default")}); err != nil {
		t.Fatal(err)
	}
	rs = Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "cloud nat in us-central1", Fail, "have no NAT covering subnet default", "gcloud compute routers nats create caa-nat --project=demo-project --router=bgp")

	all := &computepb.Router{Name: proto.String("nat-all"), Network: proto.String("global/networks/default"), Nats: []*computepb.RouterNat{{
		Name: proto.String("all"), NatIpAllocateOption: proto.String("AUTO_ONLY"), SourceSubnetworkIpRangesToNat: proto.String("ALL_SUBNETWORKS_ALL_IP_RANGES"),
	}}}
	if err := fake.AddRouter("us-central1", all); err != nil {
		t.Fatal(err)
	}
	expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), "cloud nat in us-central1", Pass, "covers every subnet", "")
}

func allow(name string, prio int32, src string, tags []string, rules ...string) *computepb.Firewall {
	fw := &computepb.Firewall{Name: proto.String(name), Priority: proto.Int32(prio), SourceRanges: []string{src}, TargetTags: tags}
	for _, r := range rules {
		p, port, _ := strings.Cut(r, ":")
		a := &computepb.Allowed{IPProtocol: proto.String(p)}
		if port != "" {
			a.Ports = []string{port}
		}
		fw.Allowed = append(fw.Allowed, a)
	}
	return fw
}

func TestFirewallChecks(t *testing.T) {
	noInternal := func(t *testing.T) (*gcefake.Server, gcpt4.Config) {
		fake := readyProject(t)
		if err := fake.DeleteFirewall("default-allow-internal"); err != nil {
			t.Fatal(err)
		}
		return fake, baseConfig(fake)
	}
	t.Run("no rule", func(t *testing.T) {
		_, cfg := noInternal(t)
		rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
		// The nodes are assumed in the podVMs' subnet: a range would admit
		// podVMs too, so the fix names the nodes by tag.
		expect(t, rs, "firewall tcp:15150 nodes→podVMs", Fail, "10.128.0.0/20: no rule", "gcloud compute firewall-rules create caa-nodes-to-podvms --project=demo-project --network=default --direction=INGRESS --allow=tcp:15150,udp:4789 --source-tags=NODE_TAG --target-tags=caa-gcp-t4-podvm")
		expect(t, rs, "firewall udp:4789 podVMs→nodes", Fail, "no rule", "--allow=udp:4789 --source-tags=caa-gcp-t4-podvm --target-tags=NODE_TAG")
	})
	t.Run("tagged rules reach only nodes", func(t *testing.T) {
		fake, cfg := noInternal(t)
		if err := fake.AddFirewall(allow("gke-nodes", 1000, "10.128.0.0/9", []string{"gke-node"}, "tcp:15150", "udp:4789")); err != nil {
			t.Fatal(err)
		}
		rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
		expect(t, rs, "firewall tcp:15150 nodes→podVMs", Fail, "no rule", "")
		expect(t, rs, "firewall udp:4789 podVMs→nodes", Warn, "target tags", "")
	})
	t.Run("deny wins by priority", func(t *testing.T) {
		fake := readyProject(t)
		deny := &computepb.Firewall{Name: proto.String("deny-vxlan"), Priority: proto.Int32(100), SourceRanges: []string{"0.0.0.0/0"},
			Denied: []*computepb.Denied{{IPProtocol: proto.String("udp"), Ports: []string{"4789"}}}}
		if err := fake.AddFirewall(deny); err != nil {
			t.Fatal(err)
		}
		rs := Run(ctx(t), Options{Cfg: baseConfig(fake)}, quiet())
		expect(t, rs, "firewall udp:4789 nodes→podVMs", Fail, "denied by deny-vxlan", "")
		expect(t, rs, "firewall tcp:15150 nodes→podVMs", Pass, "default-allow-internal", "")
	})
	t.Run("nodes outside the allowed range", func(t *testing.T) {
		fake := readyProject(t)
		cfg := baseConfig(fake)
		rs := Run(ctx(t), Options{Cfg: cfg, NodeCIDRs: mustPrefixes("192.168.0.0/24")}, quiet())
		expect(t, rs, "firewall tcp:15150 nodes→podVMs", Fail, "192.168.0.0/24: no rule", "--source-ranges=192.168.0.0/24 --target-tags=caa-gcp-t4-podvm")
		if err := fake.AddFirewall(allow("caa", 1000, "192.168.0.0/16", nil, "tcp:15150", "udp:4789")); err != nil {
			t.Fatal(err)
		}
		rs = Run(ctx(t), Options{Cfg: cfg, NodeCIDRs: mustPrefixes("192.168.0.0/24")}, quiet())
		expect(t, rs, "firewall tcp:15150 nodes→podVMs", Pass, "allowed by caa", "")
	})
}

func TestMainExitCodesAndJSON(t *testing.T) {
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_ENDPOINT", "GCP_CREDENTIALS", "KUBECONFIG", "GCP_PROVISIONING_MODEL", "GCP_SERVICE_ACCOUNT"} {
		t.Setenv(v, "")
	}
	run := func(fake *gcefake.Server, extra ...string) (int, string) {
		var out, errOut bytes.Buffer
		args := append([]string{"-gcp-project-id", fake.Project(), "-zone", "us-central1-a", "-image-name", "podvm-t4", "-network", "default", "-subnetwork", "default", "-gcp-endpoint", fake.URL()}, extra...)
		code := Main(context.Background(), args, &out, &errOut, quiet())
		return code, out.String() + errOut.String()
	}
	ready := readyProject(t)
	if code, out := run(ready); code != 0 || !strings.Contains(out, "0 failed") {
		t.Errorf("ready project: exit %d\n%s", code, out)
	}
	bare := gcefake.New()
	t.Cleanup(bare.Close)
	code, out := run(bare, "-o", "json")
	if code != 1 {
		t.Errorf("project without NAT: exit %d, want 1\n%s", code, out)
	}
	var doc struct {
		Results []Result `json:"results"`
		Failed  bool     `json:"failed"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || !doc.Failed {
		t.Fatalf("json: %v failed=%v\n%s", err, doc.Failed, out)
	}
	if r, ok := find(doc.Results, "cloud nat"); !ok || r.Status != Fail || r.Fix == "" {
		t.Errorf("cloud nat result = %+v", r)
	}
	if code, _ := run(bare, "-o", "yaml"); code != 2 {
		t.Errorf("-o yaml: exit %d, want 2", code)
	}
	if code, _ := run(bare, "-node-cidrs", "nonsense"); code != 2 {
		t.Errorf("bad -node-cidrs: exit %d, want 2", code)
	}
}

// TestPrintCleansDetails: a detail may quote a cluster object's fields,
// chosen by whoever wrote the object: an OSC 52 clipboard write, a screen
// clear, a bidi override and a zero-width space are printed escaped, in
// the table and in JSON; the detail's own line breaks are kept.
func TestPrintCleansDetails(t *testing.T) {
	bad := "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202e\u200b\x9b"
	rs := []Result{fail("CAA DaemonSet"+bad, "kubectl fix"+bad, "image %s\nsecond line", "evil"+bad)}
	for _, output := range []string{"table", "json"} {
		var out bytes.Buffer
		if err := Print(&out, output, rs); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if strings.ContainsAny(s, "\x1b\x07\u202e\u200b\u009b") {
			t.Errorf("-o %s: a raw control reaches the terminal:\n%q", output, s)
		}
		if output == "table" && (!strings.Contains(s, `image evil\x1b]52;c;ZXZpbA==\a\x1b[2J\u202e\u200b\x9b`) || !strings.Contains(s, "\n"+strings.Repeat(" ", 4)) || !strings.Contains(s, "second line")) {
			t.Errorf("table: want the detail escaped, its second line kept:\n%s", s)
		}
	}
}
