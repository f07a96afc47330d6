// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// CacheDeviceName is the cache disk's device name, and the label of the
// filesystem gcp-t4 cache build puts on it: the podVM will find the disk
// by that label (/dev/disk/by-label/, systemd's udev rules), which holds
// under QEMU too, rather than by GCE's by-id link, which needs the guest
// environment's udev rules.
const CacheDeviceName = "caa-gcp-t4-cache"

// A podVM pulls its workload's image inside the guest and fetches its
// weights, through Cloud NAT, on every start (docs/cache.md). A cache
// image moves those bytes to a disk in the podVM's own zone: every podVM
// of a profile gets a second disk created from the image, as its boot disk
// is. A disk per VM from a global image works in every zone the provider
// falls back to, where one shared read-only disk is one zone's only, and
// needs no attach bookkeeping; the guest mounts it read-only and checks
// every layer by digest (image-rs), so what the disk holds is never
// trusted. Only images the admin configured are used: a pod cannot name
// one.

// The cache disk's integrity: gcp-t4 cache build -disk puts a dm-verity
// hash tree after the disk's filesystem, and the podVM opens the disk only
// through dm-verity, with the root hash and hash offset the admin's
// configuration gives (GCP_CACHE_VERITY, a profile's cacheVerity, or the
// template's own metadata), passed in the podVM's metadata under
// CacheVerityMetadata. A pod sets none of them. So a changed byte anywhere
// on the disk, or another disk, fails the read instead of reaching the
// mirror or image-rs's store (whose hits image-rs does not check again).

// CacheVerityMetadata is the podVM metadata key holding the cache disk's
// dm-verity value, in GCP_CACHE_VERITY's form.
const CacheVerityMetadata = "caa-gcp-t4-cache-verity"

// cacheVerityForm is root=<sha256 root hash, hex>,offset=<bytes>.
var cacheVerityForm = regexp.MustCompile(`^root=[0-9a-f]{64},offset=[0-9]{1,16}$`)

// checkCacheVerity checks a cache image's dm-verity value: required with
// the image, meaningless without it, and of the form cache build prints
// with its hash tree after at least one 4 KiB block of filesystem.
func checkCacheVerity(imageSetting, image, setting, value string) error {
	switch {
	case image == "" && value == "":
		return nil
	case image == "":
		return fmt.Errorf("%s is set without %s: it is the dm-verity value of that cache image; set both or neither", setting, imageSetting)
	case value == "":
		return fmt.Errorf("%s is set without %s: the podVM opens a cache disk only through dm-verity; set %s to the value gcp-t4 cache build -disk printed for %s (root=…,offset=…, also in the .verity file beside the disk)", imageSetting, setting, setting, image)
	}
	if !cacheVerityForm.MatchString(value) {
		return fmt.Errorf("%s=%q is not root=<64 lowercase hex>,offset=<bytes>: set it to the value gcp-t4 cache build -disk printed for %s", setting, value, image)
	}
	off, _ := strconv.ParseInt(value[strings.LastIndexByte(value, '=')+1:], 10, 64)
	if off < 4096 || off%4096 != 0 {
		return fmt.Errorf("%s: offset=%d is not a whole number of 4096-byte blocks after the filesystem: set it to the value gcp-t4 cache build -disk printed for %s", setting, off, image)
	}
	return nil
}

// cacheVerityFor is the dm-verity value of a profile's cache disk.
func (c *Config) cacheVerityFor(p catalog.Profile) string {
	if p.CacheImage != "" {
		return p.CacheVerity
	}
	return c.CacheVerity
}

// checkTemplateCache refuses a template whose cache disk has no valid
// dm-verity value in its own metadata: the podVM would not open it. The
// admin writes both into the template; the provider adds neither.
func checkTemplateCache(props *computepb.InstanceProperties) error {
	disk := ""
	for _, d := range props.GetDisks() {
		if d.GetDeviceName() == CacheDeviceName {
			disk = "template"
		}
	}
	value := ""
	for _, it := range props.GetMetadata().GetItems() {
		if it.GetKey() == CacheVerityMetadata {
			value = it.GetValue()
		}
	}
	return checkCacheVerity("the template's "+CacheDeviceName+" disk", disk, "the template's "+CacheVerityMetadata+" metadata", value)
}

