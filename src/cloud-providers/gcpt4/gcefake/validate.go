// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var (
	// These patterns are GCE's documented constraints; they are compiled
	// once and never modified.
	nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// Labels: keys start with a lowercase letter; keys and values hold
	// lowercase letters, international ones included, digits, '_' and
	// '-', at most 63 characters (compute/docs/labeling-resources#requirements:
	// "International characters are allowed"; the Ll/Lo classes are the
	// pattern Google's label fields document, e.g. \p{Ll}\p{Lo}{0,62}).
	labelKeyRE    = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValueRE  = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
	metadataKeyRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
)

const (
	maxLabels           = 64
	maxMetadataValue    = 256 * 1024
	maxMetadataTotal    = 512 * 1024
	liveMigrationReject = "Instances with guest accelerators do not support live migration."
)

// diskTypes are the persistent disk types the fake's zones offer.
func diskTypeAllowed(t string, scratch bool) bool {
	if scratch {
		return t == "local-ssd"
	}
	switch t {
	case "pd-standard", "pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-balanced", "hyperdisk-extreme", "hyperdisk-throughput", "hyperdisk-ml":
		return true
	}
	return false
}

// diskTypeFitsSeries applies the per-series disk support: no Hyperdisk on
// N1 (with or without GPUs) or E2 (compute/docs/disks/hyperdisks, "Machine
// series support"), no Standard Persistent Disk on C3 and A3
// (compute/docs/general-purpose-machines#c3_disks,
// compute/docs/accelerator-optimized-machines#a3-disks).
func diskTypeFitsSeries(t string, m *machineSpec) bool {
	switch m.family() {
	case "n1", "e2", "f1", "g1":
		return !strings.HasPrefix(t, "hyperdisk-")
	case "c3", "a3":
		return t != "pd-standard"
	}
	return true
}

// nvmeOnly are the series whose disks attach only through NVMe, so an
// unset interface is NVMe there and SCSI elsewhere
// (compute/docs/disks/about-persistent-disks#disk-interface;
// AttachedDisk.interface in the discovery document: "For most machine
// types, the default is SCSI").
func nvmeOnly(m *machineSpec) bool { return m.family() == "c3" || m.family() == "a3" }

// gvnicOnly are the series that network only through gVNIC
// (compute/docs/networking/using-gvnic#supported-machines).
func gvnicOnly(m *machineSpec) bool { return m.family() == "c3" || m.family() == "a3" }

// cpuPlatforms are GCE's minCpuPlatform names; cpuPlatformsOf lists those
// a series can be held to (compute/docs/instances/specify-min-cpu-platform#availablezones).
// E2 and shared-core types take none.
var (
	cpuPlatforms = []string{"Intel Sandy Bridge", "Intel Ivy Bridge", "Intel Haswell", "Intel Broadwell", "Intel Skylake", "Intel Cascade Lake",
		"Intel Ice Lake", "Intel Sapphire Rapids", "Intel Emerald Rapids", "Intel Granite Rapids", "AMD Rome", "AMD Milan", "AMD Genoa", "AMD Turin", "Ampere Altra", "Google Axion"}
	cpuPlatformsOf = map[string][]string{
		"n1":  {"Intel Sandy Bridge", "Intel Ivy Bridge", "Intel Haswell", "Intel Broadwell", "Intel Skylake"},
		"n2d": {"AMD Rome", "AMD Milan"},
		"c3":  {"Intel Sapphire Rapids"},
		"a3":  {"Intel Sapphire Rapids"},
		"g2":  {"Intel Cascade Lake"},
	}
)

// insertPlan is a validated insert: what the instance consumes and the
// normalized pieces that become the stored instance.
type insertPlan struct {
	zone    *zoneSpec
	machine *machineSpec
	gpu     string
	gpus    int32
	spot    bool
	// model is the provisioning model, STANDARD when unset.
	model string
	// bootImage is the boot disk's image, once disks are validated.
	bootImage *computepb.Image
	disks     []*computepb.AttachedDisk
	nics      []*computepb.NetworkInterface
	accelURLs []*computepb.AcceleratorConfig
}

