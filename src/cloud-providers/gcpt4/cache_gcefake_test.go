// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
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
		c.CacheImage, c.CacheVerity = "podvm-cache-llm", testCacheVerity
		c.FallbackZones = commaList{"us-central1-b"}
		c.Profiles = `
profiles:
- name: t4-1-other-cache
  machineType: n1-standard-4
  accelerator: nvidia-tesla-t4
  acceleratorCount: 1
  explicit: true
  cacheImage: projects/demo-project/global/images/family/podvm-cache-other
  cacheVerity: ` + otherCacheVerity + `
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
	// Each podVM is told its own disk's dm-verity value, and only by the
	// provider's metadata.
	for name, want := range map[string]string{inst.Name: testCacheVerity, other.Name: otherCacheVerity} {
		if got := metadataOf(fake.Instances(), name, CacheVerityMetadata); got != want {
			t.Errorf("%s: %s=%q, want %q", name, CacheVerityMetadata, got, want)
		}
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

// testCacheVerity and otherCacheVerity are dm-verity values of the form
// gcp-t4 cache build -disk prints.
const (
	testCacheVerity  = "root=0f3a5b7c9d1e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f1a,offset=10468982784"
	otherCacheVerity = "root=1e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f1a0f3a5b7c9d,offset=4194304"
)

func metadataOf(vms []*computepb.Instance, name, key string) string {
	for _, vm := range vms {
		if vm.GetName() != name {
			continue
		}
		for _, it := range vm.GetMetadata().GetItems() {
			if it.GetKey() == key {
				return it.GetValue()
			}
		}
	}
	return ""
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
	p, fake := newTestProvider(t, func(c *Config) { c.CacheImage, c.CacheVerity = "podvm-cache-missing", testCacheVerity })
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
	p2, _ := newTestProviderOn(t, fake, func(c *Config) { c.CacheImage, c.CacheVerity = "podvm-cache-pending", testCacheVerity })
	if err := p2.ConfigVerifier(); err == nil || !strings.Contains(err.Error(), "PENDING, not READY") {
		t.Errorf("pending cache image: %v", err)
	}

	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.CacheImage = "projects/x/images/y" }, `GCP_CACHE_IMAGE: "projects/x/images/y" is not an image`},
		{func(c *Config) { c.CacheImage, c.InstanceTemplate, c.ImageName = "podvm-cache", "t4", "" }, "add the cache disk to the template instead"},
		// The dm-verity value: required with the image, refused without
		// it, beside a template, malformed, or with an offset that is no
		// whole block after the filesystem.
		{func(c *Config) { c.CacheImage = "podvm-cache" }, "GCP_CACHE_IMAGE is set without GCP_CACHE_VERITY"},
		{func(c *Config) { c.CacheVerity = testCacheVerity }, "GCP_CACHE_VERITY is set without GCP_CACHE_IMAGE"},
		{func(c *Config) { c.CacheVerity, c.InstanceTemplate, c.ImageName = testCacheVerity, "t4", "" }, "template's caa-gcp-t4-cache-verity metadata"},
		{func(c *Config) { c.CacheImage, c.CacheVerity = "podvm-cache", "sha256:abc" }, `GCP_CACHE_VERITY="sha256:abc" is not root=<64 lowercase hex>,offset=<bytes>`},
		{func(c *Config) {
			c.CacheImage, c.CacheVerity = "podvm-cache", testCacheVerity[:5]+strings.ToUpper(testCacheVerity[5:69])+testCacheVerity[69:]
		}, "is not root="},
		{func(c *Config) { c.CacheImage, c.CacheVerity = "podvm-cache", testCacheVerity[:69]+",offset=4095" }, "offset=4095 is not a whole number of 4096-byte blocks"},
		{func(c *Config) { c.CacheImage, c.CacheVerity = "podvm-cache", testCacheVerity[:69]+",offset=0" }, "offset=0 is not a whole number"},
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
	for profile, want := range map[string]string{
		"  cacheImage: podvm-cache\n":                        "profile bad's cacheImage is set without profile bad's cacheVerity",
		"  cacheVerity: " + testCacheVerity + "\n":           "profile bad's cacheVerity is set without profile bad's cacheImage",
		"  cacheImage: podvm-cache\n  cacheVerity: root=1\n": `profile bad's cacheVerity="root=1" is not root=`,
	} {
		cfg := validConfig()
		cfg.Profiles = "profiles:\n- name: bad\n  machineType: n1-standard-4\n" + profile
		if _, err := NewProvider(context.Background(), cfg, log.New(io.Discard, "", 0)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("profile %q: %v, want %q", profile, err, want)
		}
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

// A template that attaches a cache disk carries its dm-verity value in its
// own metadata: without it, or with a malformed one, every create from the
// template is refused before an insert (the podVM would not open the
// disk); with it the podVM gets the template's value, and a pod's create
// cannot replace it.
func TestTemplateCacheDiskNeedsVerity(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	fake.AddImage("demo-project", &computepb.Image{Name: proto.String("podvm-cache-llm"), DiskSizeGb: proto.Int64(20)})
	template := func(name string, meta ...*computepb.Items) {
		fake.AddInstanceTemplate("", &computepb.InstanceTemplate{Name: proto.String(name), Properties: &computepb.InstanceProperties{
			MachineType: proto.String("n1-standard-4"),
			Disks: []*computepb.AttachedDisk{
				{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/demo-project/global/images/podvm-t4")}},
				{DeviceName: proto.String(CacheDeviceName), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/demo-project/global/images/podvm-cache-llm")}},
			},
			Metadata:          &computepb.Metadata{Items: meta},
			NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default")}},
		}})
	}
	item := func(v string) *computepb.Items {
		return &computepb.Items{Key: proto.String(CacheVerityMetadata), Value: proto.String(v)}
	}
	template("no-verity")
	template("bad-verity", item("root=abc,offset=1"))
	template("with-verity", item(testCacheVerity))
	for i, tc := range []struct{ template, want string }{
		{"no-verity", "the template's caa-gcp-t4-cache-verity metadata"},
		{"bad-verity", `the template's caa-gcp-t4-cache-verity metadata="root=abc,offset=1" is not root=`},
		{"with-verity", ""},
	} {
		p, _ := newTestProviderOn(t, fake, func(c *Config) { c.InstanceTemplate, c.ImageName = tc.template, "" })
		// The start-up check says it first, as it says a template's
		// other faults.
		if err := p.ConfigVerifier(); (tc.want != "") != (err != nil && strings.Contains(err.Error(), tc.want)) || (tc.want == "" && err != nil && strings.Contains(err.Error(), CacheVerityMetadata)) {
			t.Errorf("template %s: ConfigVerifier: %v, want %q", tc.template, err, tc.want)
		}
		name := fmt.Sprintf("cpu-%d", i)
		inst, err := p.CreateInstance(context.Background(), name, strings.Repeat(fmt.Sprint(i), 64), cloudConfig(name), provider.InstanceTypeSpec{})
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("template %s: %v, want %q", tc.template, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("template %s: %v", tc.template, err)
		}
		if got := metadataOf(fake.Instances(), inst.Name, CacheVerityMetadata); got != testCacheVerity {
			t.Errorf("template podVM: %s=%q", CacheVerityMetadata, got)
		}
	}
	if n := fake.CountCalls("instances.insert"); n != 1 {
		t.Errorf("%d inserts, want the one from the template with its value", n)
	}
}
