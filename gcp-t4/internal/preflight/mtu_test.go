package preflight

import (
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// TestMTUOnGCEDefaultNetworkFails: the emulator's default network has
// GCE's default MTU, 1460; the pod tunnel's full packets are 1500 bytes
// there (CAA v0.22.0's 1450 cap plus VXLAN's 50), so preflight fails with
// the command that raises it, and passes once raised.
func TestMTUOnGCEDefaultNetworkFails(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	cfg := baseConfig(fake)
	rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "mtu default", Fail, "VPC MTU 1460 is too small for the pod tunnel", "gcloud compute networks update default --project=demo-project --mtu=1500")
	expect(t, rs, "mtu default", Fail, "full-size pod packets are 1500 bytes on a 1460-byte network", "only after a stop and start")
	for _, c := range []struct {
		mtu    int32
		status Status
		detail string
	}{{1499, Fail, "VPC MTU 1499 is too small"}, {1500, Pass, "pod interface gets MTU 1450"}, {8896, Pass, "VPC MTU 8896 holds"}, {1300, Fail, "min(1300, 1450) = 1300"}} {
		fake.SetNetworkMTU(c.mtu)
		expect(t, Run(ctx(t), Options{Cfg: cfg}, quiet()), "mtu default", c.status, c.detail, "")
	}
}

func TestTunnelMTU(t *testing.T) {
	for vpc, want := range map[int][2]int{1460: {1450, 1500}, 1500: {1450, 1500}, 8896: {1450, 1500}, 1400: {1400, 1450}} {
		if in, out := TunnelMTU(vpc); in != want[0] || out != want[1] {
			t.Errorf("TunnelMTU(%d) = %d, %d; want %v", vpc, in, out, want)
		}
	}
}