// validateCacheImage checks GCP_CACHE_IMAGE's form and its dm-verity
// value. An instance template names its own disks: the cache disk then
// belongs in the template, with its value in the template's metadata.
func (c *Config) validateCacheImage() error {
	if c.InstanceTemplate != "" && c.CacheImage != "" {
		return fmt.Errorf("GCP_CACHE_IMAGE is for profile podVMs, and GCP_INSTANCE_TEMPLATE is set: add the cache disk to the template instead (gcloud compute instance-templates create … --create-disk=image=%s,device-name=%s,auto-delete=yes --metadata=%s=<its dm-verity value>) and unset GCP_CACHE_IMAGE and GCP_CACHE_VERITY", c.CacheImage, CacheDeviceName, CacheVerityMetadata)
	}
	if c.InstanceTemplate != "" && c.CacheVerity != "" {
		return fmt.Errorf("GCP_CACHE_VERITY is for GCP_CACHE_IMAGE, and GCP_INSTANCE_TEMPLATE is set: put the value in the template's %s metadata beside its cache disk, and unset GCP_CACHE_VERITY", CacheVerityMetadata)
	}
	if c.CacheImage != "" {
		if _, err := c.parseImageFor("GCP_CACHE_IMAGE", c.CacheImage); err != nil {
			return err
		}
	}
	return checkCacheVerity("GCP_CACHE_IMAGE", c.CacheImage, "GCP_CACHE_VERITY", c.CacheVerity)
}

// cacheImageFor is a profile's cache image: its own, else
// GCP_CACHE_IMAGE; "" for none.
func (c *Config) cacheImageFor(p catalog.Profile) string {
	if p.CacheImage != "" {
		return p.CacheImage
	}
	return c.CacheImage
}

// cacheDisk is the cache disk of a profile's podVM in zone, or nil: made
// from the cache image at the image's size (GCE's default for a disk from
// an image), of the boot disk's type and interface (an NVMe-only machine
// takes no SCSI disk), and deleted with the VM. It is attached READ_WRITE,
// GCE's default: a disk attached READ_ONLY cannot be auto-deleted (the
// Compute API reference, PreservedStatePreservedDisk.autoDelete), and this
// one is the VM's own; the podVM mounts it read-only.
func (c *Config) cacheDisk(p catalog.Profile, zone string, iface *string) *computepb.AttachedDisk {
	image := c.cacheImageFor(p)
	if image == "" {
		return nil
	}
	d := &computepb.AttachedDisk{
		AutoDelete: proto.Bool(true),
		DeviceName: proto.String(CacheDeviceName),
		InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: proto.String(c.imageURL(image)),
			DiskType:    proto.String(fmt.Sprintf("zones/%s/diskTypes/%s", zone, c.diskType(p))),
		},
	}
	if iface != nil {
		d.Interface = proto.String(*iface)
	}
	return d
}

// cacheImages lists the cache images the configuration uses, each once:
// GCP_CACHE_IMAGE and the profiles' own.
func (c *Config) cacheImages(cat *catalog.Catalog) []string {
	var out []string
	seen := map[string]bool{}
	add := func(image string) {
		if image != "" && !seen[image] {
			seen[image] = true
			out = append(out, image)
		}
	}
	add(c.CacheImage)
	if cat != nil {
		for _, p := range cat.Profiles() {
			add(p.CacheImage)
		}
	}
	return out
}

// verifyCacheImages looks up every cache image once: one that does not
// exist, or that the adaptor may not read, would fail every create.
func (p *Provider) verifyCacheImages(ctx context.Context, images map[string]*computepb.Image) error {
	for _, image := range p.cfg.cacheImages(p.catalog) {
		if _, ok := images[image]; ok {
			continue
		}
		img, err := p.lookupImage(ctx, image)
		if err != nil {
			return &verifyError{fmt.Errorf("cache image %s (GCP_CACHE_IMAGE or a profile's cacheImage): %w; build it with gcp-t4's cache image guide (docs/cache.md) or unset it", image, err)}
		}
		if img.GetStatus() != "READY" {
			return &verifyError{fmt.Errorf("cache image %s is %s, not READY: GCE creates no disk from it yet", image, img.GetStatus())}
		}
		images[image] = img
	}
	return nil
}
