package gcpt4

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
)

// verifyTimeout bounds ConfigVerifier's API checks; the adaptor calls it
// at start-up and must not hang there.
const verifyTimeout = 30 * time.Second

// ConfigVerifier checks the configuration and, when the API answers, that
// the image and template exist and that every zone offers the accelerators
// of the automatic profiles. An unreachable API (no route, no DNS, a
// timeout) is logged, not fatal: the adaptor may start before the node's
// network is ready; any other failure, refused credentials included, is.
// The failure is logged here because CAA v0.22.0 does not: its server
// returns another error variable and keeps running without its socket
// (neighbours.md, "ran").
func (p *Provider) ConfigVerifier() error {
	err := p.verifyConfig()
	if err != nil {
		p.log.Error("ConfigVerifier failed: the adaptor will not serve peer pods until this is fixed", "err", err)
	}
	return err
}

func (p *Provider) verifyConfig() error {
	if err := p.cfg.Validate(); err != nil {
		return err
	}
	if err := p.enter(); err != nil {
		return err
	}
	defer p.inflight.Done()
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	defer cancel()
	err := p.verifyAPI(ctx)
	if err != nil && unreachable(err) {
		p.log.Warn("GCE API not reachable, skipping the API checks", "err", err)
		return nil
	}
	return err
}

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
		return p.verifyAccelerators(ctx, acceleratorNames(props))
	}
	img, err := p.lookupImage(ctx)
	if err != nil {
		return fmt.Errorf("PODVM_IMAGE_NAME %s: %w", p.cfg.ImageName, err)
	}
	p.mu.Lock()
	p.imageSizeGB = img.GetDiskSizeGb()
	p.mu.Unlock()
	if int64(p.cfg.RootVolumeSize) < img.GetDiskSizeGb() {
		p.log.Info("ROOT_VOLUME_SIZE is below the image size, using the image size", "rootVolumeSize", p.cfg.RootVolumeSize, "imageSizeGB", img.GetDiskSizeGb())
	}
	var names []string
	for _, pr := range p.catalog.Profiles() {
		if !pr.Explicit && pr.Accelerator != "" && !contains(names, pr.Accelerator) {
			names = append(names, pr.Accelerator)
		}
	}
	return p.verifyAccelerators(ctx, names)
}

// acceleratorNames lists a template's attached accelerator types by name.
func acceleratorNames(props *computepb.InstanceProperties) []string {
	var names []string
	for _, a := range props.GetGuestAccelerators() {
		names = append(names, lastSegment(a.GetAcceleratorType()))
	}
	return names
}

func (p *Provider) verifyAccelerators(ctx context.Context, names []string) error {
	for _, zone := range p.cfg.Zones() {
		for _, name := range names {
			_, err := p.accelerators.Get(ctx, &computepb.GetAcceleratorTypeRequest{Project: p.cfg.ProjectID, Zone: zone, AcceleratorType: name})
			var ge *googleapi.Error
			if errors.As(err, &ge) && ge.Code == 404 {
				return fmt.Errorf("GCP_ZONE/GCP_ZONES: zone %s has no %s; pick zones that offer it (gcloud compute accelerator-types list --filter=name=%s): %w", zone, name, name, err)
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

// parseImage understands the image forms GCE accepts, including
// image families (…/global/images/family/F).
func (c *Config) parseImage(image string) (imageRef, error) {
	rest := c.imageURL(image)
	if i := strings.Index(rest, "/compute/v1/"); i >= 0 {
		rest = rest[i+len("/compute/v1/"):]
	}
	if strings.HasPrefix(rest, "global/") {
		rest = "projects/" + c.ProjectID + "/" + rest
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 5 && parts[0] == "projects" && parts[2] == "global" && parts[3] == "images":
		return imageRef{project: parts[1], name: parts[4]}, nil
	case len(parts) == 6 && parts[0] == "projects" && parts[2] == "global" && parts[3] == "images" && parts[4] == "family":
		return imageRef{project: parts[1], family: parts[5]}, nil
	}
	return imageRef{}, fmt.Errorf("PODVM_IMAGE_NAME: %q is not an image; use a name, projects/P/global/images/NAME or projects/P/global/images/family/FAMILY", image)
}

// lookupImage reads the configured image (or its family's newest).
func (p *Provider) lookupImage(ctx context.Context) (*computepb.Image, error) {
	ref, err := p.cfg.parseImage(p.cfg.ImageName)
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
