// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// What a pod may choose is the cluster admin's decision, not the pod
// author's: whoever may create a kata-remote pod must not boot an image of
// their own inside the VPC with the podVM tag and service account, nor run
// up a bill the admin did not allow. Upstream's gcp provider takes the
// image annotation as is and, with an empty GCP_INSTANCE_TYPES, allows
// only its default type (VerifyCloudInstanceType, src/cloud-providers/
// util.go at v0.22.0, 38d0fcf7); here the empty list allows the profiles.

// allowAuto in GCP_INSTANCE_TYPES lets fit choose its automatic shapes
// (N1 predefined and custom with T4s, E2/N1 for CPU-only pods); an empty
// list allows them too, within the caps.
const allowAuto = "auto"

// Annotation names as a pod author writes them, for error messages.
const (
	annotImage       = annotations.Image
	annotMachineType = annotations.MachineType
)

// imageKey is an image in one canonical form, so that "podvm-t4",
// "global/images/podvm-t4" and the https URL compare equal; it is also
// the form sent to GCE, so what was compared is what is created.
func (c *Config) imageKey(image string) (string, error) {
	ref, err := c.parseImage(image)
	if err != nil {
		return "", err
	}
	return ref.path(), nil
}

// admitImage is the pod's image annotation as the provider sends it: ""
// (the configured image, or the template's) or an image the admin
// configured — PODVM_IMAGE_NAME, GCP_PROFILE_IMAGES, a profile's image:
// or GCP_ALLOWED_IMAGES — in the canonical form it was compared in.
// Every create and every plan passes here before either mode plans, so
// template mode is held to the same list as profiles.
func (c *Config) admitImage(cat *catalog.Catalog, podImage string) (string, error) {
	if podImage == "" {
		return "", nil
	}
	want, err := c.imageKey(podImage)
	if err != nil {
		return "", fmt.Errorf("pod annotation %s: %q is not an image name (%w)", annotImage, podImage, err)
	}
	allowed := append([]string{c.ImageName}, c.AllowedImages...)
	for _, img := range c.ProfileImages {
		allowed = append(allowed, img)
	}
	if cat != nil {
		for _, p := range cat.Profiles() {
			allowed = append(allowed, p.Image)
		}
	}
	for _, img := range allowed {
		if img == "" {
			continue
		}
		if k, err := c.imageKey(img); err == nil && k == want {
			return want, nil
		}
	}
	return "", fmt.Errorf("pod annotation %s: image %q is not allowed; remove the annotation, or ask the admin to add it to GCP_ALLOWED_IMAGES", annotImage, want)
}

// listed reports whether the admin named this shape in GCP_INSTANCE_TYPES.
func (c *Config) listed(p catalog.Profile) bool {
	return slices.Contains(c.InstanceTypes, p.Name) || slices.Contains(c.InstanceTypes, p.MachineType)
}

// nameAllowed is the allow-list for the machine_type annotation: the
// list's entries, or, with an empty list, the catalog's profile names and
// the machine types of its non-explicit profiles (so n1-standard-8 with one
// T4 may be named, a3-highgpu-1g may not).
func (c *Config) nameAllowed(cat *catalog.Catalog, name string) error {
	if len(c.InstanceTypes) > 0 {
		if slices.Contains(c.InstanceTypes, name) {
			return nil
		}
		return fmt.Errorf("pod annotation %s: %q is not in GCP_INSTANCE_TYPES (%s); use one of those, or ask the cluster admin to add it", annotMachineType, name, c.InstanceTypes.String())
	}
	var names []string
	for _, p := range cat.Profiles() {
		names = append(names, p.Name)
		if p.Name == name || (!p.Explicit && p.MachineType == name) {
			return nil
		}
	}
	return fmt.Errorf("pod annotation %s: %q is not a profile (%s) or a profile's machine type; name a profile, or ask the admin to list it in GCP_INSTANCE_TYPES", annotMachineType, name, strings.Join(names, ", "))
}

