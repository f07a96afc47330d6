// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
)

// instanceRecord is a stored instance plus what it consumes.
type instanceRecord struct {
	zone        string
	region      string
	inst        *computepb.Instance
	cpus        int32
	gpu         string
	gpus        int32
	preemptible bool
	ips         []string
	// console is the serial port output (serial.go); nil until written.
	console *console
	// guest is what the VM's metadata server says about an interruption
	// (guestmeta.go).
	guest guestState
}

func (s *Server) fingerprint() string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], s.nextSeq()*0x9E3779B97F4A7C15)
	return base64.StdEncoding.EncodeToString(b[:])
}

func (s *Server) newInstanceID() uint64 {
	return 4_000_000_000_000_000_000 + s.nextSeq()
}

// requestID validates the requestId query parameter; GCE rejects anything but
// a non-nil UUID.
func requestID(rc *reqCtx) (string, error) {
	v, ok := rc.query("requestId")
	if !ok {
		return "", nil
	}
	u, err := uuid.Parse(v)
	if err != nil || u == uuid.Nil {
		return "", invalidField("requestId", v, "The requestId must be a valid UUID (RFC 4122) other than the all-zero UUID.")
	}
	return v, nil
}

// requestKey scopes a requestId: GCE deduplicates a repeated request of
// the same method on the same (zonal) resource collection, so an insert
// and a delete, or inserts in two zones, never collide even with one ID.
func requestKey(method, zone, rid string) string {
	return method + "\x00" + zone + "\x00" + rid
}

// replayed returns the operation a repeated requestId created, which is how
// GCE makes a retried mutation safe: it "will ignore the second request"
// (InsertInstanceRequest.requestId in the discovery document), so a repeat
// gets the first request's operation whatever its body. A repeat with
// another body is counted: the caller reused an ID for a different
// request, which on GCE silently does nothing.
func (s *Server) replayed(method, zone, rid string, body []byte) proto.Message {
	if rid == "" {
		return nil
	}
	name, ok := s.requestIDs[requestKey(method, zone, rid)]
	if !ok {
		return nil
	}
	rec := s.ops[name]
	if !bytes.Equal(rec.body, body) {
		rec.otherBodies++
	}
	return proto.Clone(rec.op)
}

// ReplaysWithAnotherBody counts requests that repeated a requestId with a
// different body: GCE ignored them, so a provider that does this lost a
// request it meant to make.
func (s *Server) ReplaysWithAnotherBody() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rec := range s.ops {
		n += rec.otherBodies
	}
	return n
}

func (s *Server) handleInstancesInsert(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	rid, err := requestID(rc)
	if err != nil {
		return nil, err
	}
	body := insertKey(rc)
	if op := s.replayed("instances.insert", z.name, rid, body); op != nil {
		return op, nil
	}
	req := &computepb.Instance{}
	if err := decodeStrict(rc.body, "resource", req); err != nil {
		return nil, err
	}
	inst := req
	if ref, ok := rc.query("sourceInstanceTemplate"); ok && ref != "" {
		if inst, err = s.mergeTemplate(z, ref, req); err != nil {
			return nil, err
		}
	}
	if ref, ok := rc.query("sourceMachineImage"); ok && ref != "" {
		// The fake has no machine images; GCE reports a missing one as 404.
		r, ok := s.parseRef(ref)
		if !ok {
			return nil, invalidField("sourceMachineImage", ref, "Must be the URL to a machine image.")
		}
		return nil, resourceNotFound(r.path())
	}
	if err := validateTags(inst.GetTags()); err != nil {
		return nil, err
	}
	plan, err := s.validateInsert(z, inst)
	if err != nil {
		return nil, err
	}
	id := s.newInstanceID()
	rec := s.newOperation(z.name, "insert", inst.GetName(), id, rid)
	rec.body = body
	if f := s.insertFailure(plan); f != nil {
		rec.failure = f
	} else {
		ir := s.storeInstance(plan, inst, id, "PROVISIONING")
		key := z.name + "/" + inst.GetName()
		rec.onDone = func() {
			if s.instances[key] == ir && ir.inst.GetStatus() == "PROVISIONING" {
				ir.inst.Status = proto.String("RUNNING")
				ir.inst.LastStartTimestamp = proto.String(s.stamp())
				s.booted(ir)
			}
		}
	}
	s.settle()
	return proto.Clone(rec.op), nil
}

// insertKey is what makes two inserts the same request: the body and the
// query parameters that shape it (the template, the machine image).
func insertKey(rc *reqCtx) []byte {
	q := rc.r.URL.Query()
	q.Del("requestId")
	return append([]byte(q.Encode()+"\x00"), rc.body...)
}

