// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v2"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// Profile is one podVM shape the provider may create.
type Profile struct {
	Name        string `yaml:"name"`
	MachineType string `yaml:"machineType"`
	// Accelerator is the GCE accelerator type to attach (nvidia-tesla-t4);
	// empty for CPU-only profiles and for types with a bundled GPU.
	Accelerator      string `yaml:"accelerator,omitempty"`
	AcceleratorCount int32  `yaml:"acceleratorCount,omitempty"`
	// VCPUs and MemoryMiB are derived from known machine types and only
	// needed for others.
	VCPUs     int64 `yaml:"vcpus,omitempty"`
	MemoryMiB int64 `yaml:"memoryMiB,omitempty"`
	// ConfidentialType is TDX, SEV or SEV_SNP; empty for a plain VM.
	ConfidentialType string `yaml:"confidentialType,omitempty"`
	MinCPUPlatform   string `yaml:"minCpuPlatform,omitempty"`
	// ProvisioningModel overrides the provider-wide model (STANDARD, SPOT).
	ProvisioningModel string `yaml:"provisioningModel,omitempty"`
	// Image is the podVM image of this profile (same forms as
	// PODVM_IMAGE_NAME); empty uses GCP_PROFILE_IMAGES, then
	// PODVM_IMAGE_NAME. A confidential profile needs one of its own: the
	// T4 podVM image is not a confidential image.
	Image string `yaml:"image,omitempty"`
	// DiskType overrides GCP_DISK_TYPE for this profile's boot disk.
	DiskType string `yaml:"diskType,omitempty"`
	// CacheImage overrides GCP_CACHE_IMAGE for this profile's podVMs
	// (same forms as PODVM_IMAGE_NAME).
	CacheImage string `yaml:"cacheImage,omitempty"`
	// CacheVerity is CacheImage's dm-verity value (GCP_CACHE_VERITY's
	// form); required with CacheImage.
	CacheVerity string `yaml:"cacheVerity,omitempty"`
	// Explicit profiles are used only when a pod names them, never picked
	// by fit: a 1-GPU pod must not land on an H100 by accident.
	Explicit bool `yaml:"explicit,omitempty"`

	// gpus counts attached or bundled GPUs; filled by normalize.
	gpus int64
	// gpuModel is the accelerator the GPUs are, attached or bundled.
	gpuModel string
	// family is gpuModel's row of the GPU catalogue, resolved with it
	// (setGPUs) so that no check looks the accelerator up by name again;
	// nil without GPUs or for an accelerator the catalogue lacks.
	family *GPUFamily
}

// GPUs is the number of GPUs a podVM of this profile has.
func (p Profile) GPUs() int64 { return p.gpus }

// GPUModel is the accelerator type of the profile's GPUs, or "".
func (p Profile) GPUModel() string { return p.gpuModel }

// Family is the GPU catalogue's row for the profile's GPUs, resolved when
// the profile was (Normalize, Synthesize, WithGPUs); false without GPUs or
// for an accelerator the catalogue does not know.
func (p Profile) Family() (*GPUFamily, bool) { return p.family, p.family != nil }

// setGPUs records the profile's GPUs and resolves their family, once.
func (p *Profile) setGPUs(count int64, model string) {
	p.gpus, p.gpuModel = count, model
	p.family, _ = FamilyByAccelerator(model)
}

// WithGPUs is p holding count GPUs of model: for a shape the provider did
// not choose, whose GPUs GCE reports (an instance template's), since a
// profile's GPUs are otherwise resolved only when it is normalized.
func (p Profile) WithGPUs(count int64, model string) Profile {
	p.setGPUs(count, model)
	return p
}

