// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// ProviderName is the name CAA selects this provider by
// (cloud-api-adaptor gcp-t4 ...); its build tag is gcp_t4.
const ProviderName = "gcp-t4"

// Manager is the provider's entry in CAA's provider table; it holds the
// configuration its flags parse into, and the keys and flag set ParseCmd
// registered, so NewProvider can re-read the environment strictly.
type Manager struct {
	cfg   Config
	keys  []key
	flags *flag.FlagSet
}

func init() {
	provider.AddCloudProvider(ProviderName, &Manager{})
}

// ParseCmd registers the provider's flags; each defaults to its env var,
// read by upstream's registrar.
func (m *Manager) ParseCmd(flags *flag.FlagSet) {
	reg := &keyRegistrar{up: provider.NewFlagRegistrar(flags), flags: flags}
	m.register(reg)
	m.keys, m.flags = reg.keys, flags
}

// register declares every setting. Kept in upstream's reg.XxxWithEnv style
// so config-extractor (which reads these calls from manager.go) can
// generate the chart values from it; Keys() reads the same calls.
func (m *Manager) register(reg *keyRegistrar) {
	m.cfg = Config{}
	c := &m.cfg

	reg.StringWithEnv(&c.Credentials, "gcp-credentials", "", "GCP_CREDENTIALS", "Service account key (type service_account) or Workload Identity Federation configuration (type external_account), JSON content; empty uses Application Default Credentials", provider.Secret())
	reg.StringWithEnv(&c.ProjectID, "gcp-project-id", "", "GCP_PROJECT_ID", "GCP project ID", provider.Required())
	reg.StringWithEnv(&c.Zone, "zone", "", "GCP_ZONE", "Primary zone for podVMs", provider.Required())
	reg.CustomTypeWithEnv(&c.FallbackZones, "zones", "", "GCP_ZONES", "Fallback zones, tried in order when a zone is out of capacity, comma separated; 'auto' discovers the region's zones that offer the accelerator")
	reg.StringWithEnv(&c.ImageName, "image-name", "", "PODVM_IMAGE_NAME", "PodVM image: name, projects/P/global/images/N or projects/P/global/images/family/F")
	reg.StringWithEnv(&c.Network, "network", "", "GCP_NETWORK", "VPC network for podVMs, e.g. global/networks/default")
	reg.StringWithEnv(&c.Subnetwork, "subnetwork", "", "GCP_SUBNETWORK", "Subnetwork: a name in the zone's region or a full path")
	reg.StringWithEnv(&c.DiskType, "disk-type", "pd-balanced", "GCP_DISK_TYPE", "Boot disk type (pd-standard, pd-balanced, pd-ssd)")
	reg.IntWithEnv(&c.RootVolumeSize, "root-volume-size", 50, "ROOT_VOLUME_SIZE", "Boot disk size in GiB; raised to the image size when that is larger")
	reg.StringWithEnv(&c.InstanceTemplate, "instance-template", "", "GCP_INSTANCE_TEMPLATE", "Create podVMs from this instance template (global or regional) instead of profiles")
	reg.StringWithEnv(&c.ProfilesFile, "profiles-file", "", "GCP_PROFILES_FILE", "YAML file with extra podVM profiles")
	reg.StringWithEnv(&c.Profiles, "profiles", "", "GCP_PROFILES", "YAML document with extra podVM profiles")
	reg.StringWithEnv(&c.ProvisioningModel, "provisioning-model", "STANDARD", "GCP_PROVISIONING_MODEL", "STANDARD or SPOT")
	reg.DurationWithEnv(&c.UnavailableTTL, "unavailable-offering-ttl", durationDefault("3m"), "GCP_UNAVAILABLE_OFFERING_TTL", "How long a stocked-out offering (model, machine type, accelerator, zone) is skipped; 0 disables")
	reg.BoolWithEnv(&c.SpotFallback, "spot-fallback", false, "GCP_SPOT_FALLBACK", "With SPOT, fall back to standard capacity when Spot capacity or quota is exhausted everywhere")
	reg.Float64WithEnv(&c.MutationsPerSecond, "mutations-per-second", 10, "GCP_MUTATIONS_PER_SECOND", "Client-side limit on instance inserts and deletes per second; 0 for none")
	reg.StringWithEnv(&c.ServiceAccount, "service-account", "", "GCP_SERVICE_ACCOUNT", "Service account email attached to podVMs; empty attaches none")
	reg.StringWithEnv(&c.CacheVerity, "cache-verity", "", "GCP_CACHE_VERITY", "GCP_CACHE_IMAGE's dm-verity root hash and hash offset, root=<64 hex>,offset=<bytes>, as gcp-t4 cache build -disk prints it; required with GCP_CACHE_IMAGE: the podVM opens the cache disk only through dm-verity with it")
	reg.CustomTypeWithEnv(&c.Labels, "labels", "", "GCP_LABELS", "Extra labels on podVMs: key1=value1,key2=value2")
	reg.CustomTypeWithEnv(&c.NetworkTags, "network-tags", DefaultNetworkTag, "GCP_NETWORK_TAGS", "Network tags on every podVM, comma separated, for firewall rules that target podVMs only")
	reg.CustomTypeWithEnv(&c.InstanceTypes, "machine-types", "", "GCP_INSTANCE_TYPES", "Shapes a pod may get, comma separated: profile names, machine types, and 'auto' for fit's automatic shapes; empty allows the profiles, their machine types by name, and automatic shapes within the per-pod limits")
	reg.CustomTypeWithEnv(&c.AllowedImages, "allowed-images", "", "GCP_ALLOWED_IMAGES", "Images a pod's image annotation may name besides PODVM_IMAGE_NAME and the profiles' images, comma separated; empty allows only those")
	reg.IntWithEnv(&c.MaxGPUsPerPod, "max-gpus-per-pod", 0, "GCP_MAX_GPUS_PER_POD", "Most GPUs one pod's podVM may have, whatever its annotations; 0 is the largest allowed profile's")
	reg.IntWithEnv(&c.MaxVCPUsPerPod, "max-vcpus-per-pod", 0, "GCP_MAX_VCPUS_PER_POD", "Most vCPUs one pod's podVM may have, whatever its annotations; 0 is the largest allowed profile's")
	reg.IntWithEnv(&c.MaxGPUsPerNamespace, "max-gpus-per-namespace", 0, "GCP_MAX_GPUS_PER_NAMESPACE", "Most GPUs the podVMs of one namespace may have together, counted in GCE before each create; 0 for no limit")
	reg.IntWithEnv(&c.MaxGPUsTotal, "max-gpus-total", 0, "GCP_MAX_GPUS_TOTAL", "Most GPUs this cluster's podVMs may have together, counted in GCE before each create; 0 for no limit")
	reg.IntWithEnv(&c.MaxMemoryPerPod, "max-memory-per-pod", 0, "GCP_MAX_MEMORY_PER_POD", "Most memory in MiB one pod's podVM may have, whatever its annotations; 0 is the largest allowed profile's")
	reg.BoolWithEnv(&c.UsePublicIP, "use-public-ip", false, "USE_PUBLIC_IP", "Refused: podVMs never get an external IP")
	reg.StringWithEnv(&c.NICType, "nic-type", "", "GCP_NIC_TYPE", "PodVM NIC type: GVNIC (Google's recommendation with GPUs; the image needs the GVNIC guest OS feature) or VIRTIO_NET; empty leaves GCE's default. C3 and A3 always get GVNIC")
	reg.CustomTypeWithEnv(&c.ProfileImages, "profile-images", "", "GCP_PROFILE_IMAGES", "Per-profile podVM images: profile=image,… (a confidential profile such as h100-cc needs its own image)")
	reg.StringWithEnv(&c.CacheImage, "cache-image", "", "GCP_CACHE_IMAGE", "Image of a cache disk every profile podVM gets (image layers, weights), same forms as PODVM_IMAGE_NAME; a profile's cacheImage overrides it; empty attaches none")
	reg.StringWithEnv(&c.ClusterID, "cluster-id", "", "GCP_CLUSTER_ID", "This cluster's ID, labelled on every podVM so only this cluster's reaper collects it: the kube-system namespace's UID (gcp-t4 install sets it)")
	reg.StringWithEnv(&c.ClusterName, "cluster-name", "", "GCP_CLUSTER_NAME", "Optional human-readable cluster name, labelled on every podVM")
	reg.StringWithEnv(&c.NodeName, "node-name", "", "NODE_NAME", "The node this adaptor runs on (the downward API's spec.nodeName), labelled on the podVMs it creates")
	reg.StringWithEnv(&c.Endpoint, "gcp-endpoint", "", "GCP_ENDPOINT", "Compute API endpoint override (a Private Service Connect endpoint or a local emulator)")
}