// insertFailure decides the asynchronous outcome: quota first (as GCE checks
// quota before capacity), then stockout.
func (s *Server) insertFailure(plan *insertPlan) *opFailure {
	z := plan.zone
	probe := &instanceRecord{cpus: plan.machine.cpus, gpu: plan.gpu, gpus: plan.gpus, preemptible: plan.spot}
	if q := s.checkQuota(z.region, probe.usage(s.world)); q != nil {
		return &opFailure{errs: []*computepb.Errors{q.operationError()}, httpCode: http.StatusForbidden, httpMsg: httpStatusText(http.StatusForbidden)}
	}
	// Capacity runs out per provisioning model: Spot can be exhausted
	// while standard capacity remains (and the other way round).
	if !s.stockedOut(z.name, plan.model) {
		return nil
	}
	var avail []string
	for _, zn := range s.world.regionByName[z.region].zones {
		other := s.world.zoneByName[zn]
		if zn == z.name || s.stockedOut(zn, plan.model) || other.machine(plan.machine.name) == nil {
			continue
		}
		if plan.gpu != "" && !other.hasAccel(plan.gpu) {
			continue
		}
		avail = append(avail, zn)
	}
	msg := fmt.Sprintf("The zone 'projects/%s/zones/%s' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.", s.project, z.name)
	meta := map[string]string{
		"zone":           z.name,
		"vmType":         plan.machine.name,
		"zonesAvailable": strings.Join(avail, ","),
	}
	if plan.gpu != "" {
		meta["attachment"] = fmt.Sprintf("%s:%d", plan.gpu, plan.gpus)
	}
	return &opFailure{
		errs: []*computepb.Errors{{
			Code:    proto.String("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
			Message: proto.String(msg),
			ErrorDetails: []*computepb.ErrorDetails{
				{ErrorInfo: &computepb.ErrorInfo{
					Reason:    proto.String("resource_availability"),
					Domain:    proto.String("compute.googleapis.com"),
					Metadatas: meta,
				}},
				{Help: &computepb.Help{Links: []*computepb.HelpLink{{
					Description: proto.String("Troubleshooting documentation"),
					Url:         proto.String("https://cloud.google.com/compute/docs/resource-error"),
				}}}},
				{LocalizedMessage: &computepb.LocalizedMessage{
					Locale:  proto.String("en-US"),
					Message: proto.String(fmt.Sprintf("A %s VM instance is currently unavailable in the %s zone. Alternatively, you can try your request again with a different VM hardware configuration or at a later time.", plan.machine.name, z.name)),
				}},
			},
		}},
		httpCode: http.StatusServiceUnavailable,
		httpMsg:  httpStatusText(http.StatusServiceUnavailable),
	}
}

// storeInstance builds the instance GCE would show and stores it.
func (s *Server) storeInstance(plan *insertPlan, req *computepb.Instance, id uint64, status string) *instanceRecord {
	z := plan.zone
	inst := proto.Clone(req).(*computepb.Instance)
	inst.Kind = proto.String("compute#instance")
	inst.Id = proto.Uint64(id)
	inst.Zone = proto.String(s.zoneURL(z.name))
	inst.SelfLink = proto.String(s.instanceURL(z.name, inst.GetName()))
	inst.MachineType = proto.String(s.zoneURL(z.name) + "/machineTypes/" + plan.machine.name)
	inst.Status = proto.String(status)
	inst.CreationTimestamp = proto.String(s.stamp())
	inst.CpuPlatform = proto.String(cpuPlatform(plan.machine))
	inst.Fingerprint = proto.String(s.fingerprint())
	inst.LabelFingerprint = proto.String(s.fingerprint())
	inst.StartRestricted = proto.Bool(false)
	inst.DeletionProtection = proto.Bool(inst.GetDeletionProtection())
	inst.Disks = plan.disks
	inst.GuestAccelerators = plan.accelURLs
	if inst.Metadata == nil {
		inst.Metadata = &computepb.Metadata{}
	}
	inst.Metadata.Kind = proto.String("compute#metadata")
	inst.Metadata.Fingerprint = proto.String(s.fingerprint())

	sc := inst.Scheduling
	if sc == nil {
		sc = &computepb.Scheduling{}
		inst.Scheduling = sc
	}
	// GCE's defaults: TERMINATE and no automatic restart for Spot and
	// preemptible VMs, MIGRATE and restart for the others.
	sc.OnHostMaintenance = proto.String(onHostMaintenance(sc))
	if sc.AutomaticRestart == nil {
		sc.AutomaticRestart = proto.Bool(!plan.spot)
	}
	sc.ProvisioningModel = proto.String(orDefault(sc.GetProvisioningModel(), "STANDARD"))
	sc.Preemptible = proto.Bool(sc.GetPreemptible())

	rec := &instanceRecord{zone: z.name, region: z.region, cpus: plan.machine.cpus, gpu: plan.gpu, gpus: plan.gpus, preemptible: plan.spot}
	inst.NetworkInterfaces = plan.nics
	for _, nic := range inst.NetworkInterfaces {
		if nic.NetworkIP == nil {
			nic.NetworkIP = proto.String(s.allocateIP(z.region))
		}
		s.usedIPs[nic.GetNetworkIP()] = true
		rec.ips = append(rec.ips, nic.GetNetworkIP())
		for _, ac := range nic.AccessConfigs {
			if ac.NatIP == nil {
				s.nextNAT++
				// Real external addresses of us-central1 are often in
				// 34.0.0.0/8; a recognisable range makes leaks obvious.
				ac.NatIP = proto.String(fmt.Sprintf("34.%d.%d.%d", 100+(s.nextNAT>>16)%100, (s.nextNAT>>8)&0xff, s.nextNAT&0xff))
			}
		}
	}
	rec.inst = inst
	s.instances[z.name+"/"+inst.GetName()] = rec
	return rec
}

func cpuPlatform(m *machineSpec) string {
	switch m.family() {
	case "c3", "a3":
		return "Intel Sapphire Rapids"
	case "n2d", "c2d", "c3d":
		return "AMD Milan"
	case "g2":
		return "Intel Cascade Lake"
	}
	return "Intel Broadwell"
}

// allocateIP hands out the next free address of the region's subnet. GCE
// reserves the network address and the gateway (.0, .1) and the last two.
func (s *Server) allocateIP(region string) string {
	r := s.world.regionByName[region]
	base := r.subnet.Addr().As4()
	start := binary.BigEndian.Uint32(base[:])
	size := uint32(1) << (32 - r.subnet.Bits())
	if s.nextHost[region] < 2 {
		s.nextHost[region] = 2
	}
	for tries := uint32(0); tries < size; tries++ {
		off := s.nextHost[region]
		s.nextHost[region]++
		if s.nextHost[region] >= size-2 {
			s.nextHost[region] = 2
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], start+off)
		ip := netip.AddrFrom4(b).String()
		if !s.usedIPs[ip] {
			return ip
		}
	}
	// A /20 holds thousands of addresses; running out means a test leaked
	// instances, and a duplicate address makes that visible.
	return r.subnet.Addr().String()
}

