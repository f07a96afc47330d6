package preflight

import (
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// gcloudFirewall reads a fix's `gcloud compute firewall-rules create` as
// gcloud would send it (allow, or --action with --rules; priority 1000
// unless given; sources and targets). The create must be guarded by a
// describe of the same rule in the same project, so the fix is safe to
// run twice.
func gcloudFirewall(t *testing.T, cmd string) *computepb.Firewall {
	t.Helper()
	if i := strings.Index(cmd, "#"); i >= 0 {
		cmd = cmd[:i]
	}
	describe, create, ok := strings.Cut(cmd, " >/dev/null 2>&1 || ")
	fields := strings.Fields(create)
	if !ok || len(fields) < 6 || strings.Join(fields[:4], " ") != "gcloud compute firewall-rules create" {
		t.Fatalf("not a firewall-rules create guarded by a describe: %s", cmd)
	}
	if want := "gcloud compute firewall-rules describe " + fields[4] + " " + fields[5]; describe != want || !strings.HasPrefix(fields[5], "--project=") {
		t.Fatalf("the create of %s is guarded by %q, want %q", fields[4], describe, want)
	}
	f := map[string]string{}
	for _, kv := range fields[5:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(kv, "--"), "=")
		f[k] = v
	}
	split := func(k string) []string {
		if f[k] == "" {
			return nil
		}
		return strings.Split(f[k], ",")
	}
	fw := &computepb.Firewall{Name: proto.String(fields[4]), Network: proto.String("global/networks/" + f["network"]), Direction: proto.String(f["direction"]),
		Priority: proto.Int32(1000), SourceRanges: split("source-ranges"), SourceTags: split("source-tags"), TargetTags: split("target-tags"),
		SourceServiceAccounts: split("source-service-accounts"), TargetServiceAccounts: split("target-service-accounts")}
	if p, err := strconv.Atoi(f["priority"]); err == nil {
		fw.Priority = proto.Int32(int32(p))
	}
	rules, deny := f["allow"], false
	if f["action"] != "" {
		rules, deny = f["rules"], strings.EqualFold(f["action"], "DENY")
	}
	for _, r := range split2(rules) {
		p, port, _ := strings.Cut(r, ":")
		var ports []string
		if port != "" {
			ports = []string{port}
		}
		if deny {
			fw.Denied = append(fw.Denied, &computepb.Denied{IPProtocol: proto.String(p), Ports: ports})
		} else {
			fw.Allowed = append(fw.Allowed, &computepb.Allowed{IPProtocol: proto.String(p), Ports: ports})
		}
	}
	return fw
}

func split2(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func mustFind(t *testing.T, rs []Result, prefix string) Result {
	t.Helper()
	r, ok := find(rs, prefix)
	if !ok {
		t.Fatalf("no check %q", prefix)
	}
	return r
}

// applyFixes creates each fix rule on the emulator, as a user would run it.
func applyFixes(t *testing.T, fake *gcefake.Server, fix string) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(fix, "\n") {
		fw := gcloudFirewall(t, line)
		if err := fake.AddFirewall(fw); err != nil {
			t.Fatalf("fix %s: %v", line, err)
		}
		names = append(names, fw.GetName())
	}
	return names
}