// LoadEnv is a no-op kept for upstream's interface: env is read in ParseCmd.
func (m *Manager) LoadEnv() {}

// NewProvider builds the provider from the parsed configuration. CAA calls
// it once at start and exits on its error (cloud-api-adaptor's main.go
// Setup, v0.22.0). Refused here: a variable upstream's registrar could not
// parse (and silently replaced by its default), a configuration
// Config.Validate refuses, profiles the catalogue refuses, credentials the
// provider cannot use, and a GCP_CLUSTER_ID that is not this cluster's
// (clusterid.go), checked with the pod's own ServiceAccount. What needs the
// Compute API (image, template, accelerator) is ConfigVerifier's: CAA calls
// it only with CLOUD_CONFIG_VERIFY and keeps running when it fails.
func (m *Manager) NewProvider() (provider.Provider, error) {
	p, err := m.Start(context.Background(), func() (ClusterAPI, error) { return inClusterAPI(osLookup, serviceAccountDir) })
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Start is NewProvider with the cluster's API given by cluster, which is
// asked only when GCP_CLUSTER_ID is set.
func (m *Manager) Start(ctx context.Context, cluster func() (ClusterAPI, error)) (*Provider, error) {
	if err := m.CheckEnv(osLookup); err != nil {
		return nil, err
	}
	info, err := m.cfg.checkStartCredentials(osLookup)
	if err != nil {
		return nil, err
	}
	var api *ClusterAPI
	if m.cfg.ClusterID != "" {
		a, err := cluster()
		if err != nil {
			return nil, fmt.Errorf("cannot check GCP_CLUSTER_ID %s against this cluster: %w", m.cfg.ClusterID, err)
		}
		if err := checkClusterID(ctx, m.cfg.ClusterID, a); err != nil {
			return nil, err
		}
		api = &a
	}
	p, err := NewProvider(ctx, m.cfg, nil)
	if err != nil {
		return nil, err
	}
	if api != nil {
		// The API answered the identity check, so its CA parses.
		if p.events, err = newEventRecorder(*api, m.cfg.NodeName, p.log); err != nil {
			_ = p.Teardown()
			return nil, fmt.Errorf("start-up Events: %w", err)
		}
	}
	p.log.Printf("gcp-t4 provider configured: project %s, zones %s, credentials %s, cluster %s", m.cfg.ProjectID, strings.Join(m.cfg.Zones(), ","), info, m.cfg.ClusterID)
	return p, nil
}

// GetConfig returns the parsed configuration.
func (m *Manager) GetConfig() *Config {
	return &m.cfg
}

// durationDefault is a duration default written as its env var takes it
// ("3m"). Upstream's config-extractor reads a default only from a literal,
// a constant or a one-argument call of one (exprToString in
// src/cloud-providers/cmd/config-extractor/main.go at CAA v0.22.0): an
// expression such as 3*time.Minute comes out "". The argument is a literal
// in this file, so a bad one fails every test that registers the flags.
func durationDefault(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(fmt.Sprintf("gcpt4: duration default %q: %v", s, err))
	}
	return d
}