// mergeTemplate builds the effective instance from a template and the request
// body: each top-level field the body sets replaces the template's field
// wholesale, which is GCE's documented override behaviour (a repeated field
// or metadata in the body discards the template's list).
func (s *Server) mergeTemplate(z *zoneSpec, ref string, req *computepb.Instance) (*computepb.Instance, error) {
	t, err := s.resolveTemplate(z, ref)
	if err != nil {
		return nil, err
	}
	b, err := protojson.Marshal(t.GetProperties())
	if err != nil {
		return nil, fmt.Errorf("marshalling properties of template %q: %w", t.GetName(), err)
	}
	inst := &computepb.Instance{}
	// InstanceProperties has a few fields Instance lacks (e.g.
	// resourceManagerTags); they have no effect on what the fake models.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, inst); err != nil {
		return nil, fmt.Errorf("converting template %q to an instance: %w", t.GetName(), err)
	}
	fromBody := map[protoreflect.Name]bool{}
	dst := inst.ProtoReflect()
	req.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		fromBody[fd.Name()] = true
		return true
	})
	// Templates hold bare names where instances need zonal URLs; resolve
	// them only for values that really came from the template.
	zonal := func(collection, v string) string {
		if v == "" || strings.Contains(v, "/") {
			return v
		}
		return "zones/" + z.name + "/" + collection + "/" + v
	}
	if !fromBody["machine_type"] && inst.MachineType != nil {
		inst.MachineType = proto.String(zonal("machineTypes", inst.GetMachineType()))
	}
	if !fromBody["guest_accelerators"] {
		for _, a := range inst.GetGuestAccelerators() {
			if a.AcceleratorType != nil {
				a.AcceleratorType = proto.String(zonal("acceleratorTypes", a.GetAcceleratorType()))
			}
		}
	}
	if !fromBody["disks"] {
		for _, d := range inst.GetDisks() {
			if p := d.GetInitializeParams(); p != nil && p.DiskType != nil {
				p.DiskType = proto.String(zonal("diskTypes", p.GetDiskType()))
			}
		}
	}
	if !fromBody["network_interfaces"] {
		for _, n := range inst.GetNetworkInterfaces() {
			if n.Network != nil && !strings.Contains(n.GetNetwork(), "/") {
				n.Network = proto.String("global/networks/" + n.GetNetwork())
			}
			if n.Subnetwork != nil && !strings.Contains(n.GetSubnetwork(), "/") {
				n.Subnetwork = proto.String("regions/" + z.region + "/subnetworks/" + n.GetSubnetwork())
			}
		}
	}
	// A template stored through AddInstanceTemplate was never validated;
	// GCE would have rejected bad enum values when the template was made.
	if err := checkEnums(inst.ProtoReflect(), "resource"); err != nil {
		return nil, err
	}
	return inst, nil
}

func (s *Server) resolveTemplate(z *zoneSpec, ref string) (*computepb.InstanceTemplate, error) {
	r, ok := s.parseRef(ref)
	if !ok {
		return nil, invalidField("sourceInstanceTemplate", ref, "Must be a URL to an instance template.")
	}
	if name, ok := r.global("instanceTemplates"); ok {
		t := s.world.templates[templateKey("", name)]
		if r.project != s.project || t == nil {
			return nil, resourceNotFound(r.path())
		}
		return t, nil
	}
	if region, name, ok := r.regional("instanceTemplates"); ok {
		t := s.world.templates[templateKey(region, name)]
		if r.project != s.project || t == nil {
			return nil, resourceNotFound(r.path())
		}
		if region != z.region {
			return nil, invalidField("sourceInstanceTemplate", ref,
				fmt.Sprintf("Regional instance template in region '%s' cannot be used to create an instance in zone '%s'.", region, z.name))
		}
		return t, nil
	}
	return nil, invalidField("sourceInstanceTemplate", ref, "Must be a URL to an instance template.")
}

