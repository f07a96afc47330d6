package gcpt4

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// maxInstanceName is GCE's limit on instance names.
const maxInstanceName = 63

// callAttempts bounds retries of one transient-failing call.
const callAttempts = 4

// Provider creates and deletes T4 podVMs. It implements provider.Provider.
type Provider struct {
	cfg     Config
	catalog *Catalog
	log     *slog.Logger

	instances       *compute.InstancesClient
	operations      *compute.ZoneOperationsClient
	accelerators    *compute.AcceleratorTypesClient
	images          *compute.ImagesClient
	templates       *compute.InstanceTemplatesClient
	regionTemplates *compute.RegionInstanceTemplatesClient

	closers []interface{ Close() error }

	// backoff is the pause before retry n (1-based); tests shorten it.
	backoff func(n int) time.Duration

	mu sync.Mutex
	// imageSizeGB is the image's disk size once ConfigVerifier looked it
	// up, so creates need no image call.
	imageSizeGB int64
	// template is the instance template's properties, read once: GCE
	// templates are immutable, so the copy never goes stale.
	template *computepb.InstanceProperties
}

var _ provider.Provider = (*Provider)(nil)

// clientOptions are the options the provider's clients are made with.
func (c *Config) clientOptions() []option.ClientOption {
	var opts []option.ClientOption
	if c.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(c.Endpoint, "/")))
		// A plain-HTTP endpoint is a local emulator: never send it
		// credentials.
		if strings.HasPrefix(c.Endpoint, "http://") {
			opts = append(opts, option.WithoutAuthentication())
		}
	}
	if c.Credentials != "" {
		opts = append(opts, option.WithAuthCredentialsJSON(option.ServiceAccount, []byte(c.Credentials)))
	}
	return opts
}

// NewProvider validates cfg and makes the GCE clients; extra options (a test
// server's HTTP client) are applied after the configured ones.
func NewProvider(ctx context.Context, cfg Config, logger *slog.Logger, extra ...option.ClientOption) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	catalog, err := NewCatalog(cfg.ProfilesFile, cfg.Profiles)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	p := &Provider{
		cfg:     cfg,
		catalog: catalog,
		log:     logger.With("provider", "gcp-t4"),
		backoff: func(n int) time.Duration { return time.Duration(1<<(n-1)) * time.Second },
	}
	opts := append(cfg.clientOptions(), extra...)
	if err := p.makeClients(ctx, opts); err != nil {
		_ = p.Teardown()
		return nil, err
	}
	return p, nil
}

// makeClients creates every client the provider uses; REST clients make
// no call until used, so this costs nothing at start-up.
func (p *Provider) makeClients(ctx context.Context, opts []option.ClientOption) error {
	var err error
	keep := func(c interface{ Close() error }) { p.closers = append(p.closers, c) }
	if p.instances, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return fmt.Errorf("creating the GCE instances client: %w", err)
	}
	keep(p.instances)
	if p.operations, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		return fmt.Errorf("creating the GCE zone operations client: %w", err)
	}
	keep(p.operations)
	if p.accelerators, err = compute.NewAcceleratorTypesRESTClient(ctx, opts...); err != nil {
		return fmt.Errorf("creating the GCE accelerator types client: %w", err)
	}
	keep(p.accelerators)
	if p.images, err = compute.NewImagesRESTClient(ctx, opts...); err != nil {
		return fmt.Errorf("creating the GCE images client: %w", err)
	}
	keep(p.images)
	if p.templates, err = compute.NewInstanceTemplatesRESTClient(ctx, opts...); err != nil {
		return fmt.Errorf("creating the GCE instance templates client: %w", err)
	}
	keep(p.templates)
	if p.regionTemplates, err = compute.NewRegionInstanceTemplatesRESTClient(ctx, opts...); err != nil {
		return fmt.Errorf("creating the GCE regional instance templates client: %w", err)
	}
	keep(p.regionTemplates)
	return nil
}

// Catalog returns the profiles the provider selects from.
func (p *Provider) Catalog() *Catalog { return p.catalog }

// InstanceID is how a podVM is named to DeleteInstance: the zone travels
// with the name because zone fallback may have placed it anywhere.
func InstanceID(zone, name string) string {
	return fmt.Sprintf("zones/%s/instances/%s", zone, name)
}

// parseInstanceID accepts InstanceID's form (also inside a full URL) and a
// bare name, for which zone is "".
func parseInstanceID(id string) (zone, name string) {
	if i := strings.Index(id, "zones/"); i >= 0 {
		parts := strings.Split(id[i:], "/")
		if len(parts) == 4 && parts[2] == "instances" {
			return parts[1], parts[3]
		}
	}
	return "", id
}

