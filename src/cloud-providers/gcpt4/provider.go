// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"golang.org/x/time/rate"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// maxInstanceName is GCE's limit on instance names.
const maxInstanceName = 63

// callAttempts bounds retries of one transient-failing call.
const callAttempts = 4

// Provider creates and deletes T4 podVMs. It implements provider.Provider.
type Provider struct {
	cfg     Config
	catalog *catalog.Catalog
	log     *log.Logger

	instances       *compute.InstancesClient
	operations      *compute.ZoneOperationsClient
	accelerators    *compute.AcceleratorTypesClient
	images          *compute.ImagesClient
	templates       *compute.InstanceTemplatesClient
	regionTemplates *compute.RegionInstanceTemplatesClient

	closers []interface{ Close() error }

	// offerings skips stocked-out offerings for a while.
	offerings *offeringCache
	// limiter paces inserts and deletes; nil means no limit.
	limiter *rate.Limiter

	// backoff is the pause before retry n (1-based); tests shorten it.
	backoff func(n int) time.Duration
	// createTimeout bounds a create's walk (the const; tests shorten it).
	createTimeout time.Duration

	// gpuTotals enforces GCP_MAX_GPUS_TOTAL and _PER_NAMESPACE (totals.go).
	gpuTotals gpuTotals

	// events posts start-up Events on pods (podevents.go); nil outside a
	// cluster (tools, peerpod-ctrl), which also means no boot watches.
	events *eventRecorder
	// dialAgent opens the probe of a podVM's agent port before the delete
	// of one CAA never reached (bootwatch.go); nil is net.Dialer's. Tests
	// set it: the emulator's addresses are not on this machine.
	dialAgent func(ctx context.Context, network, addr string) (net.Conn, error)
	// bootPoll is the boot watch's first interval (bootwatch.go; tests
	// shorten it); 0 means bootPollFirst.
	bootPoll time.Duration

	mu sync.Mutex
	// imageSizeGB are the images' disk sizes (by the configured name) once
	// ConfigVerifier looked them up, so creates need no image call.
	imageSizeGB map[string]int64
	// template is the instance template's properties, read once: GCE
	// templates are immutable, so the copy never goes stale.
	template *computepb.InstanceProperties
	// discovered holds GCP_ZONES=auto's zones per accelerator.
	discovered map[string][]string
	// closed is set by Teardown; inflight counts calls it waits for.
	closed   bool
	inflight sync.WaitGroup
	// watches are the boot watches of podVMs starting, by instance name.
	watches map[string]*bootWatch
}

var _ provider.Provider = (*Provider)(nil)

// clientOptions are the options the provider's clients are made with.
// GCP_ENDPOINT is given in its canonical form, the one ParseEndpoint
// judged. An endpoint that is not Google's (ParseEndpoint: a local
// emulator over http in any letter case, any other https host) gets
// WithoutAuthentication and no credentials option, since the Google
// client refuses one next to it; so do endpoints Validate refuses, for
// tools that make clients before validating.
func (c *Config) clientOptions() []option.ClientOption {
	var opts []option.ClientOption
	if c.Endpoint != "" {
		endpoint, credentials, err := ParseEndpoint("GCP_ENDPOINT", c.Endpoint)
		if err != nil {
			return append(opts, option.WithEndpoint(c.Endpoint), option.WithoutAuthentication())
		}
		opts = append(opts, option.WithEndpoint(endpoint))
		if !credentials {
			return append(opts, option.WithoutAuthentication())
		}
	}
	if o := c.CredentialsOption(); o != nil {
		opts = append(opts, o)
	}
	return opts
}

