// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
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

// validateCacheImage checks GCP_CACHE_IMAGE's form. An instance template
// names its own disks: the cache disk then belongs in the template.
func (c *Config) validateCacheImage() error {
	if c.CacheImage == "" {
		return nil
	}
	if c.InstanceTemplate != "" {
		return fmt.Errorf("GCP_CACHE_IMAGE is for profile podVMs, and GCP_INSTANCE_TEMPLATE is set: add the cache disk to the template instead (gcloud compute instance-templates create … --create-disk=image=%s,device-name=%s,auto-delete=yes) and unset GCP_CACHE_IMAGE", c.CacheImage, CacheDeviceName)
	}
	if _, err := c.parseImageFor("GCP_CACHE_IMAGE", c.CacheImage); err != nil {
		return err
	}
	return nil
}

// cacheImageFor is a profile's cache image: its own, else
// GCP_CACHE_IMAGE; "" for none.
func (c *Config) cacheImageFor(p Profile) string {
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
func (c *Config) cacheDisk(p Profile, zone string, iface *string) *computepb.AttachedDisk {
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
func (c *Config) cacheImages(catalog *Catalog) []string {
	var out []string
	seen := map[string]bool{}
	add := func(image string) {
		if image != "" && !seen[image] {
			seen[image] = true
			out = append(out, image)
		}
	}
	add(c.CacheImage)
	if catalog != nil {
		for _, p := range catalog.profiles {
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