// CreateInstance creates the podVM for a pod, trying the configured zones in
// turn when one is out of T4s. Calling it again for the same pod and
// sandbox returns the same VM instead of making a second.
func (p *Provider) CreateInstance(ctx context.Context, podName, sandboxID string, cloudConfig cloudinit.CloudConfigGenerator, spec provider.InstanceTypeSpec) (*provider.Instance, error) {
	name := util.GenerateInstanceName(podName, sandboxID, maxInstanceName)
	log := p.log.With("pod", podName, "instance", name)
	userData, err := cloudConfig.Generate()
	if err != nil {
		return nil, fmt.Errorf("generating the podVM cloud-config: %w", err)
	}
	vm := podVM{name: name, podName: podName, sandboxID: sandboxID, userData: base64.StdEncoding.EncodeToString([]byte(userData)), image: spec.Image}

	build, shape, err := p.planCreate(ctx, vm, spec)
	if err != nil {
		return nil, err
	}
	log = log.With("shape", shape)

	zones := p.cfg.Zones()
	var tried []string
	var lastStockout *gceError
	for len(zones) > 0 {
		zone := zones[0]
		zones = zones[1:]
		tried = append(tried, zone)
		inst, gerr, err := p.createInZone(ctx, log, vm, zone, build(zone))
		if err == nil {
			return inst, nil
		}
		if gerr == nil || gerr.kind != failStockout {
			return inst, err
		}
		lastStockout = gerr
		log.Warn("zone out of capacity, trying the next", "zone", zone, "code", gerr.code, "zonesAvailable", gerr.zonesAvailable)
		zones = preferZones(zones, gerr.zonesAvailable)
	}
	return nil, fmt.Errorf("creating podVM %s (%s): every configured zone is out of capacity (%s; last: %s); add zones with T4s to GCP_ZONES, use GCP_PROVISIONING_MODEL=SPOT, or retry later: %w",
		name, shape, strings.Join(tried, ", "), lastStockout.code, lastStockout)
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

// planCreate decides the shape once per create and returns the per-zone
// body builder and a short description for logs and errors.
func (p *Provider) planCreate(ctx context.Context, vm podVM, spec provider.InstanceTypeSpec) (func(zone string) *computepb.Instance, string, error) {
	if p.cfg.InstanceTemplate != "" {
		props, err := p.templateProperties(ctx)
		if err != nil {
			return nil, "", err
		}
		if have := templateGPUs(props); spec.GPUs > have {
			return nil, "", fmt.Errorf("pod requests %d GPU(s) but GCP_INSTANCE_TEMPLATE %s gives %d; use a template with more GPUs or lower the pod's nvidia.com/gpu request", spec.GPUs, p.cfg.InstanceTemplate, have)
		}
		return func(zone string) *computepb.Instance { return p.cfg.buildFromTemplate(vm, props, zone) },
			"template " + p.cfg.InstanceTemplate, nil
	}
	if spec.InstanceType != "" && len(p.cfg.InstanceTypes) > 0 && !contains(p.cfg.InstanceTypes, spec.InstanceType) {
		return nil, "", fmt.Errorf("machine_type annotation %q is not in GCP_INSTANCE_TYPES (%s); use one of those or extend the list", spec.InstanceType, p.cfg.InstanceTypes.String())
	}
	profile, err := p.catalog.Select(Request{InstanceType: spec.InstanceType, GPUs: spec.GPUs, VCPUs: spec.VCPUs, MemoryMiB: spec.Memory})
	if err != nil {
		return nil, "", err
	}
	disk := p.diskSizeGB()
	shape := fmt.Sprintf("profile %s: %s", profile.Name, profile.MachineType)
	if profile.gpus > 0 {
		shape += fmt.Sprintf(" + %d×%s", profile.gpus, profile.gpuModel)
	}
	return func(zone string) *computepb.Instance { return p.cfg.buildInstance(vm, profile, zone, disk) }, shape, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// diskSizeGB is the boot disk size: the configured size, raised to the
// image's size when ConfigVerifier learned it.
func (p *Provider) diskSizeGB() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := int64(p.cfg.RootVolumeSize)
	if p.imageSizeGB > size {
		size = p.imageSizeGB
	}
	return size
}

// createInZone inserts the VM in one zone and waits for it. It returns the
// classified GCE error, when there is one, so the caller can fall back.
func (p *Provider) createInZone(ctx context.Context, log *slog.Logger, vm podVM, zone string, body *computepb.Instance) (*provider.Instance, *gceError, error) {
	req := &computepb.InsertInstanceRequest{
		Project:          p.cfg.ProjectID,
		Zone:             zone,
		InstanceResource: body,
		RequestId:        proto.String(requestID("insert", p.cfg.ProjectID, zone, vm.name, vm.sandboxID)),
	}
	if p.cfg.InstanceTemplate != "" {
		ref, _ := parseTemplateURL(p.cfg.InstanceTemplate, p.cfg.ProjectID)
		req.SourceInstanceTemplate = proto.String(ref.url())
	}
	var op *computepb.Operation
	err := p.retry(ctx, "insert", func() error {
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
		return nil, gerr, p.createError(vm, zone, err)
	}
	log.Info("podVM insert accepted", "zone", zone, "operation", op.GetName())
	op, err = p.wait(ctx, zone, op)
	if err != nil {
		// The insert was accepted: the VM may exist, so hand back its ID
		// for the adaptor to delete.
		return &provider.Instance{ID: InstanceID(zone, vm.name), Name: vm.name}, asGCE(err), p.createError(vm, zone, err)
	}
	if gerr := classifyOperation(op); gerr != nil {
		return nil, gerr, p.createError(vm, zone, gerr)
	}
	return p.readInstance(ctx, log, vm, zone)
}

// adopt handles a name already taken: a VM of this sandbox (an earlier try
// whose answer was lost) is the result; anything else is a conflict.
func (p *Provider) adopt(ctx context.Context, log *slog.Logger, vm podVM, zone string) (*provider.Instance, *gceError, error) {
	existing, err := p.getInstance(ctx, zone, vm.name)
	if err != nil {
		return nil, asGCE(err), p.createError(vm, zone, err)
	}
	if existing.GetLabels()[SandboxLabel] != labelValue(vm.sandboxID) {
		return nil, nil, fmt.Errorf("creating podVM %s in %s: an instance of that name exists and belongs to sandbox %q, not %q; delete it or check for a pod name clash", vm.name, zone, existing.GetLabels()[SandboxLabel], labelValue(vm.sandboxID))
	}
	log.Info("podVM already exists for this sandbox, reusing it", "zone", zone)
	return p.toInstance(ctx, log, zone, existing)
}

// readInstance reads the new VM once for its internal IP.
func (p *Provider) readInstance(ctx context.Context, log *slog.Logger, vm podVM, zone string) (*provider.Instance, *gceError, error) {
	inst, err := p.getInstance(ctx, zone, vm.name)
	if err != nil {
		return &provider.Instance{ID: InstanceID(zone, vm.name), Name: vm.name}, asGCE(err), p.createError(vm, zone, err)
	}
	return p.toInstance(ctx, log, zone, inst)
}

// toInstance checks the VM is private and returns its address. A VM with
// an external IP is deleted: it must never exist, whatever a template says.
func (p *Provider) toInstance(ctx context.Context, log *slog.Logger, zone string, inst *computepb.Instance) (*provider.Instance, *gceError, error) {
	id := InstanceID(zone, inst.GetName())
	for _, nic := range inst.GetNetworkInterfaces() {
		if len(nic.GetAccessConfigs()) > 0 || len(nic.GetIpv6AccessConfigs()) > 0 {
			derr := p.DeleteInstance(ctx, id)
			return nil, nil, fmt.Errorf("podVM %s came up with an external IP (check GCP_INSTANCE_TEMPLATE's network interfaces); it was deleted (delete error: %v)", inst.GetName(), derr)
		}
	}
	nics := inst.GetNetworkInterfaces()
	if len(nics) == 0 || nics[0].GetNetworkIP() == "" {
		return &provider.Instance{ID: id, Name: inst.GetName()}, nil, fmt.Errorf("podVM %s in %s has no internal IP", inst.GetName(), zone)
	}
	ip, err := netip.ParseAddr(nics[0].GetNetworkIP())
	if err != nil {
		return &provider.Instance{ID: id, Name: inst.GetName()}, nil, fmt.Errorf("podVM %s internal IP %q: %w", inst.GetName(), nics[0].GetNetworkIP(), err)
	}
	log.Info("podVM created", "zone", zone, "ip", ip.String())
	return &provider.Instance{ID: id, Name: inst.GetName(), IPs: []netip.Addr{ip}}, nil, nil
}

func (p *Provider) getInstance(ctx context.Context, zone, name string) (*computepb.Instance, error) {
	var inst *computepb.Instance
	err := p.retry(ctx, "get", func() error {
		var err error
		inst, err = p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.cfg.ProjectID, Zone: zone, Instance: name})
		return err
	})
	return inst, err
}

