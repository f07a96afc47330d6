// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// verifyTimeout bounds ConfigVerifier's API checks; the adaptor calls it
// at start-up and must not hang there.
const verifyTimeout = 30 * time.Second

// ConfigVerifier checks the configuration and each profile's provisioning
// models and, when the API answers, that the images (with the guest OS
// features each profile's VM needs) and the template exist and that every
// zone offers the accelerators of the automatic profiles. An unreachable
// API (no route, no DNS, a timeout) is logged, not fatal: the adaptor may
// start before the node's network is ready; any other failure, refused
// credentials included, is. The failure is logged here because CAA v0.22.0
// does not: its server returns another error variable and keeps running
// without its socket (neighbours.md, "ran").
func (p *Provider) ConfigVerifier() error {
	err := p.verifyConfig()
	if err != nil {
		p.log.Printf("ConfigVerifier failed: the adaptor will not serve peer pods until this is fixed: %v", err)
	}
	return err
}

func (p *Provider) verifyConfig() error {
	if err := p.cfg.Validate(); err != nil {
		return err
	}
	// Validate lets an empty ID pass (peerpod-ctrl and the read-only tools
	// need none), but an adaptor verifying its configuration is about to
	// create podVMs, and CreateInstance refuses every one without it.
	if p.cfg.ClusterID == "" {
		return errNoClusterID()
	}
	// Provisioning models against what GCE sells per machine type; no
	// API needed (NewProvider checked it too, this names it again for an
	// adaptor run with CLOUD_CONFIG_VERIFY).
	if err := p.cfg.checkCatalog(p.catalog); err != nil {
		return err
	}
	if err := p.enter(); err != nil {
		return err
	}
	defer p.inflight.Done()
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	defer cancel()
	err := p.verifyAPI(ctx)
	var found *verifyError
	if err != nil && unreachable(err) && !errors.As(err, &found) {
		p.log.Printf("GCE API not reachable, skipping the API checks: %v", err)
		return nil
	}
	return err
}

// verifyError is a finding from what the API answered (as opposed to the
// API not answering), which must fail the verifier.
type verifyError struct{ error }

func (e *verifyError) Unwrap() error { return e.error }

// unreachable reports a failure to reach the API at all, as opposed to an
// answer (a googleapi error) or refused credentials (a token exchange
// that failed), which retrying at the next start would not fix.
func unreachable(err error) bool {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, context.DeadlineExceeded)
}

func (p *Provider) verifyAPI(ctx context.Context) error {
	if p.cfg.InstanceTemplate != "" {
		props, err := p.templateProperties(ctx)
		if err != nil {
			return err
		}
		if _, err := p.cfg.templateModels(props); err != nil {
			return &verifyError{err}
		}
		// At start, as at each create (the template may change between).
		if err := checkTemplateCache(props); err != nil {
			return &verifyError{err}
		}
		ref, _ := parseTemplateURL(p.cfg.InstanceTemplate, p.cfg.ProjectID)
		zones, err := (createPlan{describe: "GCP_INSTANCE_TEMPLATE " + ref.url(), templateRegion: ref.region}).usableZones(p.cfg.Zones(), &attempts{})
		if err != nil {
			return &verifyError{err}
		}
		return p.verifyAccelerators(ctx, zones, acceleratorNames(props))
	}
	images := map[string]*computepb.Image{}
	img, err := p.lookupImage(ctx, p.cfg.ImageName)
	if err != nil {
		return fmt.Errorf("PODVM_IMAGE_NAME %s: %w", p.cfg.ImageName, err)
	}
	images[p.cfg.ImageName] = img
	if int64(p.cfg.RootVolumeSize) < img.GetDiskSizeGb() {
		p.log.Printf("ROOT_VOLUME_SIZE %d is below the image size, using the image size %d GB", p.cfg.RootVolumeSize, img.GetDiskSizeGb())
	}
	if err := p.verifyProfileImages(ctx, images); err != nil {
		return err
	}
	if err := p.verifyCacheImages(ctx, images); err != nil {
		return err
	}
	p.mu.Lock()
	for name, img := range images {
		p.imageSizeGB[name] = img.GetDiskSizeGb()
	}
	p.mu.Unlock()
	// Every GPU the configuration may create, attached or bundled: those
	// fit chooses must be in every zone; a zone without one only pods
	// naming it get is logged, so that an explicit profile (h100-cc) does
	// not stop the adaptor serving T4 pods.
	var names []string
	for _, u := range p.cfg.GPUUses(p.catalog) {
		if u.Automatic {
			names = append(names, u.Family.Accelerator)
			continue
		}
		if err := p.verifyAccelerators(ctx, p.cfg.Zones(), []string{u.Family.Accelerator}); err != nil {
			if !errors.Is(err, errNoAccelerator) {
				return err
			}
			p.log.Printf("%s (%s): %v; pods naming it are created only in zones that offer it", u.Family.Accelerator, strings.Join(u.Via, ", "), err)
		}
	}
	return p.verifyAccelerators(ctx, p.cfg.Zones(), names)
}