// validateInsert applies GCE's synchronous checks in the order GCE reports
// them as far as it is known: identity, machine, accelerators, scheduling,
// confidential computing, disks, network, labels, metadata.
func (s *Server) validateInsert(z *zoneSpec, inst *computepb.Instance) (*insertPlan, error) {
	name := inst.GetName()
	if !nameRE.MatchString(name) {
		return nil, invalidField("resource.name", name, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
	}
	if _, exists := s.instances[z.name+"/"+name]; exists {
		return nil, apiErr(http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource '%s' already exists", s.instancePath(z.name, name)))
	}
	plan := &insertPlan{zone: z}
	m, err := s.validateMachineType(z, inst.GetMachineType())
	if err != nil {
		return nil, err
	}
	plan.machine = m
	if err := validateMinCPUPlatform(m, inst.GetMinCpuPlatform()); err != nil {
		return nil, err
	}
	if err := s.validateAccelerators(plan, inst); err != nil {
		return nil, err
	}
	if err := validateScheduling(plan, inst.GetScheduling(), inst.GetReservationAffinity()); err != nil {
		return nil, err
	}
	if err := validateConfidential(m, inst); err != nil {
		return nil, err
	}
	if err := s.validateDisks(plan, inst); err != nil {
		return nil, err
	}
	if err := s.validateNICs(plan, inst.GetNetworkInterfaces()); err != nil {
		return nil, err
	}
	if err := s.validateServiceAccounts(inst.GetServiceAccounts()); err != nil {
		return nil, err
	}
	if err := validateLabels(inst.GetLabels()); err != nil {
		return nil, err
	}
	if err := validateMetadata(inst.GetMetadata()); err != nil {
		return nil, err
	}
	return plan, nil
}

// validateMinCPUPlatform accepts GCE's platform names the series offers,
// and "Automatic" (no minimum).
func validateMinCPUPlatform(m *machineSpec, platform string) error {
	if platform == "" || platform == "Automatic" {
		return nil
	}
	const field = "resource.minCpuPlatform"
	if !slices.Contains(cpuPlatforms, platform) {
		return invalidField(field, platform, "Unknown CPU platform; see the zone's availableCpuPlatforms.")
	}
	allowed, ok := cpuPlatformsOf[m.family()]
	if !ok {
		return invalidField(field, platform, fmt.Sprintf("Machine type '%s' does not support specifying a minimum CPU platform.", m.name))
	}
	if !slices.Contains(allowed, platform) {
		return invalidField(field, platform, fmt.Sprintf("CPU platform '%s' is not available for machine type '%s'.", platform, m.name))
	}
	return nil
}

// validateServiceAccounts accepts the project's service accounts and the
// alias "default"; any other email does not exist for GCE, which refuses
// the insert (the fake's message follows the shape of GCE's 400s).
func (s *Server) validateServiceAccounts(sas []*computepb.ServiceAccount) error {
	for i, sa := range sas {
		email := sa.GetEmail()
		if email == "default" || s.world.serviceAccounts[email] {
			continue
		}
		return invalidField(fmt.Sprintf("resource.serviceAccounts[%d].email", i), email, fmt.Sprintf("The service account '%s' does not exist.", email))
	}
	return nil
}

// onHostMaintenance is the effective policy: the request's, else TERMINATE
// for Spot and preemptible VMs (which cannot live-migrate), else MIGRATE
// (Scheduling.onHostMaintenance in the discovery document).
func onHostMaintenance(sc *computepb.Scheduling) string {
	if v := sc.GetOnHostMaintenance(); v != "" {
		return v
	}
	if sc.GetProvisioningModel() == "SPOT" || sc.GetPreemptible() {
		return "TERMINATE"
	}
	return "MIGRATE"
}

func (s *Server) validateMachineType(z *zoneSpec, ref string) (*machineSpec, error) {
	const field = "resource.machineType"
	if ref == "" {
		return nil, invalidField(field, "", "Machine type must be specified.")
	}
	r, ok := s.parseRef(ref)
	zone, name, zonal := r.zonal("machineTypes")
	if !ok || !zonal {
		return nil, invalidField(field, ref, "Must be the URL to a Compute resource of the correct type.")
	}
	if r.project != s.project {
		return nil, resourceNotFound(r.path())
	}
	if zone != z.name {
		return nil, invalidField(field, ref, fmt.Sprintf("Machine type must be in zone '%s', the zone of the instance.", z.name))
	}
	m := z.machine(name)
	if m == nil {
		why := fmt.Sprintf("Machine type with name '%s' does not exist in zone '%s'.", name, z.name)
		if _, custom := customMachine(name); custom != "" {
			why += " " + custom
		}
		return nil, invalidField(field, ref, why)
	}
	return m, nil
}

func (s *Server) validateAccelerators(plan *insertPlan, inst *computepb.Instance) error {
	z, m := plan.zone, plan.machine
	accs := inst.GetGuestAccelerators()
	if len(accs) > 0 && m.accel != "" {
		return invalidField("resource.guestAccelerators", accs[0].GetAcceleratorType(),
			fmt.Sprintf("Machine type '%s' comes with bundled accelerators (%d x %s); guestAccelerators must not be specified.", m.name, m.accelCount, m.accel))
	}
	if len(accs) > 1 {
		return invalidField("resource.guestAccelerators", "", "At most one guest accelerator type can be attached to an instance.")
	}
	for i, a := range accs {
		field := fmt.Sprintf("resource.guestAccelerators[%d].acceleratorType", i)
		ref := a.GetAcceleratorType()
		r, ok := s.parseRef(ref)
		zone, name, zonal := r.zonal("acceleratorTypes")
		if !ok || !zonal {
			return invalidField(field, ref, "Must be the URL to a Compute resource of the correct type.")
		}
		if r.project != s.project {
			return resourceNotFound(r.path())
		}
		if zone != z.name {
			return invalidField(field, ref, fmt.Sprintf("Accelerator type must be in zone '%s', the zone of the instance.", z.name))
		}
		if !z.hasAccel(name) {
			return invalidField(field, ref, fmt.Sprintf("Accelerator type '%s' does not exist in zone '%s'.", name, z.name))
		}
		spec := s.world.accels[name]
		countField := fmt.Sprintf("resource.guestAccelerators[%d].acceleratorCount", i)
		n := a.GetAcceleratorCount()
		if n <= 0 {
			return invalidField(countField, strconv.Itoa(int(n)), "Accelerator count must be greater than 0.")
		}
		counts := spec.counts()
		if counts == nil {
			return invalidField(field, ref, fmt.Sprintf("Accelerator type '%s' is only available bundled with its accelerator-optimized machine types and cannot be attached.", name))
		}
		if !slices.Contains(counts, n) || n > spec.maxCards {
			return invalidField(countField, strconv.Itoa(int(n)),
				fmt.Sprintf("Accelerator count %d is not valid for accelerator type '%s'; allowed counts are %s.", n, name, joinInts(counts)))
		}
		if m.family() != "n1" || m.shared {
			return invalidField(field, ref,
				fmt.Sprintf("Accelerator type '%s' can only be attached to N1 machine types that are not shared-core; machine type '%s' is not supported.", name, m.name))
		}
		// The per-count ceiling is the family's row (accels.go), for
		// this zone where the row has a zone's own limit.
		lim, _ := spec.limit(n, z.name)
		if m.cpus > lim.maxCPUs || m.memoryMB > lim.maxMemoryGB*1024 {
			return invalidField("resource.machineType", inst.GetMachineType(),
				fmt.Sprintf("Machine type '%s' (%d vCPUs, %d MB) exceeds the limit of %d vCPUs and %d GB memory for %d x %s.", m.name, m.cpus, m.memoryMB, lim.maxCPUs, lim.maxMemoryGB, n, name))
		}
		plan.gpu, plan.gpus = name, n
		plan.accelURLs = append(plan.accelURLs, &computepb.AcceleratorConfig{
			AcceleratorType:  proto.String(s.zoneURL(z.name) + "/acceleratorTypes/" + name),
			AcceleratorCount: proto.Int32(n),
		})
	}
	if m.accel != "" {
		plan.gpu, plan.gpus = m.accel, m.accelCount
	}
	if plan.gpus > 0 && onHostMaintenance(inst.GetScheduling()) != "TERMINATE" {
		return apiErr(http.StatusBadRequest, "badRequest", liveMigrationReject)
	}
	return nil
}

func joinInts(v []int32) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(int(n))
	}
	return strings.Join(parts, ", ")
}