// builtinProfiles are the named shapes every deployment starts with. The
// T4 profiles are the smallest N1 type that gives each GPU four vCPUs (the
// floor automatic selection keeps too); h100-cc is the confidential-GPU
// shape, explicit only, sold only as Spot, and without an image until one
// is configured (GCP_PROFILE_IMAGES=h100-cc=…): it needs a TDX image.
func builtinProfiles() []Profile {
	return []Profile{
		{Name: "cpu-2", MachineType: "e2-medium"},
		{Name: "cpu-4", MachineType: "n1-standard-4"},
		{Name: "t4-1", MachineType: "n1-standard-4", Accelerator: "nvidia-tesla-t4", AcceleratorCount: 1},
		{Name: "t4-2", MachineType: "n1-standard-8", Accelerator: "nvidia-tesla-t4", AcceleratorCount: 2},
		{Name: "t4-4", MachineType: "n1-standard-16", Accelerator: "nvidia-tesla-t4", AcceleratorCount: 4},
		{Name: "h100-cc", MachineType: "a3-highgpu-1g", ConfidentialType: "TDX", MinCPUPlatform: "Intel Sapphire Rapids", ProvisioningModel: setting.ProvisioningSpot, Explicit: true},
	}
}

var profileNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// confidentialFamilies lists, per confidential type, the machine-type
// prefixes GCE runs it on.
var confidentialFamilies = map[string][]string{
	"TDX":     {"c3-standard-", "a3-highgpu-1g"},
	"SEV":     {"n2d-", "c2d-", "c3d-"},
	"SEV_SNP": {"n2d-"},
}

// normalize fills derived fields and rejects what GCE would reject; field
// names the profile in error messages, e.g. "profiles[2]".
func (p *Profile) Normalize(field string) error {
	if !profileNameRE.MatchString(p.Name) {
		return fmt.Errorf("%s.name: %q must be lowercase letters, digits and '-', starting with a letter (at most 63)", field, p.Name)
	}
	field = fmt.Sprintf("%s (%s)", field, p.Name)
	if p.MachineType == "" {
		return fmt.Errorf("%s.machineType: required, e.g. n1-standard-4", field)
	}
	shape, known := LookupShape(p.MachineType)
	if known && shape.Custom {
		if err := CustomN1Error(shape.VCPUs, shape.MemoryMiB); err != nil {
			return fmt.Errorf("%s.machineType: %s: %w", field, p.MachineType, err)
		}
	}
	if !known {
		if p.VCPUs <= 0 || p.MemoryMiB <= 0 {
			return fmt.Errorf("%s: machine type %q is not in the built-in catalogue; set vcpus and memoryMiB in the profile", field, p.MachineType)
		}
		shape = Shape{VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB}
	}
	if p.VCPUs == 0 {
		p.VCPUs = shape.VCPUs
	}
	if p.MemoryMiB == 0 {
		p.MemoryMiB = shape.MemoryMiB
	}
	switch {
	case shape.BundledAccelerator != "" && p.Accelerator != "":
		return fmt.Errorf("%s.accelerator: %s comes with %d×%s; remove accelerator and acceleratorCount", field, p.MachineType, shape.BundledCount, shape.BundledAccelerator)
	case shape.BundledAccelerator != "":
		p.setGPUs(int64(shape.BundledCount), shape.BundledAccelerator)
	case p.Accelerator == "" && p.AcceleratorCount != 0:
		return fmt.Errorf("%s.accelerator: acceleratorCount is %d but no accelerator is named; set accelerator: %s", field, p.AcceleratorCount, DefaultFamily().Accelerator)
	case p.Accelerator != "":
		if p.AcceleratorCount == 0 {
			p.AcceleratorCount = 1
		}
		if shape.SharedCore {
			return fmt.Errorf("%s.machineType: GPUs cannot attach to shared-core type %s; use an N1 type such as n1-standard-4", field, p.MachineType)
		}
		p.setGPUs(int64(p.AcceleratorCount), p.Accelerator)
		// A GPU the catalogue knows is held to its row; another is left
		// to the API.
		if f, ok := p.Family(); ok {
			if err := CheckAttachedShape(field, p.MachineType, f, p.AcceleratorCount, shape); err != nil {
				return err
			}
		}
	}
	if p.ConfidentialType != "" {
		if err := checkConfidential(field, p.MachineType, p.ConfidentialType); err != nil {
			return err
		}
	}
	if err := checkMinCPUPlatform(field, p.MachineType, p.MinCPUPlatform); err != nil {
		return err
	}
	if p.DiskType != "" {
		if strings.Contains(p.DiskType, "/") {
			return fmt.Errorf("%s.diskType: %q: give the disk type's name (pd-balanced), not a URL; the provider adds the zone", field, p.DiskType)
		}
		if err := CheckDiskType(field+".diskType", p.MachineType, p.DiskType); err != nil {
			return err
		}
	}
	switch p.ProvisioningModel {
	case "", setting.ProvisioningStandard, setting.ProvisioningSpot:
	default:
		return fmt.Errorf("%s.provisioningModel: %q is not STANDARD or SPOT", field, p.ProvisioningModel)
	}
	if sold, note := SoldModels(p.MachineType); p.ProvisioningModel != "" && !slices.Contains(sold, p.ProvisioningModel) {
		return fmt.Errorf("%s.provisioningModel: %s: %s; set provisioningModel: %s", field, p.ProvisioningModel, note, sold[0])
	}
	return nil
}