// errNoAccelerator marks a zone that does not offer an accelerator.
var errNoAccelerator = errors.New("accelerator not offered in the zone")

// verifyProfileImages checks every profile's image (each looked up once)
// for the guest OS features its VM needs: GCE refuses a TDX VM from an
// image without TDX_CAPABLE, a gVNIC NIC without GVNIC, any Confidential VM
// without UEFI_COMPATIBLE. A confidential profile with no image of its own
// is logged, not fatal: it is refused only when a pod names it.
func (p *Provider) verifyProfileImages(ctx context.Context, images map[string]*computepb.Image) error {
	for _, pr := range p.catalog.Profiles() {
		image, err := p.cfg.imageFor(pr, "")
		if err != nil {
			p.log.Printf("profile %s has no usable image; pods naming it are refused until one is configured: %v", pr.Name, err)
			continue
		}
		need := p.cfg.guestOSFeatures(pr)
		if len(need) == 0 {
			continue
		}
		img, ok := images[image]
		if !ok {
			if img, err = p.lookupImage(ctx, image); err != nil {
				return fmt.Errorf("profile %s: image %s: %w", pr.Name, image, err)
			}
			images[image] = img
		}
		var missing []string
		for _, f := range need {
			if !hasFeature(img, f) {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			return &verifyError{fmt.Errorf("profile %s (%s): image %s lacks guest OS feature(s) %s; recreate it with --guest-os-features=%s, or set GCP_PROFILE_IMAGES=%s=IMAGE",
				pr.Name, catalog.Describe(pr), image, strings.Join(missing, ", "), strings.Join(need, ","), pr.Name)}
		}
	}
	return nil
}

func hasFeature(img *computepb.Image, feature string) bool {
	for _, f := range img.GetGuestOsFeatures() {
		if f.GetType() == feature {
			return true
		}
	}
	return false
}

// acceleratorNames lists a template's accelerator types by name: those it
// attaches, and the one its machine type bundles.
func acceleratorNames(props *computepb.InstanceProperties) []string {
	var names []string
	for _, a := range props.GetGuestAccelerators() {
		names = append(names, lastSegment(a.GetAcceleratorType()))
	}
	if s, ok := catalog.LookupBundled(lastSegment(props.GetMachineType())); ok && !slices.Contains(names, s.BundledAccelerator) {
		names = append(names, s.BundledAccelerator)
	}
	return names
}

func (p *Provider) verifyAccelerators(ctx context.Context, zones, names []string) error {
	for _, zone := range zones {
		for _, name := range names {
			_, err := p.accelerators.Get(ctx, &computepb.GetAcceleratorTypeRequest{Project: p.cfg.ProjectID, Zone: zone, AcceleratorType: name})
			var ge *googleapi.Error
			if errors.As(err, &ge) && ge.Code == 404 {
				return fmt.Errorf("GCP_ZONE/GCP_ZONES: zone %s has no %s; pick zones that offer it (gcloud compute accelerator-types list --filter=name=%s): %w: %w", zone, name, name, errNoAccelerator, err)
			}
			if err != nil {
				return fmt.Errorf("checking %s in %s: %w", name, zone, err)
			}
		}
	}
	return nil
}

// imageRef is a parsed PODVM_IMAGE_NAME.
type imageRef struct {
	project, name, family string
}

// path is the image in the one form the provider compares and sends:
// projects/P/global/images/NAME or projects/P/global/images/family/F. GCE
// accepts this partial URL as sourceImage
// (AttachedDiskInitializeParams.sourceImage in the discovery document).
func (r imageRef) path() string {
	if r.family != "" {
		return "projects/" + r.project + "/global/images/family/" + r.family
	}
	return "projects/" + r.project + "/global/images/" + r.name
}

// computeHosts are the hosts whose full image URLs are accepted: the
// Compute Engine API's own and the older one its resources' selfLinks
// used. Any other host is refused, so that the image compared is the one
// sent.
var computeHosts = []string{"https://compute.googleapis.com/compute/v1/", "https://www.googleapis.com/compute/v1/"}

// imageNameRE is GCE's name syntax for images and image families
// (compute/docs/naming-resources: RFC 1035, at most 63 characters);
// imageProjectRE is the shape of a project ID (domain-scoped ones,
// example.com:proj, included), looser than projectRE's length rule so that
// short test projects parse. Together they keep a pod's annotation from
// smuggling separators, spaces or newlines into a log line or a request.
var (
	imageNameRE    = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	imageProjectRE = regexp.MustCompile(`^([a-z0-9][-a-z0-9.]{0,61}:)?[a-z0-9][-a-z0-9]{0,62}$`)
)

// parseImage understands the image forms GCE accepts, including image
// families (…/global/images/family/F): a bare name (of the provider's
// project), global/images/…, projects/P/global/images/…, and the full URL
// on Compute Engine's own hosts.
func (c *Config) parseImage(image string) (imageRef, error) {
	return c.parseImageFor("PODVM_IMAGE_NAME", image)
}

// parseImageFor is parseImage with the setting its errors name.
func (c *Config) parseImageFor(setting, image string) (imageRef, error) {
	rest, full := image, false
	for _, h := range computeHosts {
		if r, ok := strings.CutPrefix(image, h); ok {
			rest, full = r, true
			break
		}
	}
	switch {
	case full:
	case !strings.Contains(image, "/"):
		rest = "projects/" + c.ProjectID + "/global/images/" + image
	case strings.HasPrefix(image, "global/"):
		rest = "projects/" + c.ProjectID + "/" + image
	case strings.HasPrefix(image, "/projects/"):
		rest = image[1:]
	}
	parts := strings.Split(rest, "/")
	var ref imageRef
	switch {
	case len(parts) == 5 && parts[0] == "projects" && parts[2] == "global" && parts[3] == "images":
		ref = imageRef{project: parts[1], name: parts[4]}
	case len(parts) == 6 && parts[0] == "projects" && parts[2] == "global" && parts[3] == "images" && parts[4] == "family":
		ref = imageRef{project: parts[1], family: parts[5]}
	default:
		return imageRef{}, fmt.Errorf("%s: %q is not an image; use a name, projects/P/global/images/NAME or projects/P/global/images/family/FAMILY", setting, image)
	}
	if !imageProjectRE.MatchString(ref.project) || !imageNameRE.MatchString(ref.name+ref.family) {
		return imageRef{}, fmt.Errorf("%s: %q is not an image: a project ID and an image or family name are lowercase letters, digits and '-'", setting, image)
	}
	return ref, nil
}

// lookupImage reads an image (or its family's newest).
func (p *Provider) lookupImage(ctx context.Context, image string) (*computepb.Image, error) {
	ref, err := p.cfg.parseImage(image)
	if err != nil {
		return nil, err
	}
	if ref.family != "" {
		return p.images.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: ref.project, Family: ref.family})
	}
	return p.images.Get(ctx, &computepb.GetImageRequest{Project: ref.project, Image: ref.name})
}

// lastSegment is the name at the end of a resource URL.
func lastSegment(s string) string {
	return s[strings.LastIndex(s, "/")+1:]
}
