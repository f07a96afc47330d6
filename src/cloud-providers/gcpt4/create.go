// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"encoding/base64"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// cleanupTimeout bounds deleting a VM whose create failed; it runs on a
// context of its own because the create's may be what expired. It also
// bounds every DeleteInstance.
const cleanupTimeout = 5 * time.Minute

// createTimeout bounds CreateInstance's walk over the offerings, whatever
// its caller's context: kata's remote hypervisor gives StartVM 600 s by
// default (remote_hypervisor_timeout, src/runtime/config/
// configuration-remote.toml.in at kata cf82bb35), and CAA's StartVM runs
// CreateInstance inside that call, so a longer create serves nobody.
const createTimeout = 600 * time.Second

// createPlan is what a create walks, decided once per create.
type createPlan struct {
	describe string
	// accelerator drives GCP_ZONES=auto discovery.
	accelerator string
	steps       []walkStep
	// templateRegion is set for a regional template: zones of other
	// regions cannot use it and are skipped.
	templateRegion string
}

// walkStep is one shape under one provisioning model, tried in every zone.
type walkStep struct {
	describe string
	model    string
	// shape identifies the offering (cache key, requestId).
	machineType, accelerator string
	count                    int64
	build                    func(zone string) *computepb.Instance
	// templateMachineType is a template step's machine type (shown in
	// Events and priced); "" for profile steps.
	templateMachineType string
}

func (st walkStep) shapeKey() string {
	return fmt.Sprintf("%s/%s/%d", st.machineType, st.accelerator, st.count)
}

func (st walkStep) offering(zone string) offering {
	return offering{model: st.model, machineType: st.machineType, accelerator: st.accelerator, count: st.count, zone: zone}
}

// models are the provisioning models the plan tries, in order.
func (cp createPlan) models() []string {
	var out []string
	for _, st := range cp.steps {
		if !slices.Contains(out, st.model) {
			out = append(out, st.model)
		}
	}
	return out
}

// CreateInstance creates the podVM for a pod. It walks the offerings the
// selection ordered — shapes cheapest first under each provisioning model,
// each in every zone (GCE's zonesAvailable hint first) — skips offerings
// that stocked out within the TTL and regions whose quota is exhausted,
// and falls back from Spot to standard when allowed. Calling it again for
// the same pod and sandbox returns the same VM instead of making a second.
func (p *Provider) CreateInstance(ctx context.Context, podName, sandboxID string, cloudConfig cloudinit.CloudConfigGenerator, spec provider.InstanceTypeSpec) (_ *provider.Instance, err error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.inflight.Done()
	if p.cfg.ClusterID == "" {
		return nil, errNoClusterID()
	}
	ctx, cancel := context.WithTimeout(ctx, p.createTimeout)
	defer cancel()
	name := util.GenerateInstanceName(podName, sandboxID, maxInstanceName)
	vm := podVM{name: name, podName: podName, sandboxID: sandboxID, namespace: podNamespace(cloudConfig)}
	// Every way a create ends without a VM is told on the pod, once.
	defer func() { p.recordCreateFailed(vm, err) }()
	userData, err := cloudConfig.Generate()
	if err != nil {
		return nil, fmt.Errorf("generating the podVM cloud-config: %w", err)
	}
	// The image allow-list runs here, before either mode plans: template
	// mode swaps the image into the template's boot disk, so it must pass
	// the same list. What is sent is the form that was compared.
	if spec.Image, err = p.cfg.admitImage(p.catalog, spec.Image); err != nil {
		return nil, notAllowed(err)
	}
	vm.userData = base64.StdEncoding.EncodeToString([]byte(userData))
	vm.image = spec.Image

	plan, err := p.planCreate(ctx, vm, spec)
	if err != nil {
		return nil, err
	}
	release, err := p.reserveGPUs(ctx, vm, plan)
	if err != nil {
		return nil, err
	}
	defer release()
	vlog := p.vmLogger(fmt.Sprintf("pod %s, podVM %s (%s): ", podName, name, plan.describe))
	zones, err := p.zonesFor(ctx, plan.accelerator)
	if err != nil {
		return nil, err
	}
	var tried attempts
	zones, err = plan.usableZones(zones, &tried)
	if err != nil {
		return nil, err
	}
	quotaRegions := map[string]map[string]string{}
	for _, st := range plan.steps {
		if quotaRegions[st.model] == nil {
			quotaRegions[st.model] = map[string]string{}
		}
		inst, done, err := p.tryZones(ctx, vlog, vm, plan, st, zones, &tried, quotaRegions[st.model])
		if done {
			if err == nil {
				p.watchBoot(vm, inst, st.count)
			}
			return inst, err
		}
	}
	return nil, tried.noCapacity(vm.name, plan, p.cfg)
}

