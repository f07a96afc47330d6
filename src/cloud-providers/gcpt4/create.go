package gcpt4

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// ErrNoCapacity marks a create that failed because no tried offering had
// capacity or quota; errors.Is finds it in CreateInstance's error.
var ErrNoCapacity = errors.New("no GPU capacity")

// cleanupTimeout bounds deleting a VM whose create failed; it runs on a
// context of its own because the create's may be what expired.
const cleanupTimeout = 5 * time.Minute

// createPlan is the shape decided once per create.
type createPlan struct {
	describe    string
	machineType string
	accelerator string
	// models are the provisioning models to try, in order.
	models []string
	build  func(zone, model string) *computepb.Instance
}

// CreateInstance creates the podVM for a pod. It walks the zones (GCE's
// zonesAvailable hint first), skips offerings that stocked out within the
// TTL and regions whose quota is exhausted, and falls back from Spot to
// standard when allowed. Calling it again for the same pod and sandbox
// returns the same VM instead of making a second.
func (p *Provider) CreateInstance(ctx context.Context, podName, sandboxID string, cloudConfig cloudinit.CloudConfigGenerator, spec provider.InstanceTypeSpec) (*provider.Instance, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.inflight.Done()
	name := util.GenerateInstanceName(podName, sandboxID, maxInstanceName)
	log := p.log.With("pod", podName, "instance", name)
	userData, err := cloudConfig.Generate()
	if err != nil {
		return nil, fmt.Errorf("generating the podVM cloud-config: %w", err)
	}
	vm := podVM{name: name, podName: podName, sandboxID: sandboxID, userData: base64.StdEncoding.EncodeToString([]byte(userData)), image: spec.Image}

	plan, err := p.planCreate(ctx, vm, spec)
	if err != nil {
		return nil, err
	}
	log = log.With("shape", plan.describe)
	zones, err := p.zonesFor(ctx, plan.accelerator)
	if err != nil {
		return nil, err
	}
	var tried attempts
	for _, model := range plan.models {
		inst, done, err := p.tryZones(ctx, log, vm, plan, model, zones, &tried)
		if done {
			return inst, err
		}
	}
	return nil, tried.noCapacity(vm.name, plan, p.cfg)
}

