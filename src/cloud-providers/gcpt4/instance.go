// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// podVM is everything that identifies one podVM create.
type podVM struct {
	name      string
	podName   string
	sandboxID string
	// namespace is the pod's, from CAA's cloud-config; "" if unknown.
	namespace string
	// userData is CAA's cloud-config, already base64-encoded.
	userData string
	// image overrides the configured image (pod image annotation).
	image string
}

// LabelValue is how a pod name or sandbox ID appears in a podVM's labels;
// clean-up tools compare cluster names through it.
func LabelValue(s string) string { return labelValue(s) }

// labelValue maps s onto GCE's label alphabet and length.
func labelValue(s string) string {
	v := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, s)
	if len(v) > 63 {
		v = v[:63]
	}
	return v
}

// podLabels are the labels that let clean-up find a podVM, its cluster,
// its node and its pod.
func (c *Config) podLabels(vm podVM, profile string) map[string]string {
	labels := map[string]string{}
	for k, v := range c.Labels {
		labels[k] = v
	}
	for k, v := range c.identityLabels() {
		labels[k] = v
	}
	labels[SandboxLabel] = labelValue(vm.sandboxID)
	labels[PodLabel] = labelValue(vm.podName)
	if vm.namespace != "" {
		labels[NamespaceLabel] = labelValue(vm.namespace)
	}
	if profile != "" {
		labels[ProfileLabel] = labelValue(profile)
	}
	return labels
}

// podMetadata carries the cloud-config and the full sandbox ID, node and
// namespace, which a label (63 characters) may not hold.
func (c *Config) podMetadata(vm podVM) []*computepb.Items {
	items := []*computepb.Items{
		{Key: proto.String(UserDataMetadata), Value: proto.String(vm.userData)},
		{Key: proto.String("user-data-encoding"), Value: proto.String("base64")},
		{Key: proto.String(SandboxMetadata), Value: proto.String(vm.sandboxID)},
	}
	if c.NodeName != "" {
		items = append(items, &computepb.Items{Key: proto.String(NodeMetadata), Value: proto.String(c.NodeName)})
	}
	if vm.namespace != "" {
		items = append(items, &computepb.Items{Key: proto.String(NamespaceMetadata), Value: proto.String(vm.namespace)})
	}
	return items
}

// imageURL is the image in the form the provider sends, the canonical
// one the allow-list compared (imageKey); an image that does not parse was
// refused by Validate or by the allow-list before any body is built.
func (c *Config) imageURL(image string) string {
	if key, err := c.imageKey(image); err == nil {
		return key
	}
	return image
}

// subnetworkURL expands a bare subnetwork name into the zone's region, in
// the network's project: with Shared VPC (GCP_NETWORK
// projects/HOST/global/networks/N) the subnetwork is the host project's,
// not the service project's the podVMs run in.
func (c *Config) subnetworkURL(zone string) string {
	if c.Subnetwork == "" || strings.Contains(c.Subnetwork, "/") {
		return c.Subnetwork
	}
	return fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", c.networkProject(), regionOf(zone), c.Subnetwork)
}