// createError says what failed, where, and what to do about quotas.
func (p *Provider) createError(vm podVM, zone string, err error) error {
	if g := asGCE(err); g != nil && g.kind == failQuota {
		return fmt.Errorf("creating podVM %s in %s: quota exhausted (%s); %s: %w", vm.name, zone, g.quotaMetric, quotaAdvice(g.quotaMetric, regionOf(zone), p.cfg.ProvisioningModel == ProvisioningSpot), err)
	}
	return fmt.Errorf("creating podVM %s in %s: %w", vm.name, zone, err)
}

// asGCE returns the classified form of err, classifying it if needed.
func asGCE(err error) *gceError {
	if err == nil {
		return nil
	}
	var g *gceError
	if errors.As(err, &g) {
		return g
	}
	return classifyCall(err)
}

// retry runs call until it succeeds, fails for good, or the attempts run
// out; only transient failures are retried. Every retried mutation carries
// the same requestId, so GCE runs it at most once.
func (p *Provider) retry(ctx context.Context, what string, call func() error) error {
	var err error
	for n := 1; ; n++ {
		err = call()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || n >= callAttempts || classifyCall(err).kind != failTransient {
			return err
		}
		p.log.Warn("GCE call failed, retrying", "call", what, "attempt", n, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(p.backoff(n)):
		}
	}
}

