// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// DefaultNetworkTag is the network tag podVMs carry unless GCP_NETWORK_TAGS
// says otherwise; preflight's firewall fixes target it.
const DefaultNetworkTag = "caa-gcp-t4-podvm"

// ManagedByLabel marks every instance this provider creates, so that
// orphans can be found and collected without touching anything else.
const (
	ManagedByLabel   = "managed-by"
	ManagedByValue   = "caa-gcp-t4"
	SandboxLabel     = "caa-sandbox"
	PodLabel         = "caa-pod"
	ProfileLabel     = "caa-profile"
	SandboxMetadata  = "caa-sandbox-id"
	UserDataMetadata = "user-data"
)

// Config is the provider's configuration, from flags and env.
type Config struct {
	Credentials       string
	ProjectID         string
	Zone              string
	FallbackZones     commaList
	ImageName         string
	Network           string
	Subnetwork        string
	DiskType          string
	RootVolumeSize    int
	InstanceTemplate  string
	ProfilesFile      string
	Profiles          string
	ProvisioningModel string
	ServiceAccount    string
	Labels            provider.KeyValueFlag
	// NetworkTags go on every podVM (instance and template podVMs
	// alike), so firewall rules can target podVMs and nothing else.
	NetworkTags commaList
	// InstanceTypes is the shape allow-list (allow.go): profiles and
	// machine types a pod may name or fit may choose, "auto" for fit's
	// automatic shapes; empty allows the profiles and automatic shapes.
	InstanceTypes commaList
	// AllowedImages are images a pod's image annotation may name beyond
	// the configured ones.
	AllowedImages commaList
	// MaxGPUsPerPod, MaxVCPUsPerPod and MaxMemoryPerPod (MiB) cap every
	// pod; 0 is the largest allowed profile's.
	MaxGPUsPerPod, MaxVCPUsPerPod, MaxMemoryPerPod int
	// MaxGPUsTotal and MaxGPUsPerNamespace cap the GPUs of all of this
	// cluster's podVMs, and of one namespace's (totals.go); 0: no cap.
	MaxGPUsTotal, MaxGPUsPerNamespace int
	UsePublicIP                       bool
	Endpoint                          string
	// UnavailableTTL is how long a stocked-out offering is skipped.
	UnavailableTTL time.Duration
	// SpotFallback lets a Spot create fall back to standard capacity when
	// every zone is out of Spot capacity or Spot quota.
	SpotFallback bool
	// MutationsPerSecond limits inserts and deletes, so a burst of pods
	// stays under GCE's per-project write rate instead of meeting 429s.
	MutationsPerSecond float64
	// NICType is the podVMs' NIC type (GVNIC or VIRTIO_NET); empty leaves
	// GCE's default. C3 and A3 always get GVNIC.
	NICType string
	// ProfileImages are per-profile podVM images, profile=image.
	ProfileImages provider.KeyValueFlag
	// CacheImage is a GCE image holding a cache for the podVM (the
	// workload's image layers, its weights): every podVM of a profile gets
	// a second disk made from it (cache.go). A profile's cacheImage
	// overrides it.
	CacheImage string
	// CacheVerity is GCP_CACHE_IMAGE's dm-verity root hash and hash
	// offset, root=<hex>,offset=<bytes>, as gcp-t4 cache build -disk
	// prints it: the podVM opens the cache disk only through dm-verity
	// with these (cache.go).
	CacheVerity string
	// ClusterID, ClusterName and NodeName are labelled on every podVM
	// (identity.go): whose cluster and node made it.
	ClusterID, ClusterName, NodeName string
}

// commaList is a flag.Value of comma-separated names.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }

func (l *commaList) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