// fitAllowed says why fit may not choose a shape, or "" if it may.
func (c *Config) fitAllowed(p catalog.Profile) string {
	if len(c.InstanceTypes) == 0 {
		return ""
	}
	if c.listed(p) || (p.Name == catalog.AutoProfileName && slices.Contains(c.InstanceTypes, allowAuto)) {
		return ""
	}
	// A family the admin listed by accelerator is allowed automatically.
	if f, ok := p.Family(); ok && p.Name == catalog.AutoProfileName && !f.Automatic && slices.Contains(c.InstanceTypes, f.Accelerator) {
		return ""
	}
	return fmt.Sprintf("%s (%s) is not in GCP_INSTANCE_TYPES (%s)", p.Name, catalog.Describe(p), c.InstanceTypes.String())
}

// familyAllowed says why fit may not choose a synthesized shape for its
// GPU family, or "" if it may: fit chooses the automatic families' shapes
// (the T4's), and another family's only when the admin lists its
// accelerator type in GCP_INSTANCE_TYPES. Profiles are not held to this:
// they are the admin's own shapes.
func (c *Config) familyAllowed(p catalog.Profile) string {
	if p.Name != catalog.AutoProfileName || p.GPUModel() == "" {
		return ""
	}
	f, ok := p.Family()
	if !ok || f.Automatic || slices.Contains(c.InstanceTypes, f.Accelerator) {
		return ""
	}
	return fmt.Sprintf("%s holds it, but %s is not chosen automatically; name a profile or machine type with it, or ask the admin to add %s to GCP_INSTANCE_TYPES",
		catalog.Describe(p), f.Accelerator, f.Accelerator)
}

// caps are the per-pod limits in force.
type caps struct {
	gpus, vcpus, memoryMiB int64
	// derived is set for a limit the admin did not set, taken from the
	// largest allowed shape (from).
	derivedGPUs, derivedVCPUs, derivedMemory bool
	fromGPUs, fromVCPUs, fromMemory          string
}

// podCaps are GCP_MAX_GPUS_PER_POD, GCP_MAX_VCPUS_PER_POD and
// GCP_MAX_MEMORY_PER_POD; an unset (0) one is the largest of the shapes the
// admin allows: the non-explicit profiles fit may choose, the profiles
// GCP_INSTANCE_TYPES lists by name, and the machine types it lists. The
// limits bind every shape, the ones a pod names too: naming an explicit
// profile (h100-cc) beyond them needs the admin to raise the limit or to
// list it. A listed N1 type counts as one T4, the least it attaches:
// listing a machine type says nothing about how many GPUs it may carry.
func (c *Config) podCaps(cat *catalog.Catalog) caps {
	var lim caps
	consider := func(name string, gpus, vcpus, mem int64) {
		if gpus > lim.gpus {
			lim.gpus, lim.fromGPUs = gpus, name
		}
		if vcpus > lim.vcpus {
			lim.vcpus, lim.fromVCPUs = vcpus, name
		}
		if mem > lim.memoryMiB {
			lim.memoryMiB, lim.fromMemory = mem, name
		}
	}
	for _, p := range cat.Profiles() {
		if (!p.Explicit && c.fitAllowed(p) == "") || slices.Contains(c.InstanceTypes, p.Name) {
			consider(p.Name, p.GPUs(), p.VCPUs, p.MemoryMiB)
		}
	}
	for _, name := range c.InstanceTypes {
		if s, ok := catalog.LookupShape(name); ok {
			gpus := int64(s.BundledCount)
			if f, ok := catalog.AttachedFamilyFor(name); ok && !s.SharedCore {
				gpus = int64(f.AttachLimits[0].Count)
			}
			consider(name, gpus, s.VCPUs, s.MemoryMiB)
		}
	}
	if len(c.InstanceTypes) > 0 {
		// The list decides the largest shape: say so, so that the admin
		// sees both settings that move the limit.
		for _, f := range []*string{&lim.fromGPUs, &lim.fromVCPUs, &lim.fromMemory} {
			*f += ", from GCP_INSTANCE_TYPES"
		}
	}
	if c.MaxGPUsPerPod > 0 {
		lim.gpus = int64(c.MaxGPUsPerPod)
	} else {
		lim.derivedGPUs = true
	}
	if c.MaxVCPUsPerPod > 0 {
		lim.vcpus = int64(c.MaxVCPUsPerPod)
	} else {
		lim.derivedVCPUs = true
	}
	if c.MaxMemoryPerPod > 0 {
		lim.memoryMiB = int64(c.MaxMemoryPerPod)
	} else {
		lim.derivedMemory = true
	}
	return lim
}

