package preflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	crmv1 "google.golang.org/api/cloudresourcemanager/v1"
	"google.golang.org/api/cloudresourcemanager/v3"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iam/v1"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

// Ports the worker nodes and podVMs talk on: CAA dials the podVM's
// agent-protocol-forwarder on tcp 15150, and the pod network is a VXLAN
// tunnel on udp 4789 in both directions.
const (
	AgentPort = 15150
	VXLANPort = 4789
)

// GCE runs the project checks with the provider's configuration.
type GCE struct {
	Cfg     gcpt4.Config
	Catalog *catalog.Catalog
	// NodeCIDRs are the worker nodes' addresses; empty means the podVM
	// subnet's range (nodes and podVMs sharing a subnet).
	NodeCIDRs []netip.Prefix
	// Member is the account CAA runs as: who the permission fix grants
	// roles to, and whose permissions are checked when it is Caller.
	Member string
	// Caller is the account preflight's own calls run as, when known
	// (a service account key's client_email); empty for other
	// Application Default Credentials.
	Caller string
	// NodeTags are the worker nodes' network tags (from -node-tags, or
	// read from the node VMs); empty when unknown.
	NodeTags []string
	// NodeIPs are the nodes' internal addresses, from the cluster; the
	// firewall checks use the subnets that hold them, never the /32s.
	NodeIPs []netip.Addr
	// NodeVMs are the nodes' instances, whose tags are read when
	// NodeTags is empty.
	NodeVMs []NodeVM
	// KeyFile is the file the credentials came from (-credentials-file),
	// "" for GCP_CREDENTIALS or other credentials.
	KeyFile string

	// template is GCP_INSTANCE_TEMPLATE's properties, once read.
	template *computepb.InstanceProperties

	projects     *compute.ProjectsClient
	instances    *compute.InstancesClient
	templates    *compute.InstanceTemplatesClient
	regTemplates *compute.RegionInstanceTemplatesClient
	regions      *compute.RegionsClient
	accelerators *compute.AcceleratorTypesClient
	networks     *compute.NetworksClient
	subnetworks  *compute.SubnetworksClient
	firewalls    *compute.FirewallsClient
	routers      *compute.RoutersClient
	images       *compute.ImagesClient
	crm          *cloudresourcemanager.Service
	crmV1        *crmv1.Service
	iam          *iam.Service
	closers      []interface{ Close() error }
}

// Connect makes the API clients: Compute with opts, Resource Manager with
// crmOpts and IAM with iamOpts (other APIs, so possibly other endpoints).
func (g *GCE) Connect(ctx context.Context, opts, crmOpts, iamOpts []option.ClientOption) error {
	var err error
	mk := func(name string, f func() (interface{ Close() error }, error)) {
		if err != nil {
			return
		}
		var c interface{ Close() error }
		if c, err = f(); err != nil {
			err = fmt.Errorf("creating the %s client: %w", name, err)
			return
		}
		g.closers = append(g.closers, c)
	}
	mk("projects", func() (interface{ Close() error }, error) {
		c, e := compute.NewProjectsRESTClient(ctx, opts...)
		g.projects = c
		return c, e
	})
	mk("regions", func() (interface{ Close() error }, error) {
		c, e := compute.NewRegionsRESTClient(ctx, opts...)
		g.regions = c
		return c, e
	})
	mk("accelerator types", func() (interface{ Close() error }, error) {
		c, e := compute.NewAcceleratorTypesRESTClient(ctx, opts...)
		g.accelerators = c
		return c, e
	})
	mk("networks", func() (interface{ Close() error }, error) {
		c, e := compute.NewNetworksRESTClient(ctx, opts...)
		g.networks = c
		return c, e
	})
	mk("subnetworks", func() (interface{ Close() error }, error) {
		c, e := compute.NewSubnetworksRESTClient(ctx, opts...)
		g.subnetworks = c
		return c, e
	})
	mk("firewalls", func() (interface{ Close() error }, error) {
		c, e := compute.NewFirewallsRESTClient(ctx, opts...)
		g.firewalls = c
		return c, e
	})
	mk("routers", func() (interface{ Close() error }, error) {
		c, e := compute.NewRoutersRESTClient(ctx, opts...)
		g.routers = c
		return c, e
	})
	mk("images", func() (interface{ Close() error }, error) {
		c, e := compute.NewImagesRESTClient(ctx, opts...)
		g.images = c
		return c, e
	})
	mk("instances", func() (interface{ Close() error }, error) {
		c, e := compute.NewInstancesRESTClient(ctx, opts...)
		g.instances = c
		return c, e
	})
	mk("instance templates", func() (interface{ Close() error }, error) {
		c, e := compute.NewInstanceTemplatesRESTClient(ctx, opts...)
		g.templates = c
		return c, e
	})
	mk("regional instance templates", func() (interface{ Close() error }, error) {
		c, e := compute.NewRegionInstanceTemplatesRESTClient(ctx, opts...)
		g.regTemplates = c
		return c, e
	})
	if err != nil {
		g.Close()
		return err
	}
	if g.crm, err = cloudresourcemanager.NewService(ctx, crmOpts...); err != nil {
		g.Close()
		return fmt.Errorf("creating the Resource Manager client: %w", err)
	}
	if g.crmV1, err = crmv1.NewService(ctx, crmOpts...); err != nil {
		g.Close()
		return fmt.Errorf("creating the Resource Manager v1 client: %w", err)
	}
	if g.iam, err = iam.NewService(ctx, iamOpts...); err != nil {
		g.Close()
		return fmt.Errorf("creating the IAM client: %w", err)
	}
	return nil
}