var (
	zoneRE    = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	projectRE = regexp.MustCompile(`^[a-z][-a-z0-9.:]{4,61}[a-z0-9]$`)
	// GCE label rules: keys start with a lowercase letter, keys and values
	// are lowercase letters (international ones too), digits, '_' and
	// '-', at most 63 characters (compute/docs/labeling-resources#requirements).
	labelKeyRE   = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValueRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
	// networkTagRE: RFC 1035, 1-63 characters (GCE, "Add network tags").
	networkTagRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// regionOf returns the region of a zone name (us-central1-a → us-central1).
func regionOf(zone string) string {
	if i := strings.LastIndex(zone, "-"); i > 0 {
		return zone[:i]
	}
	return zone
}

// autoZones reports whether fallback zones are to be discovered.
func (c *Config) autoZones() bool {
	return len(c.FallbackZones) == 1 && c.FallbackZones[0] == setting.ZonesAuto
}

// Validate checks the configuration without calling the API; every error
// names the environment variable to fix.
func (c *Config) Validate() error {
	if c.ProjectID == "" {
		return fmt.Errorf("GCP_PROJECT_ID (-gcp-project-id) is required: the project the podVMs run in")
	}
	if !projectRE.MatchString(c.ProjectID) {
		return fmt.Errorf("GCP_PROJECT_ID: %q is not a project ID (6-30 lowercase letters, digits, hyphens); use the ID, not the display name or number", c.ProjectID)
	}
	if c.Zone == "" {
		return fmt.Errorf("GCP_ZONE (-zone) is required, e.g. us-central1-a (a zone with %s)", catalog.DefaultFamily().Accelerator)
	}
	for i, z := range c.Zones() {
		name := "GCP_ZONE"
		if i > 0 {
			name = "GCP_ZONES"
		}
		if !zoneRE.MatchString(z) {
			return fmt.Errorf("%s: %q is not a zone name such as us-central1-a", name, z)
		}
		// A subnetwork given as a path is one region's: every zone must
		// be in it. A bare name is looked up in each zone's region.
		if r := c.subnetworkRegion(); r != "" && regionOf(z) != r {
			return fmt.Errorf("%s: %s is in region %s but GCP_SUBNETWORK %s is in %s; use zones of %s, or give GCP_SUBNETWORK as a bare name that exists in every zone's region", name, z, regionOf(z), c.Subnetwork, r, r)
		}
	}
	if c.InstanceTemplate == "" {
		if c.ImageName == "" {
			return fmt.Errorf("PODVM_IMAGE_NAME (-image-name) is required unless GCP_INSTANCE_TEMPLATE is set: the podVM image, e.g. projects/%s/global/images/podvm-t4", c.ProjectID)
		}
		if _, err := c.parseImage(c.ImageName); err != nil {
			return err
		}
		if c.Network == "" {
			return fmt.Errorf("GCP_NETWORK (-network) is required unless GCP_INSTANCE_TEMPLATE is set, e.g. global/networks/default")
		}
	} else if _, err := parseTemplateURL(c.InstanceTemplate, c.ProjectID); err != nil {
		return fmt.Errorf("GCP_INSTANCE_TEMPLATE: %w", err)
	}
	if strings.Contains(c.DiskType, "/") {
		return fmt.Errorf("GCP_DISK_TYPE: %q: give the disk type's name (pd-balanced, pd-ssd …), not a URL; the provider adds each zone's path", c.DiskType)
	}
	if c.RootVolumeSize < 10 || c.RootVolumeSize > 65536 {
		return fmt.Errorf("ROOT_VOLUME_SIZE: %d GiB is outside 10-65536; the podVM image with the NVIDIA driver needs at least its own size", c.RootVolumeSize)
	}
	switch c.ProvisioningModel {
	case setting.ProvisioningStandard, setting.ProvisioningSpot:
	default:
		return fmt.Errorf("GCP_PROVISIONING_MODEL: %q is not STANDARD or SPOT", c.ProvisioningModel)
	}
	if c.UnavailableTTL < 0 {
		return fmt.Errorf("GCP_UNAVAILABLE_OFFERING_TTL: %s is negative; use 0 to disable the cache or a duration such as 3m", c.UnavailableTTL)
	}
	if c.MutationsPerSecond < 0 {
		return fmt.Errorf("GCP_MUTATIONS_PER_SECOND: %g is negative; use 0 for no limit", c.MutationsPerSecond)
	}
	if c.SpotFallback && c.ProvisioningModel != setting.ProvisioningSpot {
		return fmt.Errorf("GCP_SPOT_FALLBACK: only meaningful with GCP_PROVISIONING_MODEL=SPOT (it is %s)", c.ProvisioningModel)
	}
	if _, _, err := ParseEndpoint("GCP_ENDPOINT", c.Endpoint); err != nil {
		return err
	}
	if c.UsePublicIP {
		return fmt.Errorf("USE_PUBLIC_IP: gcp-t4 never gives a podVM an external IP; unset it and run CAA in the podVMs' VPC")
	}
	switch c.NICType {
	case "", setting.NICTypeGVNIC, setting.NICTypeVirtio:
	default:
		return fmt.Errorf("GCP_NIC_TYPE: %q is not GVNIC or VIRTIO_NET (empty leaves GCE's default)", c.NICType)
	}
	for name, img := range c.ProfileImages {
		if _, err := c.parseImage(img); err != nil {
			return fmt.Errorf("GCP_PROFILE_IMAGES: profile %s: %w", name, err)
		}
	}
	if err := c.validateCacheImage(); err != nil {
		return err
	}
	if len(c.NetworkTags) > 64 {
		return fmt.Errorf("GCP_NETWORK_TAGS: %d tags; GCE allows 64 per instance", len(c.NetworkTags))
	}
	for _, tag := range c.NetworkTags {
		if !networkTagRE.MatchString(tag) {
			return fmt.Errorf("GCP_NETWORK_TAGS: %q is not a network tag (1-63 lowercase letters, digits, hyphens, starting with a letter)", tag)
		}
	}
	for k, v := range c.Labels {
		if !labelKeyRE.MatchString(k) || !labelValueRE.MatchString(v) {
			return fmt.Errorf("GCP_LABELS: %s=%s is not a GCE label (lowercase letters, digits, '_' and '-', at most 63 each; a key starts with a letter)", k, v)
		}
		if slices.Contains(reservedLabels, k) {
			return fmt.Errorf("GCP_LABELS: label %s is set by the provider itself; choose another key", k)
		}
	}
	if err := c.validateAllow(); err != nil {
		return err
	}
	return c.validateIdentity()
}

// subnetworkRegion is the region of a subnetwork given as a path, or "".
func (c *Config) subnetworkRegion() string {
	parts := strings.Split(c.Subnetwork, "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "regions" {
			return parts[i+1]
		}
	}
	return ""
}