// networkProject is the project of GCP_NETWORK when given as a path with
// one (a Shared VPC host project), else the provider's.
func (c *Config) networkProject() string {
	rest := c.Network
	if i := strings.Index(rest, "/compute/v1/"); i >= 0 {
		rest = rest[i+len("/compute/v1/"):]
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(parts) >= 2 && parts[0] == "projects" && parts[1] != "" {
		return parts[1]
	}
	return c.ProjectID
}

// nicType is the profile's NIC type: GVNIC where the series networks only
// through it, else GCP_NIC_TYPE (empty: GCE's default, VIRTIO_NET).
func (c *Config) nicType(p catalog.Profile) string {
	if catalog.NeedsGVNIC(p.MachineType) {
		return setting.NICTypeGVNIC
	}
	return c.NICType
}

// networkURL expands a bare network name.
func (c *Config) networkURL() string {
	if strings.Contains(c.Network, "/") {
		return c.Network
	}
	return "global/networks/" + c.Network
}

// provisioningModel is the profile's model, else the provider's.
func (c *Config) provisioningModel(p catalog.Profile) string {
	if p.ProvisioningModel != "" {
		return p.ProvisioningModel
	}
	return c.ProvisioningModel
}

// scheduling is the policy for an ephemeral podVM. GPU and confidential
// VMs cannot live-migrate, so GCE requires TERMINATE; a podVM is never
// restarted by GCE because its pod is gone once it stops.
func scheduling(model string, needsTerminate bool) *computepb.Scheduling {
	return applyModel(&computepb.Scheduling{AutomaticRestart: proto.Bool(false)}, model, needsTerminate)
}

// applyModel sets a provisioning model on a scheduling block (a template's
// copy or a fresh one) and what that model requires.
func applyModel(s *computepb.Scheduling, model string, needsTerminate bool) *computepb.Scheduling {
	s.AutomaticRestart = proto.Bool(false)
	if needsTerminate || model == setting.ProvisioningSpot {
		s.OnHostMaintenance = proto.String("TERMINATE")
	}
	switch model {
	case setting.ProvisioningSpot:
		s.ProvisioningModel = proto.String(setting.ProvisioningSpot)
		// DELETE rather than STOP: a stopped Spot VM still bills its disk
		// and would be an orphan for clean-up to find.
		s.InstanceTerminationAction = proto.String("DELETE")
	case setting.ProvisioningStandard:
		if s.ProvisioningModel != nil {
			s.ProvisioningModel = proto.String(setting.ProvisioningStandard)
		}
		// Only Spot (or a run-duration limit) takes a termination action.
		if s.MaxRunDuration == nil && s.TerminationTime == nil {
			s.InstanceTerminationAction = nil
		}
		s.Preemptible = nil
	}
	return s
}

// buildInstance is the insert body for a profile-based podVM. It never has
// accessConfigs: podVMs get no external IP. The profile's image was
// checked when it was selected.
func (c *Config) buildInstance(vm podVM, p catalog.Profile, zone, model string, diskSizeGB int64) *computepb.Instance {
	image, _ := c.imageFor(p, vm.image)
	nic := &computepb.NetworkInterface{
		Network:   proto.String(c.networkURL()),
		StackType: proto.String("IPV4_ONLY"),
	}
	if sub := c.subnetworkURL(zone); sub != "" {
		nic.Subnetwork = proto.String(sub)
	}
	if t := c.nicType(p); t != "" {
		nic.NicType = proto.String(t)
	}
	boot := &computepb.AttachedDisk{
		Boot:       proto.Bool(true),
		AutoDelete: proto.Bool(true),
		InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: proto.String(c.imageURL(image)),
			DiskSizeGb:  proto.Int64(diskSizeGB),
			DiskType:    proto.String(fmt.Sprintf("zones/%s/diskTypes/%s", zone, c.diskType(p))),
		},
	}
	if catalog.NeedsNVMe(p.MachineType, p.ConfidentialType != "") {
		boot.Interface = proto.String("NVME")
	}
	disks := []*computepb.AttachedDisk{boot}
	meta := c.podMetadata(vm)
	if cache := c.cacheDisk(p, zone, boot.Interface); cache != nil {
		disks = append(disks, cache)
		// With the disk, always its dm-verity value (checked with the
		// configuration): the podVM opens the disk with nothing else.
		meta = append(meta, &computepb.Items{Key: proto.String(CacheVerityMetadata), Value: proto.String(c.cacheVerityFor(p))})
	}
	inst := &computepb.Instance{
		Name:              proto.String(vm.name),
		MachineType:       proto.String(fmt.Sprintf("zones/%s/machineTypes/%s", zone, p.MachineType)),
		Labels:            c.podLabels(vm, p.Name),
		Metadata:          &computepb.Metadata{Items: meta},
		Disks:             disks,
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
		Scheduling:        scheduling(model, p.GPUs() > 0 || p.ConfidentialType != ""),
		Tags:              c.tags(nil),
	}
	if p.Accelerator != "" {
		inst.GuestAccelerators = []*computepb.AcceleratorConfig{{
			AcceleratorType:  proto.String(fmt.Sprintf("zones/%s/acceleratorTypes/%s", zone, p.Accelerator)),
			AcceleratorCount: proto.Int32(p.AcceleratorCount),
		}}
	}
	if p.ConfidentialType != "" {
		inst.ConfidentialInstanceConfig = &computepb.ConfidentialInstanceConfig{
			ConfidentialInstanceType: proto.String(p.ConfidentialType),
		}
	}
	if p.MinCPUPlatform != "" {
		inst.MinCpuPlatform = proto.String(p.MinCPUPlatform)
	}
	if c.ServiceAccount != "" {
		inst.ServiceAccounts = []*computepb.ServiceAccount{{
			Email:  proto.String(c.ServiceAccount),
			Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"},
		}}
	}
	return inst
}