// Close closes the clients.
func (g *GCE) Close() {
	for _, c := range g.closers {
		_ = c.Close()
	}
	g.closers = nil
}

// Run runs every project check in order, on settings checkConfig passed;
// later checks that depend on an earlier one (the subnet on the network)
// report it instead of an API error.
func (g *GCE) Run(ctx context.Context) []Result {
	var rs []Result
	if err := g.Cfg.Validate(); err != nil {
		return checkConfig(g.Cfg, false)
	}
	cred := g.checkProject(ctx)
	rs = append(rs, cred)
	if cred.Status == Fail {
		// Without access to the project every other call fails the same way.
		return rs
	}
	if g.Cfg.InstanceTemplate != "" {
		t := g.readTemplate(ctx)
		rs = append(rs, t)
		if t.Status == Fail {
			return rs
		}
	}
	rs = append(rs, g.checkAccelerators(ctx)...)
	rs = append(rs, g.checkQuotas(ctx)...)
	g.readNodeTags(ctx)
	rs = append(rs, g.checkNetworking(ctx)...)
	rs = append(rs, g.checkImage(ctx))
	rs = append(rs, g.checkOrgPolicies(ctx)...)
	rs = append(rs, g.checkPermissions(ctx)...)
	return rs
}

// readNodeTags sets NodeTags, when not given, to the tags every node VM
// carries (GKE gives a cluster's nodes one tag); left empty when a node
// cannot be read.
func (g *GCE) readNodeTags(ctx context.Context) {
	if len(g.NodeTags) > 0 || len(g.NodeVMs) == 0 {
		return
	}
	var common []string
	for i, vm := range g.NodeVMs {
		if i == 5 {
			break // enough to see the pool's tags
		}
		inst, err := g.instances.Get(ctx, &computepb.GetInstanceRequest{Project: vm.Project, Zone: vm.Zone, Instance: vm.Name})
		if err != nil {
			return
		}
		tags := inst.GetTags().GetItems()
		if i == 0 {
			common = append([]string(nil), tags...)
			continue
		}
		var keep []string
		for _, t := range common {
			if slices.Contains(tags, t) {
				keep = append(keep, t)
			}
		}
		common = keep
	}
	g.NodeTags = common
}