// wait blocks until the zone operation is DONE with the server-side long
// poll (operations.wait), which returns as soon as the operation finishes,
// instead of polling operations.get on a client timer.
func (p *Provider) wait(ctx context.Context, zone string, op *computepb.Operation) (*computepb.Operation, error) {
	for op.GetStatus() != computepb.Operation_DONE {
		var next *computepb.Operation
		err := p.retry(ctx, "wait", func() error {
			var err error
			next, err = p.operations.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: p.cfg.ProjectID, Zone: zone, Operation: op.GetName()})
			return err
		})
		if err != nil {
			return op, fmt.Errorf("waiting for operation %s: %w", op.GetName(), err)
		}
		op = next
	}
	return op, nil
}

// DeleteInstance deletes a podVM; a VM that is already gone is success.
func (p *Provider) DeleteInstance(ctx context.Context, instanceID string) error {
	zone, name := parseInstanceID(instanceID)
	zones := []string{zone}
	if zone == "" {
		// A bare name (from an older ID form) may be in any zone we use.
		zones = p.cfg.Zones()
	}
	// One random requestId per call: its retries are deduplicated, while
	// a later delete of a re-created VM of the same name is not.
	rid := uuid.NewString()
	for _, z := range zones {
		var op *computepb.Operation
		err := p.retry(ctx, "delete", func() error {
			o, err := p.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: p.cfg.ProjectID, Zone: z, Instance: name, RequestId: proto.String(rid)})
			if err == nil {
				op = o.Proto()
			}
			return err
		})
		if err != nil {
			if classifyCall(err).kind == failNotFound {
				continue
			}
			return fmt.Errorf("deleting podVM %s in %s: %w", name, z, err)
		}
		op, err = p.wait(ctx, z, op)
		if err != nil {
			return fmt.Errorf("deleting podVM %s in %s: %w", name, z, err)
		}
		if gerr := classifyOperation(op); gerr != nil && gerr.kind != failNotFound {
			return fmt.Errorf("deleting podVM %s in %s: %w", name, z, gerr)
		}
		p.log.Info("podVM deleted", "instance", name, "zone", z)
		return nil
	}
	p.log.Info("podVM already gone", "instance", name)
	return nil
}

// Teardown closes the clients.
func (p *Provider) Teardown() error {
	var errs []error
	for _, c := range p.closers {
		errs = append(errs, c.Close())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// templateProperties reads the instance template once.
func (p *Provider) templateProperties(ctx context.Context) (*computepb.InstanceProperties, error) {
	p.mu.Lock()
	cached := p.template
	p.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	ref, err := parseTemplateURL(p.cfg.InstanceTemplate, p.cfg.ProjectID)
	if err != nil {
		return nil, fmt.Errorf("GCP_INSTANCE_TEMPLATE: %w", err)
	}
	var t *computepb.InstanceTemplate
	err = p.retry(ctx, "template", func() error {
		var err error
		if ref.region == "" {
			t, err = p.templates.Get(ctx, &computepb.GetInstanceTemplateRequest{Project: ref.project, InstanceTemplate: ref.name})
		} else {
			t, err = p.regionTemplates.Get(ctx, &computepb.GetRegionInstanceTemplateRequest{Project: ref.project, Region: ref.region, InstanceTemplate: ref.name})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading GCP_INSTANCE_TEMPLATE %s: %w", ref.url(), err)
	}
	if ref.region != "" && ref.region != regionOf(p.cfg.Zone) {
		return nil, fmt.Errorf("GCP_INSTANCE_TEMPLATE %s is regional to %s but GCP_ZONE %s is in %s; use a template of the zone's region or a global one", ref.url(), ref.region, p.cfg.Zone, regionOf(p.cfg.Zone))
	}
	props := t.GetProperties()
	if props == nil {
		return nil, fmt.Errorf("GCP_INSTANCE_TEMPLATE %s has no properties", ref.url())
	}
	p.mu.Lock()
	p.template = props
	p.mu.Unlock()
	return props, nil
}