// usableZones drops the zones a regional template cannot serve, noting
// them in tried; none left is an error naming the fix.
func (cp createPlan) usableZones(zones []string, tried *attempts) ([]string, error) {
	if cp.templateRegion == "" {
		return zones, nil
	}
	var out []string
	for _, z := range zones {
		if regionOf(z) == cp.templateRegion {
			out = append(out, z)
		} else {
			tried.add(z, "-", "skipped: the regional template is in "+cp.templateRegion)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("creating a podVM from %s: the template is regional to %s and none of the zones (%s) is in it; use zones of %s or a global template", cp.describe, cp.templateRegion, strings.Join(zones, ", "), cp.templateRegion)
	}
	return out, nil
}

// tryZones tries one shape under one provisioning model in each zone.
// done is false when every zone was out of capacity or quota for it, so
// the next step may be tried. quotaRegions (region → metric) is the
// model's: a regional quota exhausted for one shape is for the next too.
func (p *Provider) tryZones(ctx context.Context, vlog *log.Logger, vm podVM, plan createPlan, st walkStep, zones []string, tried *attempts, quotaRegions map[string]string) (*provider.Instance, bool, error) {
	model := st.model
	queue := append([]string(nil), zones...)
	for len(queue) > 0 {
		zone := queue[0]
		queue = queue[1:]
		if metric, ok := quotaRegions[regionOf(zone)]; ok {
			tried.add(zone, model, "skipped: "+metric+" quota exhausted in "+regionOf(zone))
			continue
		}
		off := st.offering(zone)
		if until, ok := p.offerings.unavailableUntil(off); ok {
			tried.add(zone, model, "skipped: out of capacity until "+until.UTC().Format(time.TimeOnly))
			continue
		}
		if !tried.requested {
			tried.requested = true
			tried.since = time.Now()
			p.recordRequested(vm, st, zone)
		}
		inst, gerr, err := p.createInZone(ctx, vlog, vm, zone, st, st.build(zone))
		if err == nil {
			ip := ""
			if len(inst.IPs) > 0 {
				ip = inst.IPs[0].String()
			}
			p.recordCreated(vm, st, zone, ip, tried.since)
			return inst, true, nil
		}
		if gerr == nil {
			return inst, true, err
		}
		switch gerr.kind {
		case failStockout:
			p.offerings.markUnavailable(off)
			tried.add(zone, model, gerr.code)
			tried.stockouts++
			vlog.Printf("%s out of capacity for %s %s (%s), trying the next zone; GCE names zones with capacity: %v", zone, model, st.describe, gerr.code, gerr.zonesAvailable)
			queue = preferZones(queue, gerr.zonesAvailable)
			p.recordStockout(vm, st, zone, gerr.code, p.nextZone(queue, quotaRegions, st))
		case failQuota:
			tried.add(zone, model, "QUOTA_EXCEEDED "+gerr.quotaMetric)
			tried.quota = append(tried.quota, quotaHit{metric: gerr.quotaMetric, region: regionOf(zone), model: model})
			p.recordQuota(vm, st, zone, gerr.quotaMetric)
			if globalQuota(gerr.quotaMetric) {
				// No zone, region or model can help: fail now.
				return inst, true, fmt.Errorf("%w: %w", tried.noCapacity(vm.name, plan, p.cfg), gerr)
			}
			quotaRegions[regionOf(zone)] = gerr.quotaMetric
			vlog.Printf("%s quota exhausted in %s for %s, skipping the region", gerr.quotaMetric, regionOf(zone), model)
		default:
			return inst, true, err
		}
	}
	return nil, false, nil
}

// nextZone is the zone the walk tries after a stockout, for the Event:
// the first in queue not skipped for quota or a recent stockout.
func (p *Provider) nextZone(queue []string, quotaRegions map[string]string, st walkStep) string {
	for _, z := range queue {
		if _, ok := quotaRegions[regionOf(z)]; ok {
			continue
		}
		if _, ok := p.offerings.unavailableUntil(st.offering(z)); ok {
			continue
		}
		return z
	}
	return ""
}

// globalQuota reports quotas that no other zone or region can relieve.
func globalQuota(metric string) bool {
	return strings.HasSuffix(metric, "_ALL_REGIONS")
}

// attempts records what a create tried, for the error a user reads.
type attempts struct {
	lines     []string
	stockouts int
	quota     []quotaHit
	// requested is set at the walk's first insert, since is its time.
	requested bool
	since     time.Time
}

type quotaHit struct{ metric, region, model string }

func (a *attempts) add(zone, model, outcome string) {
	a.lines = append(a.lines, fmt.Sprintf("%s (%s): %s", zone, model, outcome))
}

// noCapacity says what was tried, what GCE answered, and the fixes.
func (a *attempts) noCapacity(name string, plan createPlan, cfg Config) error {
	var fixes []string
	for _, q := range a.quota {
		// Zones of one region report the same quota: advise once.
		if f := quotaAdvice(q.metric, q.region, q.model == setting.ProvisioningSpot); !slices.Contains(fixes, f) {
			fixes = append(fixes, f)
		}
	}
	if a.stockouts > 0 || len(a.lines) > len(a.quota) {
		if cfg.autoZones() {
			fixes = append(fixes, "retry later (stockouts usually clear within minutes to hours)")
		} else {
			fixes = append(fixes, "add zones that offer the GPU to GCP_ZONES (or set GCP_ZONES=auto), or retry later")
		}
	}
	models := plan.models()
	switch {
	case !slices.Contains(models, setting.ProvisioningSpot):
		fixes = append(fixes, "allow Spot capacity with GCP_PROVISIONING_MODEL=SPOT")
	case len(models) == 1 && !plan.spotOnly():
		fixes = append(fixes, "allow falling back to standard capacity with GCP_SPOT_FALLBACK=true")
	}
	return fmt.Errorf("creating podVM %s (%s): %w; tried %s; to fix: %s", name, plan.describe, ErrNoCapacity, strings.Join(a.lines, "; "), strings.Join(fixes, "; "))
}

// preferZones moves GCE's zonesAvailable hint to the front of the queue.
func preferZones(queue, available []string) []string {
	var first, rest []string
	for _, z := range queue {
		hit := false
		for _, a := range available {
			hit = hit || strings.TrimSpace(a) == z
		}
		if hit {
			first = append(first, z)
		} else {
			rest = append(rest, z)
		}
	}
	return append(first, rest...)
}

// spotOnly reports a plan whose shape GCE sells only as Spot, where a
// standard fallback is no fix to suggest.
func (cp createPlan) spotOnly() bool {
	for _, st := range cp.steps {
		if sold, _ := catalog.SoldModels(st.machineType); !slices.Contains(sold, setting.ProvisioningStandard) {
			return true
		}
	}
	return false
}

// planCreate decides the steps once per create.
func (p *Provider) planCreate(ctx context.Context, vm podVM, spec provider.InstanceTypeSpec) (createPlan, error) {
	if p.cfg.InstanceTemplate != "" {
		return p.planTemplate(ctx, vm, spec)
	}
	sel, err := p.cfg.selectShape(p.catalog, spec)
	if err != nil {
		return createPlan{}, notAllowed(err)
	}
	chosen := sel.FirstChoice().Profile
	plan := createPlan{describe: fmt.Sprintf("profile %s: %s", chosen.Name, catalog.Describe(chosen)), accelerator: chosen.GPUModel()}
	for _, st := range sel.Attempts() {
		image, _ := p.cfg.imageFor(st.Candidate.Profile, vm.image)
		plan.steps = append(plan.steps, p.cfg.profileStep(vm, st.Candidate.Profile, st.Model, p.diskSizeGB(image)))
	}
	return plan, nil
}

// diskSizeGB is the boot disk size for an image: the configured size,
// raised to the image's size when ConfigVerifier learned it.
func (p *Provider) diskSizeGB(image string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(int64(p.cfg.RootVolumeSize), p.imageSizeGB[image])
}

// profileStep is the walk step of a profile under a model.
func (c *Config) profileStep(vm podVM, prof catalog.Profile, model string, diskSizeGB int64) walkStep {
	return walkStep{
		describe:    catalog.Describe(prof),
		model:       model,
		machineType: prof.MachineType,
		accelerator: prof.GPUModel(),
		count:       prof.GPUs(),
		build: func(zone string) *computepb.Instance {
			return c.buildInstance(vm, prof, zone, model, diskSizeGB)
		},
	}
}

// planTemplate plans a create from GCP_INSTANCE_TEMPLATE: its shape, the
// provisioning models (GCP_PROVISIONING_MODEL=SPOT is applied as a
// scheduling override), and for a regional template its region.
func (p *Provider) planTemplate(ctx context.Context, vm podVM, spec provider.InstanceTypeSpec) (createPlan, error) {
	props, err := p.templateProperties(ctx)
	if err != nil {
		return createPlan{}, err
	}
	if err := p.cfg.checkTemplateShape(p.catalog, props, spec); err != nil {
		return createPlan{}, notAllowed(err)
	}
	if err := checkTemplateCache(props); err != nil {
		return createPlan{}, notAllowed(err)
	}
	models, err := p.cfg.templateModels(props)
	if err != nil {
		return createPlan{}, notAllowed(err)
	}
	ref, _ := parseTemplateURL(p.cfg.InstanceTemplate, p.cfg.ProjectID)
	accel := ""
	if names := acceleratorNames(props); len(names) > 0 {
		accel = names[0]
	}
	plan := createPlan{describe: "template " + p.cfg.InstanceTemplate, accelerator: accel, templateRegion: ref.region}
	for _, m := range models {
		model := m
		plan.steps = append(plan.steps, walkStep{
			describe:    "template " + ref.name,
			model:       model,
			machineType: "template:" + ref.url(),
			// Shown and priced as the template's own machine type.
			templateMachineType: lastSegment(props.GetMachineType()),
			accelerator:         accel,
			count:               templateGPUs(props),
			build:               func(zone string) *computepb.Instance { return p.cfg.buildFromTemplate(vm, props, zone, model) },
		})
	}
	return plan, nil
}

// templateModels are the provisioning models a template's VMs are created
// with: GCP_PROVISIONING_MODEL=SPOT (then STANDARD with GCP_SPOT_FALLBACK)
// overrides the template's scheduling, else the template's own model.
// What cannot be applied honestly is refused, never silently billed on
// demand: Spot over a Flex-start or reservation-bound template, and a
// model GCE does not sell for the template's machine type.
func (c *Config) templateModels(props *computepb.InstanceProperties) ([]string, error) {
	own := templateModel(props)
	var models []string
	switch {
	case c.ProvisioningModel == setting.ProvisioningSpot && own != setting.ProvisioningStandard && own != setting.ProvisioningSpot:
		return nil, fmt.Errorf("GCP_PROVISIONING_MODEL=SPOT cannot override GCP_INSTANCE_TEMPLATE %s's %s; unset it, or use a STANDARD or SPOT template", c.InstanceTemplate, own)
	case c.ProvisioningModel == setting.ProvisioningSpot:
		models = []string{setting.ProvisioningSpot}
		if c.SpotFallback {
			models = append(models, setting.ProvisioningStandard)
		}
	default:
		models = []string{own}
	}
	mt := lastSegment(props.GetMachineType())
	sold, note := catalog.SoldModels(mt)
	var out []string
	for i, m := range models {
		if (m == setting.ProvisioningStandard || m == setting.ProvisioningSpot) && !slices.Contains(sold, m) {
			if i == 0 {
				return nil, fmt.Errorf("GCP_INSTANCE_TEMPLATE %s: %s: %s; set GCP_PROVISIONING_MODEL=%s or give the template provisioningModel %s", c.InstanceTemplate, m, note, sold[0], sold[0])
			}
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// createInZone inserts the VM in one zone and waits for it. It returns the
// classified GCE error, when there is one, so the caller can fall back.
// Once GCE has accepted the insert, any later failure deletes the VM; only
// if that delete fails too is the instance returned for CAA to delete.
func (p *Provider) createInZone(ctx context.Context, vlog *log.Logger, vm podVM, zone string, st walkStep, body *computepb.Instance) (*provider.Instance, *gceError, error) {
	req := &computepb.InsertInstanceRequest{
		Project:          p.cfg.ProjectID,
		Zone:             zone,
		InstanceResource: body,
		RequestId:        proto.String(requestID(p.cfg.ProjectID, zone, st.model, st.shapeKey(), vm.name, vm.sandboxID)),
	}
	if p.cfg.InstanceTemplate != "" {
		ref, _ := parseTemplateURL(p.cfg.InstanceTemplate, p.cfg.ProjectID)
		req.SourceInstanceTemplate = proto.String(ref.url())
	}
	var op *computepb.Operation
	err := p.retryMutation(ctx, "insert", func() error {
		o, err := p.instances.Insert(ctx, req)
		if err == nil {
			op = o.Proto()
		}
		return err
	})
	if err != nil {
		gerr := asGCE(err)
		if gerr != nil && gerr.kind == failExists {
			return p.adopt(ctx, vlog, vm, zone)
		}
		// A transport error may hide an accepted insert: make sure.
		if gerr != nil && gerr.kind == failTransient {
			return p.abandon(ctx, vlog, vm, zone, gerr, p.createError(vm, zone, err))
		}
		return nil, gerr, p.createError(vm, zone, err)
	}
	vlog.Printf("insert accepted in %s, operation %s", zone, op.GetName())
	op, err = p.wait(ctx, zone, op)
	if err != nil {
		return p.abandon(ctx, vlog, vm, zone, asGCE(err), p.createError(vm, zone, err))
	}
	if gerr := classifyOperation(op); gerr != nil {
		// GCE creates nothing when an insert operation fails.
		return nil, gerr, p.createError(vm, zone, gerr)
	}
	inst, err := p.getInstance(ctx, zone, vm.name)
	if err != nil {
		return p.abandon(ctx, vlog, vm, zone, asGCE(err), p.createError(vm, zone, err))
	}
	return p.toInstance(ctx, vlog, vm, zone, inst)
}

// abandon deletes a VM whose create failed after GCE may have accepted it,
// so that no paid GPU VM is left without an owner.
func (p *Provider) abandon(ctx context.Context, vlog *log.Logger, vm podVM, zone string, gerr *gceError, cause error) (*provider.Instance, *gceError, error) {
	id := InstanceID(zone, vm.name)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if derr := p.deleteInstance(cctx, id); derr != nil {
		vlog.Printf("create in %s failed (%v) and deleting the VM failed too (%v); returning it for the adaptor to delete", zone, cause, derr)
		return &provider.Instance{ID: id, Name: vm.name}, gerr, cause
	}
	vlog.Printf("create in %s failed, the VM was deleted: %v", zone, cause)
	return nil, gerr, cause
}