// readTemplate reads GCP_INSTANCE_TEMPLATE as the provider does: the
// network, tags and service account of its podVMs come from it.
func (g *GCE) readTemplate(ctx context.Context) Result {
	check := "instance template " + g.Cfg.InstanceTemplate
	project, region, name, err := gcpt4.TemplateRef(g.Cfg.InstanceTemplate, g.Cfg.ProjectID)
	if err != nil {
		return fail(check, "", "%v", err)
	}
	var t *computepb.InstanceTemplate
	if region == "" {
		t, err = g.templates.Get(ctx, &computepb.GetInstanceTemplateRequest{Project: project, InstanceTemplate: name})
	} else {
		t, err = g.regTemplates.Get(ctx, &computepb.GetRegionInstanceTemplateRequest{Project: project, Region: region, InstanceTemplate: name})
	}
	if err != nil {
		return fail(check, fmt.Sprintf("gcloud compute instance-templates list --project=%s", project), "reading it: %v", err)
	}
	g.template = t.GetProperties()
	if len(g.template.GetNetworkInterfaces()) == 0 {
		return fail(check, "", "the template has no network interface")
	}
	return pass(check, "network %s, machine type %s", lastSegment(g.template.GetNetworkInterfaces()[0].GetNetwork()), g.template.GetMachineType())
}

func apiCode(err error) int {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return 0
}

func (g *GCE) checkProject(ctx context.Context) Result {
	const check = "credentials"
	p := g.Cfg.ProjectID
	_, err := g.projects.Get(ctx, &computepb.GetProjectRequest{Project: p})
	switch code := apiCode(err); {
	case err == nil:
		return pass(check, "the Compute API answers for project %s with these credentials", p)
	case code == 401:
		return fail(check, g.credentialsFix(code), "the credentials were refused: %v", err)
	case code == 403:
		return fail(check, fmt.Sprintf("gcloud services enable compute.googleapis.com --project=%s", p), "project %s refused access (Compute API disabled, or no rights): %v", p, err)
	case code == 404:
		return fail(check, "gcloud projects list --format='value(projectId)'   # then set GCP_PROJECT_ID to the ID", "project %s does not exist or is not visible: %v", p, err)
	case unreachable(err):
		// No answer at all: nothing about the credentials is known, so
		// gcloud's login would be the wrong advice.
		return fail(check, unreachableFix(g.Cfg.Endpoint), "the Compute API at %s is unreachable (no answer, so the credentials were not tried): %v", computeEndpoint(g.Cfg.Endpoint), err)
	default:
		return fail(check, g.credentialsFix(code), "calling the Compute API: %v", err)
	}
}

// unreachable is whether err is the Compute API not answering at all (no
// connection, no such host, no answer in time), as opposed to an answer
// that refused the call.
func unreachable(err error) bool {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, context.DeadlineExceeded)
}

// computeEndpoint is where the provider's clients call: GCP_ENDPOINT, else
// Google's.
func computeEndpoint(endpoint string) string {
	if endpoint == "" {
		return "https://compute.googleapis.com"
	}
	return endpoint
}

// unreachableFix is the next step when the Compute API does not answer: a
// local endpoint (an emulator) is not running or is mistyped; Google's is
// cut off from this machine.
func unreachableFix(endpoint string) string {
	if notGoogle(endpoint) {
		return fmt.Sprintf("nothing answers at GCP_ENDPOINT %s: start the offline emulator with `gcp-t4 emulator` and use the -gcp-endpoint it prints, or correct -gcp-endpoint / GCP_ENDPOINT; then run preflight again", endpoint)
	}
	return fmt.Sprintf("check that this machine reaches %s (DNS, firewall, HTTPS_PROXY), or try preflight offline against `gcp-t4 emulator`; then run preflight again", computeEndpoint(endpoint))
}