func (s *Server) lookupInstance(rc *reqCtx) (*instanceRecord, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	rec := s.instances[z.name+"/"+rc.params["instance"]]
	if rec == nil {
		return nil, resourceNotFound(s.instancePath(z.name, rc.params["instance"]))
	}
	return rec, nil
}

func (s *Server) handleInstancesGet(rc *reqCtx) (proto.Message, error) {
	rec, err := s.lookupInstance(rc)
	if err != nil {
		return nil, err
	}
	return proto.Clone(rec.inst), nil
}

func (s *Server) handleInstancesDelete(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	rid, err := requestID(rc)
	if err != nil {
		return nil, err
	}
	if op := s.replayed("instances.delete", z.name, rid, []byte(rc.params["instance"])); op != nil {
		return op, nil
	}
	ir, err := s.lookupInstance(rc)
	if err != nil {
		return nil, err
	}
	ir.inst.Status = proto.String("STOPPING")
	rec := s.newOperation(ir.zone, "delete", ir.inst.GetName(), ir.inst.GetId(), rid)
	rec.body = []byte(rc.params["instance"])
	rec.onDone = func() { s.removeInstance(ir) }
	s.settle()
	return proto.Clone(rec.op), nil
}

func instanceGetter(inst *computepb.Instance) fieldGetter {
	return func(f string) (string, bool, bool) {
		if v, present, known := labelGetter(inst.GetLabels(), f); known {
			return v, present, true
		}
		switch f {
		case "name":
			return inst.GetName(), true, true
		case "status":
			return inst.GetStatus(), true, true
		case "id":
			return strconv.FormatUint(inst.GetId(), 10), true, true
		case "zone":
			return inst.GetZone(), true, true
		case "machineType":
			return inst.GetMachineType(), true, true
		}
		return "", false, false
	}
}

// filteredInstances returns the matching instances of one zone ("" = all),
// sorted by zone then name.
func (s *Server) filteredInstances(lp *listParams, zone string) ([]*instanceRecord, error) {
	var recs []*instanceRecord
	for _, r := range s.instances {
		if zone != "" && r.zone != zone {
			continue
		}
		ok, err := lp.match(instanceGetter(r.inst))
		if err != nil {
			return nil, err
		}
		if ok {
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].zone != recs[j].zone {
			return recs[i].zone < recs[j].zone
		}
		return recs[i].inst.GetName() < recs[j].inst.GetName()
	})
	return recs, nil
}

