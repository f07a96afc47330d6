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
			fix = fmt.Sprintf("make podvm   # then: gcloud compute images create %s --project=%s --source-uri=gs://BUCKET/podvm.tar.gz --guest-os-features=UEFI_COMPATIBLE", orDefault(name, family), project)
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
		return fail(check, fmt.Sprintf("gcloud compute images create %s-uefi --project=%s --source-image=%s --source-image-project=%s --guest-os-features=UEFI_COMPATIBLE   # then PODVM_IMAGE_NAME=%s-uefi", img.GetName(), project, img.GetName(), project, img.GetName()),
			"%s lacks the UEFI_COMPATIBLE guest OS feature: the podVM image boots with UEFI", img.GetName())
	}
	if size := img.GetDiskSizeGb(); size > int64(g.Cfg.RootVolumeSize) {
		return pass(check, "%s is READY and UEFI_COMPATIBLE; boot disks will be %d GB (its size, above ROOT_VOLUME_SIZE=%d)", img.GetName(), size, g.Cfg.RootVolumeSize)
	}
	return pass(check, "%s is READY and UEFI_COMPATIBLE", img.GetName())
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