// setOnly are the limits the admin set, the others lifted: a template is
// the admin's one shape, so the limits derived from profiles do not apply.
func (l caps) setOnly() caps {
	if l.derivedGPUs {
		l.gpus = math.MaxInt64
	}
	if l.derivedVCPUs {
		l.vcpus = math.MaxInt64
	}
	if l.derivedMemory {
		l.memoryMiB = math.MaxInt64
	}
	return l
}

// capError names the setting that refuses n against limit.
func capError(what string, n, limit int64, unit, setting, annotation string, derived bool, from string) error {
	how := fmt.Sprintf("the cluster allows at most %d per pod (%s)", limit, setting)
	ask := "raise " + setting
	if derived {
		how = fmt.Sprintf("the cluster allows at most %d per pod: %s is unset, so the limit is the largest allowed shape's (%s)", limit, setting, from)
		ask = fmt.Sprintf("raise %s, or list the shape in GCP_INSTANCE_TYPES", setting)
	}
	return fmt.Errorf("%s: %d %s; %s; lower the pod's request (%s), or ask the cluster admin to %s", what, n, unit, how, annotation, ask)
}

func (l caps) gpuError(what string, n int64) error {
	return capError(what, n, l.gpus, "GPU(s)", "GCP_MAX_GPUS_PER_POD", "nvidia.com/gpu or default_gpus", l.derivedGPUs, l.fromGPUs)
}

func (l caps) vcpuError(what string, n int64) error {
	return capError(what, n, l.vcpus, "vCPU(s)", "GCP_MAX_VCPUS_PER_POD", "cpu or default_vcpus", l.derivedVCPUs, l.fromVCPUs)
}

func (l caps) memoryError(what string, n int64) error {
	return capError(what, n, l.memoryMiB, "MiB", "GCP_MAX_MEMORY_PER_POD", "memory or default_memory", l.derivedMemory, l.fromMemory)
}

// checkShape refuses a shape over a limit, chosen or named alike: a named
// shape is still the admin's to size.
func (l caps) checkShape(p catalog.Profile) error {
	what := fmt.Sprintf("shape %s (%s)", p.Name, catalog.Describe(p))
	switch {
	case p.GPUs() > l.gpus:
		return l.gpuError(what, p.GPUs())
	case p.VCPUs > l.vcpus:
		return l.vcpuError(what, p.VCPUs)
	case p.MemoryMiB > l.memoryMiB:
		return l.memoryError(what, p.MemoryMiB)
	}
	return nil
}

// checkRequest refuses a request over a limit before any shape is sought,
// so the error names the pod's own numbers.
func (l caps) checkRequest(r catalog.Request, named bool) error {
	const what = "pod request"
	if r.GPUs > l.gpus {
		return l.gpuError(what, r.GPUs)
	}
	if named {
		// A named shape is what the pod gets, whatever vCPUs and memory
		// it asks for; checkShape bounds it.
		return nil
	}
	if r.VCPUs > l.vcpus {
		return l.vcpuError(what, r.VCPUs)
	}
	if r.MemoryMiB > l.memoryMiB {
		return l.memoryError(what, r.MemoryMiB)
	}
	return nil
}