// NewProvider validates cfg and makes the GCE clients; extra options (a test
// server's HTTP client) are applied after the configured ones. A nil logger
// logs as upstream's providers do (src/cloud-providers/gcp/provider.go):
// the standard logger's writer, prefix "[adaptor/cloud/gcp-t4] ".
func NewProvider(ctx context.Context, cfg Config, logger *log.Logger, extra ...option.ClientOption) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Credentials != "" {
		if _, err := credential.Check("GCP_CREDENTIALS", []byte(cfg.Credentials)); err != nil {
			return nil, err
		}
	}
	cat, err := catalog.New(cfg.ProfilesFile, cfg.Profiles)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkCatalog(cat); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = log.New(log.Writer(), "[adaptor/cloud/gcp-t4] ", log.LstdFlags|log.Lmsgprefix)
	}
	p := &Provider{
		cfg:           cfg,
		catalog:       cat,
		log:           logger,
		backoff:       jitteredBackoff,
		createTimeout: createTimeout,
		offerings:     newOfferingCache(cfg.UnavailableTTL, time.Now),
		discovered:    map[string][]string{},
		imageSizeGB:   map[string]int64{},
	}
	if cfg.MutationsPerSecond > 0 {
		burst := int(cfg.MutationsPerSecond)
		if burst < 1 {
			burst = 1
		}
		p.limiter = rate.NewLimiter(rate.Limit(cfg.MutationsPerSecond), burst)
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

// vmLogger is p's logger with each line starting with about (which pod and
// podVM it is about), since a Printf line carries no fields.
func (p *Provider) vmLogger(about string) *log.Logger {
	return log.New(p.log.Writer(), p.log.Prefix()+about, p.log.Flags())
}

// adopt handles a name already taken: a VM of this sandbox (an earlier try
// whose answer was lost) is the result; anything else is a conflict.
func (p *Provider) adopt(ctx context.Context, vlog *log.Logger, vm podVM, zone string) (*provider.Instance, *gceError, error) {
	existing, err := p.getInstance(ctx, zone, vm.name)
	if err != nil {
		return nil, asGCE(err), p.createError(vm, zone, err)
	}
	if existing.GetLabels()[SandboxLabel] != labelValue(vm.sandboxID) {
		return nil, nil, fmt.Errorf("creating podVM %s in %s: an instance of that name exists and belongs to sandbox %q, not %q; delete it or check for a pod name clash", vm.name, zone, existing.GetLabels()[SandboxLabel], labelValue(vm.sandboxID))
	}
	vlog.Printf("already exists in %s for this sandbox, reusing it", zone)
	return p.toInstance(ctx, vlog, vm, zone, existing)
}

// toInstance checks the VM is private and returns its address. A VM with
// an external IP must never exist, whatever a template says: it is
// abandoned like any other failed create (deleted on a context of its own,
// and returned for the adaptor to delete if that fails).
func (p *Provider) toInstance(ctx context.Context, vlog *log.Logger, vm podVM, zone string, inst *computepb.Instance) (*provider.Instance, *gceError, error) {
	id := InstanceID(zone, inst.GetName())
	for _, nic := range inst.GetNetworkInterfaces() {
		if len(nic.GetAccessConfigs()) > 0 || len(nic.GetIpv6AccessConfigs()) > 0 {
			return p.abandon(ctx, vlog, vm, zone, nil, fmt.Errorf("podVM %s came up with an external IP (check GCP_INSTANCE_TEMPLATE's network interfaces); the provider deletes it", inst.GetName()))
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
	vlog.Printf("created in %s, IP %s", zone, ip)
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
		return fmt.Errorf("creating podVM %s in %s: quota exhausted (%s); %s: %w", vm.name, zone, g.quotaMetric, quotaAdvice(g.quotaMetric, regionOf(zone), p.cfg.ProvisioningModel == setting.ProvisioningSpot), err)
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

// jitteredBackoff is full jitter over 1 s, 2 s, 4 s …: many podVMs that
// hit a rate limit together do not retry together.
func jitteredBackoff(n int) time.Duration {
	ceiling := time.Duration(1<<(n-1)) * time.Second
	return time.Duration(rand.Int64N(int64(ceiling))) + 50*time.Millisecond
}

// retryMutation is retry for inserts and deletes, paced by the limiter
// so that a burst of pods does not turn into a burst of 429s.
func (p *Provider) retryMutation(ctx context.Context, what string, call func() error) error {
	return p.retry(ctx, what, func() error {
		if p.limiter != nil {
			if err := p.limiter.Wait(ctx); err != nil {
				return fmt.Errorf("waiting for the mutation rate limit: %w", err)
			}
		}
		return call()
	})
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
		p.log.Printf("GCE %s call failed (attempt %d), retrying: %v", what, n, err)
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
// It is bounded by cleanupTimeout whatever its caller's context, so that
// Teardown never waits longer than LongestCall.
func (p *Provider) DeleteInstance(ctx context.Context, instanceID string) error {
	if err := p.enter(); err != nil {
		return err
	}
	defer p.inflight.Done()
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if zone, name := parseInstanceID(instanceID); name != "" {
		p.beforeDelete(ctx, zone, name)
	}
	return p.deleteInstance(ctx, instanceID)
}

func (p *Provider) deleteInstance(ctx context.Context, instanceID string) error {
	zone, name := parseInstanceID(instanceID)
	if name == "" {
		// CAA v0.22.0's StopVM deletes sandbox.instanceID, which stays ""
		// when StartVM failed (pkg/adaptor/cloud/cloud.go). No VM has an empty
		// name: sending it would be a DELETE per zone, each taking a
		// rate-limiter token, for nothing.
		p.log.Printf("DeleteInstance with an empty instance ID: nothing to delete")
		return nil
	}
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
		err := p.retryMutation(ctx, "delete", func() error {
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
		p.log.Printf("podVM %s deleted in %s", name, z)
		return nil
	}
	p.log.Printf("podVM %s already gone", name)
	return nil
}

// errTornDown is returned by calls made after Teardown.
var errTornDown = errors.New("gcp-t4 provider is torn down")

// enter registers an API-facing call so that Teardown waits for it: a
// create cut off mid-way could leave a VM nobody deletes.
func (p *Provider) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errTornDown
	}
	p.inflight.Add(1)
	return nil
}

// Teardown refuses new calls, waits for those in flight, then closes the
// clients. Creates and deletes are bounded (LongestCall), so the wait is
// too; a create is never cut off here, since a VM GCE accepted would then
// have nobody to hand it to.
func (p *Provider) Teardown() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.inflight.Wait()
	p.stopWatches()
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	p.events.close(ctx)
	cancel()
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
	props := t.GetProperties()
	if props == nil {
		return nil, fmt.Errorf("GCP_INSTANCE_TEMPLATE %s has no properties", ref.url())
	}
	p.mu.Lock()
	p.template = props
	p.mu.Unlock()
	return props, nil
}