// The emulator's default network, as GCE creates it: default-allow-internal
// admits 10.128.0.0/9 on every port. preflight warns, for both ports, that
// the podVMs and the rest of the VPC reach them; its fixes, applied as
// printed, leave the ports to the nodes alone, podVM↔podVM closed.
func TestDefaultAllowInternalExposesPodVMs(t *testing.T) {
	fake := readyProject(t)
	cfg := baseConfig(fake)
	o := Options{Cfg: cfg, NodeTags: []string{"gke-node"}}
	rs := Run(ctx(t), o, quiet())
	var fix string
	for _, port := range []string{"tcp:15150", "udp:4789"} {
		r := mustFind(t, rs, "firewall "+port+" others→podVMs")
		if r.Status != Warn || !strings.Contains(r.Detail, "other podVMs (10.128.0.0/20) by default-allow-internal") ||
			!strings.Contains(r.Detail, "10.128.0.0/9 by default-allow-internal") {
			t.Errorf("%s: %s %s", r.Check, r.Status, r.Detail)
		}
		fix = r.Fix
	}
	for _, line := range strings.Split(fix, "\n") {
		if strings.Contains(line, "--allow=") && (strings.Contains(line, "--source-ranges=") || strings.Contains(line, "--source-tags=caa-gcp-t4-podvm")) {
			t.Errorf("an allow fix admits by range or the podVM tag: %s", line)
		}
	}
	if got := strings.Join(applyFixes(t, fake, fix), ","); got != "caa-podvms-deny-podvms,caa-nodes-to-podvms,caa-others-deny-podvms" {
		t.Errorf("fixes %s", got)
	}
	rs = Run(ctx(t), o, quiet())
	for _, prefix := range []string{"firewall tcp:15150 others→podVMs", "firewall udp:4789 others→podVMs", "firewall tcp:15150 nodes→podVMs", "firewall udp:4789 nodes→podVMs", "firewall udp:4789 podVMs→nodes"} {
		if r := mustFind(t, rs, prefix); r.Status != Pass {
			t.Errorf("after the fixes, %s: %s %s", r.Check, r.Status, r.Detail)
		}
	}
}

// The nodes' allow alone, without the denies, admits no podVM: it names
// the nodes by tag. With the nodes assumed in the podVMs' subnet and no
// tags known, the fix says NODE_TAG rather than the podVMs' own range.
func TestFixesNeverAdmitPodVMToPodVM(t *testing.T) {
	fake := readyProject(t)
	if err := fake.DeleteFirewall("default-allow-internal"); err != nil {
		t.Fatal(err)
	}
	o := Options{Cfg: baseConfig(fake), NodeTags: []string{"gke-node"}}
	r := mustFind(t, Run(ctx(t), o, quiet()), "firewall tcp:15150 nodes→podVMs")
	if r.Status != Fail || !strings.Contains(r.Fix, "--source-tags=gke-node --target-tags=caa-gcp-t4-podvm") {
		t.Fatalf("%s: %s, fix %q", r.Check, r.Status, r.Fix)
	}
	applyFixes(t, fake, r.Fix)
	rs := Run(ctx(t), o, quiet())
	for _, prefix := range []string{"firewall tcp:15150 others→podVMs", "firewall udp:4789 others→podVMs", "firewall tcp:15150 nodes→podVMs"} {
		if r := mustFind(t, rs, prefix); r.Status != Pass {
			t.Errorf("%s: %s %s", r.Check, r.Status, r.Detail)
		}
	}
	// Unknown nodes in the podVMs' subnet: never the subnet as a source.
	for _, r := range Run(ctx(t), Options{Cfg: baseConfig(fake)}, quiet()) {
		for _, line := range strings.Split(r.Fix, "\n") {
			if strings.Contains(line, "--allow=") && strings.Contains(line, "--source-ranges=10.128.0.0/20") {
				t.Errorf("%s: fix admits the podVM subnet: %s", r.Check, line)
			}
		}
	}
	// An allow of the podVMs' subnet someone else made is reported.
	if err := fake.AddFirewall(allow("wide-internal", 2000, "10.128.0.0/20", nil, "udp:4789")); err != nil {
		t.Fatal(err)
	}
	if err := fake.DeleteFirewall("caa-nodes-to-podvms"); err != nil {
		t.Fatal(err)
	}
	r = mustFind(t, Run(ctx(t), o, quiet()), "firewall udp:4789 others→podVMs")
	if r.Status != Warn || !strings.Contains(r.Detail, "other podVMs (10.128.0.0/20) by wide-internal") {
		t.Errorf("%s: %s %s", r.Check, r.Status, r.Detail)
	}
}