// checkConfidential refuses confidential computing where GCE has none. N1
// gets its own message: asking for a confidential T4 is the likely mistake.
func checkConfidential(field, machineType, ccType string) error {
	if isN1(machineType) {
		return fmt.Errorf("%s.confidentialType: N1 (the T4's machine types) has no Confidential VM; drop confidentialType, or use profile h100-cc", field)
	}
	families, ok := confidentialFamilies[ccType]
	if !ok {
		return fmt.Errorf("%s.confidentialType: %q is not TDX, SEV or SEV_SNP", field, ccType)
	}
	for _, f := range families {
		if strings.HasPrefix(machineType, f) {
			return nil
		}
	}
	return fmt.Errorf("%s.confidentialType: %s does not run on %s; use one of %s", field, ccType, machineType, strings.Join(families, ", "))
}

// profileFile is the document GCP_PROFILES_FILE or GCP_PROFILES holds.
type profileFile struct {
	Profiles []Profile `yaml:"profiles"`
}

// parseProfiles reads a YAML (or JSON) profile document strictly, so a
// misspelt key is an error rather than a silently ignored setting.
func parseProfiles(source string, data []byte) ([]Profile, error) {
	var doc profileFile
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w (expected a document with a 'profiles' list)", source, err)
	}
	return doc.Profiles, nil
}

// Catalog is the normalized set of profiles, built-in first, user
// profiles replacing built-ins of the same name.
type Catalog struct {
	profiles []Profile
	// prices rank the shapes that fit a request.
	prices *PriceTable
}

// New builds a catalog from the built-ins and user documents: the
// content of a file (path) and an inline document (env), either may be empty.
func New(filePath, inline string) (*Catalog, error) {
	all := builtinProfiles()
	var user []Profile
	if filePath != "" {
		data, err := os.ReadFile(filePath)
		if err != nil {
			return nil, fmt.Errorf("GCP_PROFILES_FILE: %w", err)
		}
		ps, err := parseProfiles("GCP_PROFILES_FILE "+filePath, data)
		if err != nil {
			return nil, err
		}
		user = append(user, ps...)
	}
	if strings.TrimSpace(inline) != "" {
		ps, err := parseProfiles("GCP_PROFILES", []byte(inline))
		if err != nil {
			return nil, err
		}
		user = append(user, ps...)
	}
	index := map[string]int{}
	for i, p := range all {
		index[p.Name] = i
	}
	for _, p := range user {
		if i, ok := index[p.Name]; ok {
			all[i] = p
			continue
		}
		index[p.Name] = len(all)
		all = append(all, p)
	}
	for i := range all {
		if err := all[i].Normalize(fmt.Sprintf("profiles[%d]", i)); err != nil {
			return nil, err
		}
	}
	prices, err := LoadPrices()
	if err != nil {
		return nil, err
	}
	return &Catalog{profiles: all, prices: prices}, nil
}

// Prices is the price table the catalog ranks shapes by.
func (c *Catalog) Prices() *PriceTable { return c.prices }

// Profiles returns the catalog's profiles.
func (c *Catalog) Profiles() []Profile { return append([]Profile(nil), c.profiles...) }

// Lookup returns the profile of that name.
func (c *Catalog) Lookup(name string) (Profile, bool) {
	for _, p := range c.profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}