// templateGPUs counts the GPUs a template's VMs get, attached or bundled.
func templateGPUs(props *computepb.InstanceProperties) int64 {
	var n int64
	for _, a := range props.GetGuestAccelerators() {
		n += int64(a.GetAcceleratorCount())
	}
	if shape, ok := catalog.LookupShape(props.GetMachineType()); ok {
		n += int64(shape.BundledCount)
	}
	return n
}

// buildFromTemplate is the insert body that overrides a template. GCE
// replaces, not merges, any list or map the body sets, so labels and
// metadata items are merged here from the template's, and the NIC list is
// only overridden (with the template's NICs stripped of accessConfigs) when
// the template would give the VM an external IP.
func (c *Config) buildFromTemplate(vm podVM, props *computepb.InstanceProperties, zone, model string) *computepb.Instance {
	labels := map[string]string{}
	for k, v := range props.GetLabels() {
		labels[k] = v
	}
	for k, v := range c.podLabels(vm, "template") {
		labels[k] = v
	}
	ours := c.podMetadata(vm)
	items := append([]*computepb.Items(nil), ours...)
	for _, it := range props.GetMetadata().GetItems() {
		overridden := false
		for _, o := range ours {
			overridden = overridden || o.GetKey() == it.GetKey()
		}
		if !overridden {
			items = append(items, proto.Clone(it).(*computepb.Items))
		}
	}
	inst := &computepb.Instance{
		Name:     proto.String(vm.name),
		Labels:   labels,
		Metadata: &computepb.Metadata{Items: items},
		// Like metadata, a body's tags replace the template's: keep both.
		Tags: c.tags(props.GetTags().GetItems()),
	}
	external := false
	for _, nic := range props.GetNetworkInterfaces() {
		external = external || len(nic.GetAccessConfigs()) > 0 || len(nic.GetIpv6AccessConfigs()) > 0
	}
	if external {
		for _, nic := range props.GetNetworkInterfaces() {
			n := proto.Clone(nic).(*computepb.NetworkInterface)
			n.AccessConfigs, n.Ipv6AccessConfigs = nil, nil
			inst.NetworkInterfaces = append(inst.NetworkInterfaces, n)
		}
	}
	// scheduling is one message: the override replaces the template's, so
	// it starts from the template's copy. It is sent when the model
	// differs from the template's or a GPU template lacks TERMINATE.
	gpus := templateGPUs(props) > 0 || props.GetConfidentialInstanceConfig().GetConfidentialInstanceType() != ""
	if model != templateModel(props) || (gpus && props.GetScheduling().GetOnHostMaintenance() != "TERMINATE") {
		s, _ := proto.Clone(props.GetScheduling()).(*computepb.Scheduling)
		if s == nil {
			s = &computepb.Scheduling{}
		}
		inst.Scheduling = applyModel(s, model, gpus)
	}
	if vm.image != "" {
		// Overriding disks replaces the template's whole list: keep its
		// disks and swap only the boot image. A template names its disk
		// type (pd-balanced) where an instance needs the zonal URL
		// (AttachedDiskInitializeParams.diskType in the discovery
		// document), so names are turned into zones/Z/diskTypes/T.
		for _, d := range props.GetDisks() {
			d = proto.Clone(d).(*computepb.AttachedDisk)
			if ip := d.GetInitializeParams(); ip != nil {
				if d.GetBoot() {
					ip.SourceImage = proto.String(c.imageURL(vm.image))
				}
				if t := ip.GetDiskType(); t != "" && !strings.Contains(t, "/") {
					ip.DiskType = proto.String(fmt.Sprintf("zones/%s/diskTypes/%s", zone, t))
				}
			}
			inst.Disks = append(inst.Disks, d)
		}
	}
	return inst
}

// templateModel is the provisioning model a template's VMs get.
func templateModel(props *computepb.InstanceProperties) string {
	s := props.GetScheduling()
	switch {
	case s.GetProvisioningModel() != "":
		return s.GetProvisioningModel()
	case s.GetPreemptible():
		return setting.ProvisioningSpot
	}
	return setting.ProvisioningStandard
}

// tags are the podVM's network tags: the template's, then ours.
func (c *Config) tags(from []string) *computepb.Tags {
	items := append([]string(nil), from...)
	for _, t := range c.NetworkTags {
		if !slices.Contains(items, t) {
			items = append(items, t)
		}
	}
	if len(items) == 0 {
		return nil
	}
	return &computepb.Tags{Items: items}
}
