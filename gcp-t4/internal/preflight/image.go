package preflight

import (
	"context"
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"
)

func (g *GCE) checkImage(ctx context.Context) Result {
	check := "image"
	if g.Cfg.InstanceTemplate != "" {
		return warn(check, "", "GCP_INSTANCE_TEMPLATE is set: the image comes from the template; not checked")
	}
	project, name, family, err := g.Cfg.ImageRef()
	if err != nil {
		return fail(check, "", "%v", err)
	}
	var img *computepb.Image
	what := "image " + name
	if family != "" {
		what = "image family " + family
		img, err = g.images.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: project, Family: family})
	} else {
		img, err = g.images.Get(ctx, &computepb.GetImageRequest{Project: project, Image: name})
	}
	check = "image " + g.Cfg.ImageName
	if err != nil {
		fix := ""
		if apiCode(err) == 404 {
			fix = packFix(project, name, family)
		}
		return fail(check, fix, "reading %s in project %s: %v", what, project, err)
	}
	switch img.GetDeprecated().GetState() {
	case "DEPRECATED", "OBSOLETE", "DELETED":
		return fail(check, "set PODVM_IMAGE_NAME to a current image", "%s is %s", img.GetName(), img.GetDeprecated().GetState())
	}
	if img.GetStatus() != "READY" {
		return fail(check, fmt.Sprintf("gcloud compute images describe %s --project=%s --format='value(status)'", img.GetName(), project), "%s is %s, not READY", img.GetName(), img.GetStatus())
	}
	uefi := false
	for _, f := range img.GetGuestOsFeatures() {
		uefi = uefi || f.GetType() == "UEFI_COMPATIBLE"
	}
	if !uefi {
		return fail(check, fmt.Sprintf("gcloud compute images create %s-uefi --project=%s --source-image=%s --source-image-project=%s --guest-os-features=%s   # then PODVM_IMAGE_NAME=%s-uefi", img.GetName(), project, img.GetName(), project, PackGuestOSFeatures, img.GetName()),
			"%s lacks the UEFI_COMPATIBLE guest OS feature: the podVM image boots with UEFI", img.GetName())
	}
	if size := img.GetDiskSizeGb(); size > int64(g.Cfg.RootVolumeSize) {
		return pass(check, "%s is READY and UEFI_COMPATIBLE; boot disks will be %d GB (its size, above ROOT_VOLUME_SIZE=%d)", img.GetName(), size, g.Cfg.RootVolumeSize)
	}
	return pass(check, "%s is READY and UEFI_COMPATIBLE", img.GetName())
}

// What podvm/scripts/gce-pack.sh gives the image it uploads (a test holds
// these to the script): its guest OS features, and the family it puts the
// image in unless GCE_IMAGE_FAMILY says otherwise.
const (
	PackGuestOSFeatures = "UEFI_COMPATIBLE,GVNIC,VIRTIO_SCSI_MULTIQUEUE"
	PackImageFamily     = "caa-gcp-t4-podvm"
)

// packFix builds the podVM image and has gce-pack.sh upload and create it
// under the name (or in the family) the provider is set to, as the build
// guide does: the script knows the tarball GCE wants, its features and a
// signed build's keys, which a hand-written images create would miss.
func packFix(project, name, family string) string {
	target := "GCE_IMAGE_NAME=" + name
	what := fmt.Sprintf("uploads gs://BUCKET/%s.tar.gz and creates image %s", name, name)
	if family != "" {
		// gce-pack.sh names the image caa-gcp-t4-podvm-KEY, in the family.
		target = "GCE_IMAGE_FAMILY=" + family
		what = fmt.Sprintf("uploads gs://BUCKET/caa-gcp-t4-podvm-KEY.tar.gz and creates image caa-gcp-t4-podvm-KEY in family %s", family)
	} else {
		what += " in family " + PackImageFamily
	}
	return fmt.Sprintf("make podvm-binaries && make podvm   # in a checkout of this repository; it prints the image's directory, podvm-KEY (docs/podvm-build-guide.md)\n"+
		"GCE_BUCKET=gs://BUCKET GCE_PROJECT=%s %s GCE_EXECUTE=1 podvm/scripts/gce-pack.sh ~/.cache/caa-gcp-t4/podvm-KEY   # %s, --guest-os-features=%s",
		project, target, what, PackGuestOSFeatures)
}