// templateRef is a parsed instance-template URL.
type templateRef struct {
	project, region, name string
}

// url is the form instances.insert accepts as sourceInstanceTemplate.
func (t templateRef) url() string {
	if t.region == "" {
		return fmt.Sprintf("projects/%s/global/instanceTemplates/%s", t.project, t.name)
	}
	return fmt.Sprintf("projects/%s/regions/%s/instanceTemplates/%s", t.project, t.region, t.name)
}

// parseTemplateURL accepts the global and regional forms GCE accepts:
// full https URLs, projects/P/..., global/... and regions/R/..., or a bare
// name (global, in the provider's project).
func parseTemplateURL(s, project string) (templateRef, error) {
	rest := s
	if i := strings.Index(rest, "/compute/v1/"); i >= 0 {
		rest = rest[i+len("/compute/v1/"):]
	}
	rest = strings.TrimPrefix(rest, "/")
	parts := strings.Split(rest, "/")
	ref := templateRef{project: project}
	if len(parts) >= 2 && parts[0] == "projects" {
		ref.project, parts = parts[1], parts[2:]
	}
	switch {
	case len(parts) == 1 && parts[0] != "":
		ref.name = parts[0]
	case len(parts) == 3 && parts[0] == "global" && parts[1] == "instanceTemplates":
		ref.name = parts[2]
	case len(parts) == 4 && parts[0] == "regions" && parts[2] == "instanceTemplates":
		ref.region, ref.name = parts[1], parts[3]
	default:
		return templateRef{}, fmt.Errorf("%q is not an instance template; use projects/P/global/instanceTemplates/T or projects/P/regions/R/instanceTemplates/T", s)
	}
	return ref, nil
}
