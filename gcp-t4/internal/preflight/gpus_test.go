package preflight

import (
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"google.golang.org/protobuf/proto"
)

func addImage(fake *gcefake.Server, name string, features ...string) {
	var fs []*computepb.GuestOsFeature
	for _, f := range features {
		fs = append(fs, &computepb.GuestOsFeature{Type: proto.String(f)})
	}
	fake.AddImage(fake.Project(), &computepb.Image{Name: proto.String(name), DiskSizeGb: proto.Int64(30), GuestOsFeatures: fs})
}

// preflight checks the zones and quota of every GPU the settings may
// create, from the provider's catalogue: a bundled H100 behind an explicit
// profile is checked and reported as a warning (only pods naming it need
// it), a bundled L4 the admin let fit choose is held to every zone.
func TestPreflightChecksBundledGPUs(t *testing.T) {
	fake := readyProject(t)
	addImage(fake, "podvm-tdx", "UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")
	cfg := baseConfig(fake)
	cfg.FallbackZones = []string{"us-central1-b"}
	cfg.ProfileImages = map[string]string{"h100-cc": "podvm-tdx"}
	rs := Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "accelerator nvidia-h100-80gb in us-central1-a", Pass, "offered", "")
	expect(t, rs, "accelerator nvidia-h100-80gb in us-central1-b", Warn, "pods naming profile h100-cc get it only in zones that do", "")
	expect(t, rs, "quota NVIDIA_H100_GPUS in us-central1", Warn, "only pods naming profile h100-cc need it", "--quota-id=NVIDIA-H100-GPUS-per-project-region")
	expect(t, rs, "accelerator nvidia-tesla-t4 in us-central1-b", Pass, "offered", "")

	fake.SetQuota("us-central1", "NVIDIA_L4_GPUS", 0)
	cfg = baseConfig(fake)
	cfg.FallbackZones = []string{"us-central1-f"}
	cfg.InstanceTypes = []string{"auto", "nvidia-l4"}
	cfg.MaxGPUsPerPod = 2
	rs = Run(ctx(t), Options{Cfg: cfg}, quiet())
	expect(t, rs, "accelerator nvidia-l4 in us-central1-a", Pass, "offered", "")
	expect(t, rs, "accelerator nvidia-l4 in us-central1-f", Fail, "zone us-central1-f does not offer nvidia-l4", "--filter='name=nvidia-l4'")
	expect(t, rs, "quota NVIDIA_L4_GPUS in us-central1", Fail, "NVIDIA_L4_GPUS limit is 0", "--quota-id=NVIDIA-L4-GPUS-per-project-region --preferred-value=2")
	if _, ok := find(rs, "accelerator nvidia-h100-80gb"); ok {
		t.Error("h100-cc without an image creates nothing, yet its zones were checked")
	}
}