// credentialsFix is what repairs credentials that could not be used
// (code 0: no client could be made with them) or were refused (401), or
// an API that did not answer (any other code). A service account key
// (-credentials-file, GCP_CREDENTIALS) is CAA's, so the fix is about that
// key; gcloud's own login only helps when preflight runs on
// Application Default Credentials.
func (g *GCE) credentialsFix(code int) string {
	email := strings.TrimPrefix(memberFromCredentials(g.Cfg.Credentials), "serviceAccount:")
	from := "GCP_CREDENTIALS"
	if g.KeyFile != "" {
		from = "-credentials-file " + g.KeyFile
	}
	switch {
	case g.Cfg.Credentials != "" && email == "":
		return fmt.Sprintf("%s is not a service account key: mkdir -p -m 700 ~/.config/caa-gcp-t4 && gcloud iam service-accounts keys create ~/.config/caa-gcp-t4/caa-key.json --iam-account=CAA_SERVICE_ACCOUNT_EMAIL   # outside any git work tree, then -credentials-file ~/.config/caa-gcp-t4/caa-key.json", from)
	case g.Cfg.Credentials != "" && (code == 0 || code == 401):
		return fmt.Sprintf("gcloud iam service-accounts keys list --iam-account=%[1]s --project=%[2]s   # is the key of %[3]s listed and enabled? if not: mkdir -p -m 700 ~/.config/caa-gcp-t4 && gcloud iam service-accounts keys create ~/.config/caa-gcp-t4/caa-key.json --iam-account=%[1]s", email, g.Cfg.ProjectID, from)
	case g.Cfg.Credentials != "":
		return fmt.Sprintf("nothing to change in the key (%s, for %s), which was not refused: the Compute API did not answer; check that this machine reaches it (GCP_ENDPOINT, proxy settings) and run preflight again", from, email)
	case code == 0 || code == 401:
		return "gcloud auth application-default login"
	}
	return "gcloud auth application-default print-access-token   # checks the credentials; GCP_ENDPOINT must reach the Compute API"
}

// gpuUses are the GPU families the settings may create (the provider's
// own list: profiles, automatic shapes, GCP_INSTANCE_TYPES), attached or
// bundled. Those fit chooses must be ready in every zone; the others
// (an explicit h100-cc) only matter when a pod names them, so what they
// lack is a warning.
func (g *GCE) gpuUses() []catalog.GPUUse { return g.Cfg.GPUUses(g.Catalog) }

func (g *GCE) regionNames() []string {
	var rs []string
	for _, z := range g.Cfg.Zones() {
		if r := gcpt4.Region(z); !slices.Contains(rs, r) {
			rs = append(rs, r)
		}
	}
	return rs
}

func (g *GCE) checkAccelerators(ctx context.Context) []Result {
	var rs []Result
	auto := len(g.Cfg.FallbackZones) == 1 && g.Cfg.FallbackZones[0] == setting.ZonesAuto
	for _, u := range g.gpuUses() {
		acc := u.Family.Accelerator
		if auto && u.Automatic {
			rs = append(rs, g.checkAutoZones(ctx, acc))
		}
		for _, zone := range g.Cfg.Zones() {
			check := fmt.Sprintf("accelerator %s in %s", acc, zone)
			_, err := g.accelerators.Get(ctx, &computepb.GetAcceleratorTypeRequest{Project: g.Cfg.ProjectID, Zone: zone, AcceleratorType: acc})
			switch {
			case err == nil:
				rs = append(rs, pass(check, "offered"))
			case apiCode(err) == 404 && !u.Automatic:
				rs = append(rs, warn(check, "", "zone %s does not offer %s: pods naming %s get it only in zones that do", zone, acc, strings.Join(u.Via, ", ")))
			case apiCode(err) == 404:
				rs = append(rs, fail(check, fmt.Sprintf("gcloud compute accelerator-types list --project=%s --filter='name=%s' --format='value(zone)'   # then set GCP_ZONE/GCP_ZONES to zones listed", g.Cfg.ProjectID, acc),
					"zone %s does not offer %s", zone, acc))
			default:
				rs = append(rs, fail(check, "", "reading the accelerator type: %v", err))
			}
		}
	}
	return rs
}

// quotaMetric is the regional quota a GPU family counts against
// (the catalogue's row).
func quotaMetric(f catalog.GPUFamily, spot bool) string {
	if spot {
		return f.PreemptibleQuotaMetric
	}
	return f.QuotaMetric
}