// checkDeclaredGPUs refuses a named shape with more GPUs than the pod
// declares (nvidia.com/gpu, which the peer-pods webhook turns into
// default_gpus, or default_gpus itself): the cost guard counts declared
// GPUs, so a CPU-only pod naming t4-4 would get four GPUs nobody counted.
// T4s attach 1, 2 or 4 at a time, so three declared may get four. A shape
// the admin listed in GCP_INSTANCE_TYPES by name is the admin's decision.
func (c *Config) checkDeclaredGPUs(p catalog.Profile, r catalog.Request) error {
	if p.GPUs() <= r.GPUs || c.listed(p) {
		return nil
	}
	if roundsUpTo(p, r.GPUs) {
		return nil
	}
	return fmt.Errorf("pod annotation %s: %q has %d GPU(s), the pod requests %d; request nvidia.com/gpu: %d, or ask the admin to list %q in GCP_INSTANCE_TYPES", annotMachineType, r.InstanceType, p.GPUs(), r.GPUs, p.GPUs(), r.InstanceType)
}

// validateAllow checks the allow-list and cap settings.
func (c *Config) validateAllow() error {
	for _, img := range c.AllowedImages {
		if _, err := c.imageKey(img); err != nil {
			return fmt.Errorf("GCP_ALLOWED_IMAGES: %q: %w", img, err)
		}
	}
	for name, v := range map[string]int{"GCP_MAX_GPUS_PER_POD": c.MaxGPUsPerPod, "GCP_MAX_VCPUS_PER_POD": c.MaxVCPUsPerPod, "GCP_MAX_MEMORY_PER_POD": c.MaxMemoryPerPod} {
		if v < 0 {
			return fmt.Errorf("%s: %d is negative; use 0 for the largest allowed profile's, or a positive limit", name, v)
		}
	}
	for name, v := range map[string]int{"GCP_MAX_GPUS_TOTAL": c.MaxGPUsTotal, "GCP_MAX_GPUS_PER_NAMESPACE": c.MaxGPUsPerNamespace} {
		if v < 0 {
			return fmt.Errorf("%s: %d is negative; use 0 for no limit", name, v)
		}
	}
	return nil
}

// checkTemplateShape holds a template's VM to what a profile is held to:
// no more GPUs than the pod declares (the cost guard counts declared GPUs,
// so a CPU-only pod must not get the template's T4 uncounted; T4s attach
// 1, 2 or 4 at a time, so three declared may get four), and the per-pod
// limits the admin set. The template is the admin's one shape, so limits
// derived from profiles do not apply to it.
func (c *Config) checkTemplateShape(cat *catalog.Catalog, props *computepb.InstanceProperties, spec provider.InstanceTypeSpec) error {
	mt := lastSegment(props.GetMachineType())
	model := ""
	if names := acceleratorNames(props); len(names) > 0 {
		model = names[0]
	}
	p := catalog.Profile{Name: "template", MachineType: mt}.WithGPUs(templateGPUs(props), model)
	if s, ok := catalog.LookupShape(mt); ok {
		p.VCPUs, p.MemoryMiB = s.VCPUs, s.MemoryMiB
	}
	switch have := p.GPUs(); {
	case spec.GPUs > have:
		return fmt.Errorf("pod requests %d GPU(s) but GCP_INSTANCE_TEMPLATE %s gives %d; use a template with more GPUs or lower the pod's nvidia.com/gpu request", spec.GPUs, c.InstanceTemplate, have)
	case have > spec.GPUs && !roundsUpTo(p, spec.GPUs):
		return fmt.Errorf("GCP_INSTANCE_TEMPLATE %s gives %d GPU(s) but the pod requests %d; request nvidia.com/gpu: %d (the cost guard counts what a pod requests), or use a template without GPUs for such pods", c.InstanceTemplate, have, spec.GPUs, have)
	}
	// An unknown machine type's vCPUs and memory are unknown (0): only its
	// GPUs are checked.
	return c.podCaps(cat).setOnly().checkShape(p)
}

// roundsUpTo reports an attached-GPU shape that is the attachable count a
// request of declared GPUs rounds up to (3 T4s → 4).
func roundsUpTo(p catalog.Profile, declared int64) bool {
	f, ok := p.Family()
	if !ok || f.AttachSeries == "" || declared <= 0 {
		return false
	}
	n, ok := f.NextCount(declared)
	return ok && int64(n) >= p.GPUs()
}