func (s *Server) handleInstancesList(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	lp, err := parseListParams(rc)
	if err != nil {
		return nil, err
	}
	recs, err := s.filteredInstances(lp, z.name)
	if err != nil {
		return nil, err
	}
	pg, next := page(lp, recs)
	out := &computepb.InstanceList{Kind: proto.String("compute#instanceList"), SelfLink: proto.String(s.zoneURL(z.name) + "/instances")}
	for _, r := range pg {
		out.Items = append(out.Items, proto.Clone(r.inst).(*computepb.Instance))
	}
	out.NextPageToken = nextToken(next)
	return out, nil
}

// handleInstancesAggregated pages over all matching instances (zone, name
// order) and groups the page by zone. The first page also carries every
// empty zone with GCE's NO_RESULTS_ON_PAGE warning, as GCE does.
func (s *Server) handleInstancesAggregated(rc *reqCtx) (proto.Message, error) {
	lp, err := parseListParams(rc)
	if err != nil {
		return nil, err
	}
	recs, err := s.filteredInstances(lp, "")
	if err != nil {
		return nil, err
	}
	pg, next := page(lp, recs)
	out := &computepb.InstanceAggregatedList{
		Kind:     proto.String("compute#instanceAggregatedList"),
		SelfLink: proto.String(s.projectURL() + "/aggregated/instances"),
		Items:    map[string]*computepb.InstancesScopedList{},
	}
	for _, r := range pg {
		key := "zones/" + r.zone
		sl := out.Items[key]
		if sl == nil {
			sl = &computepb.InstancesScopedList{}
			out.Items[key] = sl
		}
		sl.Instances = append(sl.Instances, proto.Clone(r.inst).(*computepb.Instance))
	}
	if !lp.hadToken {
		for _, z := range s.world.zones {
			key := "zones/" + z.name
			if out.Items[key] == nil {
				out.Items[key] = &computepb.InstancesScopedList{Warning: noResultsWarning(key)}
			}
		}
	}
	out.NextPageToken = nextToken(next)
	return out, nil
}

// AddInstance stores a pre-existing VM (for example an orphan from an earlier
// run) as RUNNING, bypassing validation: it models state that already
// exists, not a request. A Status set on inst is kept instead, e.g.
// TERMINATED for a stopped or preempted VM (its quota still counts, like
// every stored instance's). Bare machine type names are resolved in the zone,
// and a missing network interface gets nic0 with an address on the default
// subnet. An unknown zone panics: it is a bug in the calling test, and there
// is no error return to report it through.
func (s *Server) AddInstance(zone string, inst *computepb.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	z := s.world.zoneByName[zone]
	if z == nil {
		panic(fmt.Sprintf("gcefake: AddInstance in unknown zone %q", zone))
	}
	inst = proto.Clone(inst).(*computepb.Instance)
	if inst.GetName() == "" {
		inst.Name = proto.String(fmt.Sprintf("instance-%d", s.nextSeq()))
	}
	mtName := inst.GetMachineType()
	if i := strings.LastIndex(mtName, "/"); i >= 0 {
		mtName = mtName[i+1:]
	}
	m := z.machine(mtName)
	if m == nil {
		m = z.machine("n1-standard-1")
	}
	plan := &insertPlan{zone: z, machine: m, gpu: m.accel, gpus: m.accelCount, disks: inst.GetDisks()}
	plan.spot = inst.GetScheduling().GetProvisioningModel() == "SPOT" || inst.GetScheduling().GetPreemptible()
	for _, a := range inst.GetGuestAccelerators() {
		t := a.GetAcceleratorType()
		name := t[strings.LastIndex(t, "/")+1:]
		plan.gpu, plan.gpus = name, a.GetAcceleratorCount()
		plan.accelURLs = append(plan.accelURLs, &computepb.AcceleratorConfig{
			AcceleratorType:  proto.String(s.zoneURL(z.name) + "/acceleratorTypes/" + name),
			AcceleratorCount: proto.Int32(a.GetAcceleratorCount()),
		})
	}
	nics := inst.GetNetworkInterfaces()
	if len(nics) == 0 {
		nics = []*computepb.NetworkInterface{{}}
	}
	for i, n := range nics {
		out := proto.Clone(n).(*computepb.NetworkInterface)
		out.Kind = proto.String("compute#networkInterface")
		out.Name = proto.String(fmt.Sprintf("nic%d", i))
		out.Network = proto.String(s.networkURL())
		out.Subnetwork = proto.String(s.subnetURL(z.region))
		out.StackType = proto.String(orDefault(n.GetStackType(), "IPV4_ONLY"))
		plan.nics = append(plan.nics, out)
	}
	id := inst.GetId()
	if id == 0 {
		id = s.newInstanceID()
	}
	rec := s.storeInstance(plan, inst, id, orDefault(inst.GetStatus(), "RUNNING"))
	if ts := inst.GetCreationTimestamp(); ts != "" {
		rec.inst.CreationTimestamp = proto.String(ts)
	}
}