// validateScheduling applies GCE's Spot rules as documented: a Spot or
// preemptible VM cannot be restarted automatically nor live-migrate, and
// GCE fills both in when the request leaves them out (compute/docs/instances/create-use-spot:
// the REST example sends only provisioningModel and
// instanceTerminationAction), but refuses them set the other way. A
// request without a scheduling block is a standard VM.
func validateScheduling(plan *insertPlan, sc *computepb.Scheduling, ra *computepb.ReservationAffinity) error {
	pm := sc.GetProvisioningModel()
	plan.spot = pm == "SPOT" || sc.GetPreemptible()
	plan.model = orDefault(pm, "STANDARD")
	if sc.GetPreemptible() && pm == "" {
		plan.model = "SPOT"
	}
	if plan.spot {
		if sc.AutomaticRestart != nil && sc.GetAutomaticRestart() {
			return invalidField("resource.scheduling.automaticRestart", "true",
				"Spot and preemptible instances cannot be automatically restarted; automaticRestart must be false.")
		}
		if onHostMaintenance(sc) != "TERMINATE" {
			return invalidField("resource.scheduling.onHostMaintenance", sc.GetOnHostMaintenance(),
				"Spot and preemptible instances must use onHostMaintenance TERMINATE.")
		}
	}
	if sc != nil && sc.InstanceTerminationAction != nil && !plan.spot && pm != "FLEX_START" && sc.MaxRunDuration == nil && sc.TerminationTime == nil {
		return invalidField("resource.scheduling.instanceTerminationAction", sc.GetInstanceTerminationAction(),
			"instanceTerminationAction can only be set for Spot or preemptible instances, or together with maxRunDuration or terminationTime.")
	}
	// A3 High with fewer than 8 GPUs is sold only as Spot, Flex-start or
	// from a reservation, not on demand (compute/docs/accelerator-optimized-machines#a3-high-vms;
	// for Confidential VMs with H100s also confidential-computing/confidential-vm/docs/supported-configurations).
	if plan.machine.name == "a3-highgpu-1g" && plan.model == "STANDARD" && (ra == nil || ra.GetConsumeReservationType() != "SPECIFIC_RESERVATION") {
		return invalidField("resource.scheduling.provisioningModel", orDefault(pm, "STANDARD"),
			fmt.Sprintf("Machine type '%s' is only available with the SPOT or FLEX_START provisioning model, or from a reservation.", plan.machine.name))
	}
	return nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// validateConfidential enforces which machine families support which
// Confidential VM technology (N1 supports none) and the maintenance rule.
func validateConfidential(m *machineSpec, inst *computepb.Instance) error {
	cic := inst.GetConfidentialInstanceConfig()
	if !cic.GetEnableConfidentialCompute() && cic.GetConfidentialInstanceType() == "" {
		return nil
	}
	typ := orDefault(cic.GetConfidentialInstanceType(), "SEV")
	var ok bool
	switch typ {
	case "TDX":
		ok = m.family() == "c3" || m.name == "a3-highgpu-1g"
	case "SEV":
		ok = slices.Contains([]string{"n2d", "c2d", "c3d", "c4d"}, m.family())
	case "SEV_SNP":
		ok = m.family() == "n2d"
	}
	if !ok {
		return invalidField("resource.confidentialInstanceConfig", typ,
			fmt.Sprintf("Confidential Computing type %s is not supported for machine type '%s'.", typ, m.name))
	}
	if (typ != "SEV" || m.family() != "n2d") && onHostMaintenance(inst.GetScheduling()) != "TERMINATE" {
		return invalidField("resource.scheduling.onHostMaintenance", onHostMaintenance(inst.GetScheduling()),
			fmt.Sprintf("Confidential VMs of type %s on machine type '%s' do not support live migration; onHostMaintenance must be TERMINATE.", typ, m.name))
	}
	return nil
}

// resolveImage accepts the image forms GCE accepts; field names the request
// path for 400s.
func (s *Server) resolveImage(field, ref string) (*computepb.Image, error) {
	r, ok := s.parseRef(ref)
	if !ok {
		return nil, invalidField(field, ref, "Must be the URL to a Compute resource of the correct type.")
	}
	if fam, ok := r.imageFamily(); ok {
		if img := s.world.imageFromFamily(r.project, fam); img != nil {
			return img, nil
		}
		return nil, resourceNotFound(r.path())
	}
	if name, ok := r.global("images"); ok {
		if img := s.world.image(r.project, name); img != nil {
			return img, nil
		}
		return nil, resourceNotFound(r.path())
	}
	return nil, invalidField(field, ref, "Must be the URL to a Compute resource of the correct type.")
}

func hasGuestOSFeature(img *computepb.Image, feature string) bool {
	for _, f := range img.GetGuestOsFeatures() {
		if f.GetType() == feature {
			return true
		}
	}
	return false
}

func (s *Server) validateDisks(plan *insertPlan, inst *computepb.Instance) error {
	z := plan.zone
	disks := inst.GetDisks()
	boots := 0
	for _, d := range disks {
		if d.GetBoot() {
			boots++
		}
	}
	if boots != 1 {
		return invalidField("resource.disks", strconv.Itoa(boots)+" boot disks", "Exactly one boot disk must be specified.")
	}
	confidential := inst.GetConfidentialInstanceConfig().GetEnableConfidentialCompute() || inst.GetConfidentialInstanceConfig().GetConfidentialInstanceType() != ""
	for i, d := range disks {
		field := fmt.Sprintf("resource.disks[%d]", i)
		if d.Source != nil {
			// The fake has no standalone disks, so every source is missing.
			r, ok := s.parseRef(d.GetSource())
			if !ok {
				return invalidField(field+".source", d.GetSource(), "Must be the URL to a Compute resource of the correct type.")
			}
			return resourceNotFound(r.path())
		}
		p := d.GetInitializeParams()
		if p == nil {
			return invalidField(field, "", "One of source or initializeParams must be specified.")
		}
		scratch := d.GetType() == "SCRATCH"
		var img *computepb.Image
		if p.SourceImage != nil {
			var err error
			img, err = s.resolveImage(field+".initializeParams.sourceImage", p.GetSourceImage())
			if err != nil {
				return err
			}
			switch img.GetDeprecated().GetState() {
			case "OBSOLETE", "DELETED":
				return invalidField(field+".initializeParams.sourceImage", p.GetSourceImage(),
					fmt.Sprintf("The image '%s' is %s and cannot be used to create disks.", img.GetName(), strings.ToLower(img.GetDeprecated().GetState())))
			}
			if img.GetStatus() != "READY" {
				return apiErr(http.StatusBadRequest, "resourceNotReady", fmt.Sprintf("The resource '%s' is not ready", strings.TrimPrefix(img.GetSelfLink(), apiBase)))
			}
		} else if d.GetBoot() {
			return invalidField(field+".initializeParams.sourceImage", "", "A boot disk created from initializeParams needs a source image or snapshot.")
		}
		if img != nil && p.DiskSizeGb != nil && p.GetDiskSizeGb() < img.GetDiskSizeGb() {
			return invalidField(field+".initializeParams.diskSizeGb", strconv.FormatInt(p.GetDiskSizeGb(), 10),
				fmt.Sprintf("Requested disk size cannot be smaller than the image size (%d GB)", img.GetDiskSizeGb()))
		}
		if img == nil && !scratch && p.GetDiskSizeGb() <= 0 {
			return invalidField(field+".initializeParams.diskSizeGb", strconv.FormatInt(p.GetDiskSizeGb(), 10), "A blank disk needs a positive disk size.")
		}
		if p.DiskType != nil || scratch {
			dt := p.GetDiskType()
			r, ok := s.parseRef(dt)
			zone, t, zonal := r.zonal("diskTypes")
			switch {
			case !ok || !zonal:
				return invalidField(field+".initializeParams.diskType", dt, "Must be the URL to a Compute resource of the correct type.")
			case r.project != s.project:
				return resourceNotFound(r.path())
			case zone != z.name:
				return invalidField(field+".initializeParams.diskType", dt, fmt.Sprintf("Disk type must be in zone '%s', the zone of the instance.", z.name))
			case !diskTypeAllowed(t, scratch):
				return invalidField(field+".initializeParams.diskType", dt, fmt.Sprintf("Disk type '%s' does not exist in zone '%s' or is not valid for this disk.", t, z.name))
			case !scratch && !diskTypeFitsSeries(t, plan.machine):
				return invalidField(field+".initializeParams.diskType", dt, fmt.Sprintf("Disk type '%s' is not supported for machine type '%s'.", t, plan.machine.name))
			}
		} else if d.GetBoot() && !diskTypeFitsSeries("pd-standard", plan.machine) {
			// The default boot disk type is pd-standard
			// (AttachedDiskInitializeParams.diskType), which these
			// series do not take.
			return invalidField(field+".initializeParams.diskType", "", fmt.Sprintf("The default disk type pd-standard is not supported for machine type '%s'; specify a disk type.", plan.machine.name))
		}
		iface := d.GetInterface()
		if iface == "" {
			iface = "SCSI"
			if nvmeOnly(plan.machine) {
				iface = "NVME"
			}
		}
		switch {
		case iface == "SCSI" && nvmeOnly(plan.machine):
			return invalidField(field+".interface", iface, fmt.Sprintf("Machine type '%s' supports only the NVME disk interface.", plan.machine.name))
		case iface == "SCSI" && confidential:
			// confidential-computing/confidential-vm/docs/supported-configurations#limitations:
			// Confidential VMs need the NVMe disk interface; SCSI is not supported.
			return invalidField(field+".interface", iface, "Confidential VM instances require the NVME disk interface; SCSI is not supported.")
		}
		// A disk attached READ_ONLY cannot be auto-deleted (the Compute
		// API reference, PreservedStatePreservedDisk.autoDelete: "disks
		// attached in READ_ONLY mode cannot be auto-deleted"), so a disk
		// made for this VM alone and deleted with it is READ_WRITE.
		if d.GetMode() == "READ_ONLY" && d.GetAutoDelete() {
			return invalidField(field+".autoDelete", "true", "Disks attached in READ_ONLY mode cannot be auto-deleted.")
		}
		if d.GetBoot() {
			plan.bootImage = img
		}
		if d.GetBoot() && confidential {
			if err := confidentialImageFeatures(field+".initializeParams.sourceImage", p.GetSourceImage(), img, inst); err != nil {
				return err
			}
		}
		nd := s.normalizeDisk(z, inst.GetName(), i, d, img)
		nd.Interface = proto.String(iface)
		plan.disks = append(plan.disks, nd)
	}
	return nil
}

// confidentialImageFeatures checks the boot image carries what the
// Confidential VM technology needs: UEFI_COMPATIBLE always, and
// TDX_CAPABLE, SEV_CAPABLE or SEV_SNP_CAPABLE for TDX, SEV, SEV-SNP
// (confidential-computing/confidential-vm/docs/create-custom-confidential-vm-images).
func confidentialImageFeatures(field, ref string, img *computepb.Image, inst *computepb.Instance) error {
	need := []string{"UEFI_COMPATIBLE"}
	switch orDefault(inst.GetConfidentialInstanceConfig().GetConfidentialInstanceType(), "SEV") {
	case "TDX":
		need = append(need, "TDX_CAPABLE")
	case "SEV":
		need = append(need, "SEV_CAPABLE")
	case "SEV_SNP":
		need = append(need, "SEV_SNP_CAPABLE")
	}
	for _, f := range need {
		if !hasGuestOSFeature(img, f) {
			return invalidField(field, ref, fmt.Sprintf("Confidential VMs of this type require an image with the %s guest OS feature.", f))
		}
	}
	return nil
}

// normalizeDisk turns a request disk into what instances.get shows: a
// source URL instead of initializeParams, defaults filled in.
func (s *Server) normalizeDisk(z *zoneSpec, instName string, i int, d *computepb.AttachedDisk, img *computepb.Image) *computepb.AttachedDisk {
	out := proto.Clone(d).(*computepb.AttachedDisk)
	p := out.GetInitializeParams()
	out.InitializeParams = nil
	diskName := p.GetDiskName()
	if diskName == "" {
		diskName = instName
		if !d.GetBoot() {
			diskName = fmt.Sprintf("%s-%d", instName, i)
		}
	}
	size := p.GetDiskSizeGb()
	if size == 0 && img != nil {
		size = img.GetDiskSizeGb()
	}
	if size == 0 {
		size = 375 // local SSD partitions are fixed-size
	}
	out.Kind = proto.String("compute#attachedDisk")
	out.Index = proto.Int32(int32(i))
	out.DiskSizeGb = proto.Int64(size)
	out.Boot = proto.Bool(d.GetBoot())
	out.Type = proto.String(orDefault(d.GetType(), "PERSISTENT"))
	out.Mode = proto.String(orDefault(d.GetMode(), "READ_WRITE"))
	out.Interface = proto.String(orDefault(d.GetInterface(), "SCSI"))
	out.AutoDelete = proto.Bool(d.GetAutoDelete())
	out.DeviceName = proto.String(orDefault(d.GetDeviceName(), fmt.Sprintf("persistent-disk-%d", i)))
	if out.GetType() == "PERSISTENT" {
		out.Source = proto.String(s.zoneURL(z.name) + "/disks/" + diskName)
	}
	if img != nil && len(out.GuestOsFeatures) == 0 {
		for _, f := range img.GetGuestOsFeatures() {
			out.GuestOsFeatures = append(out.GuestOsFeatures, proto.Clone(f).(*computepb.GuestOsFeature))
		}
	}
	return out
}

func (s *Server) validateNICs(plan *insertPlan, nics []*computepb.NetworkInterface) error {
	z := plan.zone
	if len(nics) == 0 {
		return invalidField("resource.networkInterfaces", "", "At least one network interface must be specified.")
	}
	region := s.world.regionByName[z.region]
	taken := map[string]bool{}
	for i, nic := range nics {
		field := fmt.Sprintf("resource.networkInterfaces[%d]", i)
		if nic.Network != nil {
			r, ok := s.parseRef(nic.GetNetwork())
			name, global := r.global("networks")
			if !ok || !global {
				return invalidField(field+".network", nic.GetNetwork(), "Must be the URL to a Compute resource of the correct type.")
			}
			if r.project != s.vpcProject() || name != defaultNetwork {
				return resourceNotFound(r.path())
			}
		}
		if nic.Subnetwork != nil {
			r, ok := s.parseRef(nic.GetSubnetwork())
			reg, name, regional := r.regional("subnetworks")
			if !ok || !regional {
				return invalidField(field+".subnetwork", nic.GetSubnetwork(), "Must be the URL to a Compute resource of the correct type.")
			}
			if r.project != s.vpcProject() || name != defaultNetwork || s.world.regionByName[reg] == nil {
				return resourceNotFound(r.path())
			}
			if reg != z.region {
				return invalidField(field+".subnetwork", nic.GetSubnetwork(),
					fmt.Sprintf("Subnetwork must be in region '%s', the region of the instance.", z.region))
			}
		}
		// Other nicType values (IDPF, MRDMA …) belong to machine series
		// the fake does not have; the enum check rejects unknown ones.
		switch nt := nic.GetNicType(); {
		case nt == "VIRTIO_NET" && gvnicOnly(plan.machine):
			return invalidField(field+".nicType", nt, fmt.Sprintf("Machine type '%s' supports only the GVNIC network interface.", plan.machine.name))
		case (nt == "GVNIC" || gvnicOnly(plan.machine)) && plan.bootImage != nil && !hasGuestOSFeature(plan.bootImage, "GVNIC"):
			// compute/docs/networking/using-gvnic: the image must
			// have the GVNIC guest OS feature.
			return invalidField(field+".nicType", orDefault(nt, "GVNIC"), fmt.Sprintf("The boot image '%s' does not support gVNIC (no GVNIC guest OS feature).", plan.bootImage.GetName()))
		}
		// Every NIC of a VM must be in a different VPC; the fake has one.
		if i > 0 {
			return invalidField(field+".network", orDefault(nic.GetNetwork(), "global/networks/default"), "Networks must be distinct for NICs attached to a VM.")
		}
		if nic.NetworkIP != nil {
			ip, err := netip.ParseAddr(nic.GetNetworkIP())
			if err != nil || !region.subnet.Contains(ip) {
				return invalidField(field+".networkIP", nic.GetNetworkIP(), fmt.Sprintf("IP address must be within the subnetwork range %s.", region.subnet))
			}
			if s.usedIPs[ip.String()] || taken[ip.String()] || ip == region.subnet.Addr() || ip == region.subnet.Addr().Next() {
				return invalidField(field+".networkIP", nic.GetNetworkIP(), "IP address is already in use or reserved.")
			}
			taken[ip.String()] = true
		}
		out := proto.Clone(nic).(*computepb.NetworkInterface)
		out.Kind = proto.String("compute#networkInterface")
		out.Name = proto.String(fmt.Sprintf("nic%d", i))
		out.Network = proto.String(s.networkURL())
		out.Subnetwork = proto.String(s.subnetURL(z.region))
		out.StackType = proto.String(orDefault(nic.GetStackType(), "IPV4_ONLY"))
		out.Fingerprint = proto.String(s.fingerprint())
		for _, ac := range out.AccessConfigs {
			ac.Kind = proto.String("compute#accessConfig")
			ac.Type = proto.String(orDefault(ac.GetType(), "ONE_TO_ONE_NAT"))
			ac.Name = proto.String(orDefault(ac.GetName(), "External NAT"))
			ac.NetworkTier = proto.String(orDefault(ac.GetNetworkTier(), "PREMIUM"))
		}
		plan.nics = append(plan.nics, out)
	}
	return nil
}

func validateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalidField("resource.labels", strconv.Itoa(len(labels))+" labels", fmt.Sprintf("At most %d labels are allowed.", maxLabels))
	}
	for _, k := range sortedKeys(labels) {
		if len(k) >= 128 || len(labels[k]) >= 128 {
			return invalidf("Invalid value for field 'resource.labels': '%s'. Label keys and values must be under 128 bytes.", k)
		}
		if !labelKeyRE.MatchString(k) {
			return invalidf("Invalid value for field 'resource.labels': '%s'. Label key '%s' violates format constraints. The key must start with a lowercase character, can only contain lowercase letters, numeric characters, underscores and dashes. The key can be at most 63 characters long.", k, k)
		}
		if v := labels[k]; !labelValueRE.MatchString(v) {
			return invalidf("Invalid value for field 'resource.labels.%s': '%s'. Label value '%s' violates format constraints. The value can only contain lowercase letters, numeric characters, underscores and dashes. The value can be at most 63 characters long.", k, v, v)
		}
	}
	return nil
}

func validateMetadata(md *computepb.Metadata) error {
	seen := map[string]bool{}
	total := 0
	for i, it := range md.GetItems() {
		k, v := it.GetKey(), it.GetValue()
		field := fmt.Sprintf("resource.metadata.items[%d]", i)
		if !metadataKeyRE.MatchString(k) {
			return invalidField(field+".key", k, "Metadata keys must match '[a-zA-Z0-9-_]{1,128}'.")
		}
		if seen[k] {
			return invalidField(field+".key", k, fmt.Sprintf("Duplicate metadata key '%s'.", k))
		}
		seen[k] = true
		if len(v) > maxMetadataValue {
			return invalidField(field+".value", fmt.Sprintf("<%d bytes>", len(v)), fmt.Sprintf("Metadata value for key '%s' exceeds the limit of %d bytes.", k, maxMetadataValue))
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataTotal {
		return invalidField("resource.metadata", fmt.Sprintf("<%d bytes>", total), fmt.Sprintf("Metadata exceeds the total size limit of %d bytes.", maxMetadataTotal))
	}
	return nil
}