// tryZones tries one provisioning model in each zone. done is false when
// every zone was out of capacity or quota for this model, so the next
// model may be tried.
func (p *Provider) tryZones(ctx context.Context, log *slog.Logger, vm podVM, plan createPlan, model string, zones []string, tried *attempts) (*provider.Instance, bool, error) {
	queue := append([]string(nil), zones...)
	quotaRegions := map[string]string{}
	for len(queue) > 0 {
		zone := queue[0]
		queue = queue[1:]
		if metric, ok := quotaRegions[regionOf(zone)]; ok {
			tried.add(zone, model, "skipped: "+metric+" quota exhausted in "+regionOf(zone))
			continue
		}
		off := offering{model: model, machineType: plan.machineType, accelerator: plan.accelerator, zone: zone}
		if until, ok := p.offerings.unavailableUntil(off); ok {
			tried.add(zone, model, "skipped: out of capacity until "+until.UTC().Format(time.TimeOnly))
			continue
		}
		inst, gerr, err := p.createInZone(ctx, log, vm, zone, model, plan.build(zone, model))
		if err == nil {
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
			log.Warn("zone out of capacity, trying the next", "zone", zone, "model", model, "code", gerr.code, "zonesAvailable", gerr.zonesAvailable)
			queue = preferZones(queue, gerr.zonesAvailable)
		case failQuota:
			tried.add(zone, model, "QUOTA_EXCEEDED "+gerr.quotaMetric)
			tried.quota = append(tried.quota, quotaHit{metric: gerr.quotaMetric, region: regionOf(zone), model: model})
			if globalQuota(gerr.quotaMetric) {
				// No zone, region or model can help: fail now.
				return inst, true, fmt.Errorf("%w: %w", tried.noCapacity(vm.name, plan, p.cfg), gerr)
			}
			quotaRegions[regionOf(zone)] = gerr.quotaMetric
			log.Warn("regional quota exhausted, skipping the region", "region", regionOf(zone), "metric", gerr.quotaMetric, "model", model)
		default:
			return inst, true, err
		}
	}
	return nil, false, nil
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
		if f := quotaAdvice(q.metric, q.region, q.model == ProvisioningSpot); !slices.Contains(fixes, f) {
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
	spot := false
	for _, m := range plan.models {
		spot = spot || m == ProvisioningSpot
	}
	switch {
	case !spot:
		fixes = append(fixes, "allow Spot capacity with GCP_PROVISIONING_MODEL=SPOT")
	case len(plan.models) == 1:
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

// planCreate decides the shape once per create.
func (p *Provider) planCreate(ctx context.Context, vm podVM, spec provider.InstanceTypeSpec) (createPlan, error) {
	if p.cfg.InstanceTemplate != "" {
		props, err := p.templateProperties(ctx)
		if err != nil {
			return createPlan{}, err
		}
		if have := templateGPUs(props); spec.GPUs > have {
			return createPlan{}, fmt.Errorf("pod requests %d GPU(s) but GCP_INSTANCE_TEMPLATE %s gives %d; use a template with more GPUs or lower the pod's nvidia.com/gpu request", spec.GPUs, p.cfg.InstanceTemplate, have)
		}
		accel := ""
		if names := acceleratorNames(props); len(names) > 0 {
			accel = names[0]
		}
		model := props.GetScheduling().GetProvisioningModel()
		if model == "" {
			model = ProvisioningStandard
		}
		return createPlan{
			describe:    "template " + p.cfg.InstanceTemplate,
			machineType: "template:" + p.cfg.InstanceTemplate,
			accelerator: accel,
			models:      []string{model},
			build:       func(zone, _ string) *computepb.Instance { return p.cfg.buildFromTemplate(vm, props, zone) },
		}, nil
	}
	profile, models, err := p.cfg.chooseProfile(p.catalog, spec)
	if err != nil {
		return createPlan{}, err
	}
	disk := p.diskSizeGB()
	describe := fmt.Sprintf("profile %s: %s", profile.Name, profile.MachineType)
	if profile.gpus > 0 {
		describe += fmt.Sprintf(" + %d×%s", profile.gpus, profile.gpuModel)
	}
	return createPlan{
		describe:    describe,
		machineType: profile.MachineType,
		accelerator: profile.gpuModel,
		models:      models,
		build: func(zone, model string) *computepb.Instance {
			return p.cfg.buildInstance(vm, profile, zone, model, disk)
		},
	}, nil
}

// chooseProfile is the shape decision shared by creates and plans: the
// GCP_INSTANCE_TYPES allow-list, profile selection, and the provisioning
// models to try in order.
func (c *Config) chooseProfile(catalog *Catalog, spec provider.InstanceTypeSpec) (Profile, []string, error) {
	if spec.InstanceType != "" && len(c.InstanceTypes) > 0 && !slices.Contains(c.InstanceTypes, spec.InstanceType) {
		return Profile{}, nil, fmt.Errorf("machine_type annotation %q is not in GCP_INSTANCE_TYPES (%s); use one of those or extend the list", spec.InstanceType, c.InstanceTypes.String())
	}
	profile, err := catalog.Select(Request{InstanceType: spec.InstanceType, GPUs: spec.GPUs, VCPUs: spec.VCPUs, MemoryMiB: spec.Memory})
	if err != nil {
		return Profile{}, nil, err
	}
	models := []string{c.provisioningModel(profile)}
	if models[0] == ProvisioningSpot && c.SpotFallback {
		models = append(models, ProvisioningStandard)
	}
	return profile, models, nil
}

// createInZone inserts the VM in one zone and waits for it. It returns the
// classified GCE error, when there is one, so the caller can fall back.
// Once GCE has accepted the insert, any later failure deletes the VM; only
// if that delete fails too is the instance returned for CAA to delete.
func (p *Provider) createInZone(ctx context.Context, log *slog.Logger, vm podVM, zone, model string, body *computepb.Instance) (*provider.Instance, *gceError, error) {
	req := &computepb.InsertInstanceRequest{
		Project:          p.cfg.ProjectID,
		Zone:             zone,
		InstanceResource: body,
		RequestId:        proto.String(requestID(p.cfg.ProjectID, zone, model, vm.name, vm.sandboxID)),
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
			return p.adopt(ctx, log, vm, zone)
		}
		// A transport error may hide an accepted insert: make sure.
		if gerr != nil && gerr.kind == failTransient {
			return p.abandon(ctx, log, vm, zone, gerr, p.createError(vm, zone, err))
		}
		return nil, gerr, p.createError(vm, zone, err)
	}
	log.Info("podVM insert accepted", "zone", zone, "operation", op.GetName())
	op, err = p.wait(ctx, zone, op)
	if err != nil {
		return p.abandon(ctx, log, vm, zone, asGCE(err), p.createError(vm, zone, err))
	}
	if gerr := classifyOperation(op); gerr != nil {
		// GCE creates nothing when an insert operation fails.
		return nil, gerr, p.createError(vm, zone, gerr)
	}
	inst, err := p.getInstance(ctx, zone, vm.name)
	if err != nil {
		return p.abandon(ctx, log, vm, zone, asGCE(err), p.createError(vm, zone, err))
	}
	return p.toInstance(ctx, log, zone, inst)
}

// abandon deletes a VM whose create failed after GCE may have accepted it,
// so that no paid GPU VM is left without an owner.
func (p *Provider) abandon(ctx context.Context, log *slog.Logger, vm podVM, zone string, gerr *gceError, cause error) (*provider.Instance, *gceError, error) {
	id := InstanceID(zone, vm.name)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if derr := p.deleteInstance(cctx, id); derr != nil {
		log.Error("podVM create failed and its clean-up too; returning it for the adaptor to delete", "zone", zone, "err", cause, "deleteErr", derr)
		return &provider.Instance{ID: id, Name: vm.name}, gerr, cause
	}
	log.Warn("podVM create failed; the VM was deleted", "zone", zone, "err", cause)
	return nil, gerr, cause
}
