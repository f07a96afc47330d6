// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"io"
	"log"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// A cache image gives every profile podVM a second disk made from it, in
// the zone the podVM lands in (a fallback zone too: GCE takes a disk type
// only from the instance's own zone), at the image's size, of the boot
// disk's type, deleted with the VM, named so the guest finds it; a
// profile's cacheImage overrides GCP_CACHE_IMAGE. The emulator accepts it
// as GCE does (validateDisks: the image exists and is READY, the disk type
// is the instance's zone's).
func TestCacheDiskFromImage(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) {
		c.CacheImage = "podvm-cache-llm"
		c.FallbackZones = commaList{"us-central1-b"}
		c.Profiles = `
profiles:
- name: t4-1-other-cache
  machineType: n1-standard-4
  accelerator: nvidia-tesla-t4
  acceleratorCount: 1
  explicit: true
  cacheImage: projects/demo-project/global/images/family/podvm-cache-other
`
	})
	fake.AddImage("demo-project", &computepb.Image{Name: proto.String("podvm-cache-llm"), DiskSizeGb: proto.Int64(120)})
	fake.AddImage("demo-project", &computepb.Image{Name: proto.String("podvm-cache-other-1"), Family: proto.String("podvm-cache-other"), DiskSizeGb: proto.Int64(40)})
	if err := p.ConfigVerifier(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fake.SetStockout("us-central1-a", true)
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	cache := cacheDiskOf(t, fake.Instances(), inst.Name)
	if !strings.HasSuffix(cache.GetSource(), "/zones/us-central1-b/disks/"+inst.Name+"-1") || cache.GetDiskSizeGb() != 120 || !cache.GetAutoDelete() || cache.GetBoot() || cache.GetMode() != "READ_WRITE" {
		t.Errorf("cache disk: source %s, %d GB, autoDelete %v, boot %v, mode %s", cache.GetSource(), cache.GetDiskSizeGb(), cache.GetAutoDelete(), cache.GetBoot(), cache.GetMode())
	}
	var body string
	for _, c := range fake.Calls() {
		if c.Kind == "instances.insert" && strings.Contains(c.Path, "us-central1-b") {
			body = string(c.Body)
		}
	}
	for _, want := range []string{`"sourceImage":"projects/demo-project/global/images/podvm-cache-llm"`, `"diskType":"zones/us-central1-b/diskTypes/pd-balanced"`} {
		if !strings.Contains(strings.ReplaceAll(body, " ", ""), want) {
			t.Errorf("insert body lacks %s: %s", want, body)
		}
	}
	fake.SetStockout("us-central1-a", false)
	other, err := p.CreateInstance(ctx, "llm-1", strings.Repeat("c", 64), cloudConfig("llm-1"), provider.InstanceTypeSpec{InstanceType: "t4-1-other-cache", GPUs: 1, VCPUs: 2, Memory: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if c := cacheDiskOf(t, fake.Instances(), other.Name); c.GetDiskSizeGb() != 40 {
		t.Errorf("the profile's cache image (40 GB) was not used: %d GB", c.GetDiskSizeGb())
	}
	for _, id := range []string{inst.ID, other.ID} {
		if err := p.DeleteInstance(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fake.Instances()); n != 0 {
		t.Fatalf("%d VMs left", n)
	}
}

// Without a cache image a podVM has its boot disk only.
func TestNoCacheDiskByDefault(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range fake.Instances() {
		if vm.GetName() == inst.Name && len(vm.GetDisks()) != 1 {
			t.Fatalf("%d disks, want the boot disk only", len(vm.GetDisks()))
		}
	}
}

// A cache image that is missing, not READY, malformed or set beside a
// template is refused, naming the setting and the fix; a create whose
// cache image went away after the adaptor started fails as GCE refuses it
// and leaves no VM.
func TestCacheImageRefusals(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.CacheImage = "podvm-cache-missing" })
	err := p.ConfigVerifier()
	if err == nil || !strings.Contains(err.Error(), "cache image podvm-cache-missing") || !strings.Contains(err.Error(), "docs/cache.md") {
		t.Errorf("missing cache image: %v", err)
	}
	_, err = p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "podvm-cache-missing") {
		t.Errorf("create with a missing cache image: %v", err)
	}
	if n := len(fake.Instances()); n != 0 {
		t.Errorf("%d VMs left after the refused create", n)
	}

	fake.AddImage("demo-project", &computepb.Image{Name: proto.String("podvm-cache-pending"), DiskSizeGb: proto.Int64(10), Status: proto.String("PENDING")})
	p2, _ := newTestProviderOn(t, fake, func(c *Config) { c.CacheImage = "podvm-cache-pending" })
	if err := p2.ConfigVerifier(); err == nil || !strings.Contains(err.Error(), "PENDING, not READY") {
		t.Errorf("pending cache image: %v", err)
	}

	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.CacheImage = "projects/x/images/y" }, `GCP_CACHE_IMAGE: "projects/x/images/y" is not an image`},
		{func(c *Config) { c.CacheImage, c.InstanceTemplate, c.ImageName = "podvm-cache", "t4", "" }, "add the cache disk to the template instead"},
	} {
		cfg := validConfig()
		c.mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
	cfg := validConfig()
	cfg.Profiles = "profiles:\n- name: bad\n  machineType: n1-standard-4\n  cacheImage: a/b\n"
	if _, err := NewProvider(context.Background(), cfg, log.New(io.Discard, "", 0)); err == nil || !strings.Contains(err.Error(), "cacheImage (profile bad)") {
		t.Errorf("profile cacheImage: %v", err)
	}
}

func cacheDiskOf(t *testing.T, vms []*computepb.Instance, name string) *computepb.AttachedDisk {
	t.Helper()
	for _, vm := range vms {
		if vm.GetName() != name {
			continue
		}
		for _, d := range vm.GetDisks() {
			if d.GetDeviceName() == CacheDeviceName {
				return d
			}
		}
		t.Fatalf("%s has no %s disk: %v", name, CacheDeviceName, vm.GetDisks())
	}
	t.Fatalf("no VM %s", name)
	return nil
}