// quotaFix is the Cloud Quotas request that raises a limit.
func quotaFix(project, metric, region string, want int64) string {
	id := strings.ReplaceAll(metric, "_", "-") + "-per-project"
	dims := ""
	if region != "" {
		id += "-region"
		dims = " --dimensions=region=" + region
	}
	return fmt.Sprintf("gcloud beta quotas preferences create --service=compute.googleapis.com --project=%s --quota-id=%s --preferred-value=%d%s", project, id, want, dims)
}

// models are the provisioning models creates may use.
func (g *GCE) models() []bool {
	switch {
	case g.Cfg.ProvisioningModel == setting.ProvisioningSpot && g.Cfg.SpotFallback:
		return []bool{true, false}
	case g.Cfg.ProvisioningModel == setting.ProvisioningSpot:
		return []bool{true}
	}
	return []bool{false}
}

func quotaOf(qs []*computepb.Quota, metric string) (*computepb.Quota, bool) {
	for _, q := range qs {
		if q.GetMetric() == metric {
			return q, true
		}
	}
	return nil, false
}

// judgeQuota compares free quota with the largest podVM a profile makes.
func judgeQuota(check, fix string, q *computepb.Quota, found bool, need int64, metric string) Result {
	if !found {
		return warn(check, fix, "GCE reports no %s quota here; creates will fail if the limit is 0", metric)
	}
	free := int64(q.GetLimit() - q.GetUsage())
	switch {
	case q.GetLimit() < 1:
		return fail(check, fix, "%s limit is %g: no GPU podVM can be created", metric, q.GetLimit())
	case free < need:
		return warn(check, fix, "%s: %d of %g free, the largest profile needs %d", metric, free, q.GetLimit(), need)
	}
	return pass(check, "%s: %d of %g free (largest profile needs %d)", metric, free, q.GetLimit(), need)
}

func (g *GCE) checkQuotas(ctx context.Context) []Result {
	uses := g.gpuUses()
	var maxAll int64
	for _, u := range uses {
		if u.Automatic {
			maxAll = max(maxAll, u.MaxGPUs)
		}
	}
	if len(uses) == 0 {
		return nil
	}
	var rs []Result
	for _, region := range g.regionNames() {
		reg, err := g.regions.Get(ctx, &computepb.GetRegionRequest{Project: g.Cfg.ProjectID, Region: region})
		if err != nil {
			rs = append(rs, fail("quota in "+region, "", "reading region %s: %v", region, err))
			continue
		}
		for _, u := range uses {
			for _, spot := range g.models() {
				metric := quotaMetric(u.Family, spot)
				q, ok := quotaOf(reg.GetQuotas(), metric)
				r := judgeQuota(fmt.Sprintf("quota %s in %s", metric, region), quotaFix(g.Cfg.ProjectID, metric, region, u.MaxGPUs), q, ok, u.MaxGPUs, metric)
				if !u.Automatic && r.Status == Fail {
					// Only pods naming it are refused.
					r.Status = Warn
					r.Detail += " (only pods naming " + strings.Join(u.Via, ", ") + " need it)"
				}
				rs = append(rs, r)
			}
		}
	}
	if maxAll == 0 {
		return rs
	}
	proj, err := g.projects.Get(ctx, &computepb.GetProjectRequest{Project: g.Cfg.ProjectID})
	if err != nil {
		return append(rs, fail("quota GPUS_ALL_REGIONS", "", "reading project quotas: %v", err))
	}
	const metric = "GPUS_ALL_REGIONS"
	q, ok := quotaOf(proj.GetQuotas(), metric)
	return append(rs, judgeQuota("quota "+metric, quotaFix(g.Cfg.ProjectID, metric, "", maxAll), q, ok, maxAll, metric))
}

func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }

func (g *GCE) checkNAT(ctx context.Context, project string, net *computepb.Network, sub *computepb.Subnetwork, region string) Result {
	check := "cloud nat in " + region
	netName := net.GetName()
	// Each create runs only where describe finds nothing, so running the
	// fix twice (or after a partial run) does not fail on "already exists".
	natFix := func(router string) string {
		return fmt.Sprintf("gcloud compute routers nats describe caa-nat --router=%[2]s --project=%[1]s --region=%[3]s >/dev/null 2>&1 || gcloud compute routers nats create caa-nat --project=%[1]s --router=%[2]s --region=%[3]s --nat-custom-subnet-ip-ranges=%[4]s --auto-allocate-nat-external-ips",
			project, router, region, sub.GetName())
	}
	routerFix := fmt.Sprintf("gcloud compute routers describe caa-nat-router --project=%[1]s --region=%[3]s >/dev/null 2>&1 || gcloud compute routers create caa-nat-router --project=%[1]s --network=%[2]s --region=%[3]s",
		project, netName, region) + "\n" + natFix("caa-nat-router")
	it := g.routers.List(ctx, &computepb.ListRoutersRequest{Project: project, Region: region})
	var onNetwork []string
	for {
		r, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return fail(check, "", "listing Cloud Routers: %v", err)
		}
		if lastSegment(r.GetNetwork()) != netName {
			continue
		}
		onNetwork = append(onNetwork, r.GetName())
		for _, n := range r.GetNats() {
			switch n.GetSourceSubnetworkIpRangesToNat() {
			case "ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES":
				return pass(check, "router %s, NAT %s covers every subnet of %s", r.GetName(), n.GetName(), netName)
			case "LIST_OF_SUBNETWORKS":
				for _, s := range n.GetSubnetworks() {
					if lastSegment(s.GetName()) == sub.GetName() && strings.Contains(s.GetName(), "/regions/"+region+"/") {
						return pass(check, "router %s, NAT %s covers subnet %s", r.GetName(), n.GetName(), sub.GetName())
					}
				}
			}
		}
	}
	if len(onNetwork) > 0 {
		return fail(check, natFix(onNetwork[0]),
			"router(s) %s on %s have no NAT covering subnet %s: private podVMs cannot pull images from the internet", strings.Join(onNetwork, ","), netName, sub.GetName())
	}
	return fail(check, routerFix, "no Cloud Router with NAT on %s in %s: private podVMs cannot pull images from the internet", netName, region)
}

func (g *GCE) listFirewalls(ctx context.Context, project string) ([]*computepb.Firewall, error) {
	it := g.firewalls.List(ctx, &computepb.ListFirewallsRequest{Project: project})
	fws := []*computepb.Firewall{}
	for {
		fw, err := it.Next()
		if err == iterator.Done {
			return fws, nil
		}
		if err != nil {
			return nil, err
		}
		fws = append(fws, fw)
	}
}

// checkAutoZones lists, as GCP_ZONES=auto does at run time, the zones of
// the primary zone's region that offer the accelerator.
func (g *GCE) checkAutoZones(ctx context.Context, acc string) Result {
	region := gcpt4.Region(g.Cfg.Zone)
	check := fmt.Sprintf("accelerator %s zones in %s (GCP_ZONES=auto)", acc, region)
	it := g.accelerators.AggregatedList(ctx, &computepb.AggregatedListAcceleratorTypesRequest{Project: g.Cfg.ProjectID, Filter: proto.String(fmt.Sprintf("name = %q", acc))})
	var zones []string
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return fail(check, "", "listing accelerator types: %v", err)
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		if gcpt4.Region(zone) == region && len(pair.Value.GetAcceleratorTypes()) > 0 {
			zones = append(zones, zone)
		}
	}
	sort.Strings(zones)
	switch {
	case len(zones) == 0:
		return fail(check, fmt.Sprintf("gcloud compute accelerator-types list --project=%s --filter='name=%s' --format='value(zone)'   # then set GCP_ZONE to a zone listed", g.Cfg.ProjectID, acc), "no zone of %s offers %s", region, acc)
	case len(zones) == 1:
		return warn(check, "", "only %s offers %s in %s: no fallback zone on a stockout", zones[0], acc, region)
	}
	return pass(check, "the provider will try %s", strings.Join(zones, ","))
}
