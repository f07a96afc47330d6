// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"
)

func TestCatalog(t *testing.T) {
	s := newFake(t)
	ctx := testCtx(t)

	at := newClient(t, s, compute.NewAcceleratorTypesRESTClient)
	a, err := at.Get(ctx, &computepb.GetAcceleratorTypeRequest{Project: testProject, Zone: zoneA, AcceleratorType: "nvidia-tesla-t4"})
	if err != nil || a.GetMaximumCardsPerInstance() != 4 || a.GetZone() != "https://www.googleapis.com/compute/v1/projects/demo-project/zones/us-central1-a" {
		t.Fatalf("accelerator type: %v %v", a, err)
	}
	_, err = at.Get(ctx, &computepb.GetAcceleratorTypeRequest{Project: testProject, Zone: "us-central1-c", AcceleratorType: "nvidia-tesla-t4"})
	wantSyncErr(t, err, 404, "notFound")
	it := at.List(ctx, &computepb.ListAcceleratorTypesRequest{Project: testProject, Zone: zoneA, Filter: proto.String(`name = "nvidia-l4"`)})
	if names := collect(t, it.Next, (*computepb.AcceleratorType).GetName); strings.Join(names, ",") != "nvidia-l4" {
		t.Fatalf("filtered list = %v", names)
	}
	// Aggregated: every zone is a key; T4 zones are exactly the documented ones.
	var t4Zones []string
	agg := at.AggregatedList(ctx, &computepb.AggregatedListAcceleratorTypesRequest{Project: testProject, Filter: proto.String(`name = "nvidia-tesla-t4"`)})
	keys := 0
	for {
		pair, err := agg.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatalf("aggregated: %v", err)
		}
		keys++
		if len(pair.Value.GetAcceleratorTypes()) > 0 {
			t4Zones = append(t4Zones, strings.TrimPrefix(pair.Key, "zones/"))
		} else if pair.Value.GetWarning().GetCode() != "NO_RESULTS_ON_PAGE" {
			t.Fatalf("empty scope without warning: %v", pair)
		}
	}
	sort.Strings(t4Zones)
	if keys != 13 || strings.Join(t4Zones, ",") != "europe-west4-b,europe-west4-c,us-central1-a,us-central1-b,us-central1-f,us-east1-c,us-east1-d" {
		t.Fatalf("keys %d, T4 zones %v", keys, t4Zones)
	}

	mt := newClient(t, s, compute.NewMachineTypesRESTClient)
	m, err := mt.Get(ctx, &computepb.GetMachineTypeRequest{Project: testProject, Zone: zoneA, MachineType: "n1-highcpu-2"})
	if err != nil || m.GetGuestCpus() != 2 || m.GetMemoryMb() != 1843 || m.GetZone() != zoneA {
		t.Fatalf("n1-highcpu-2: %v %v", m, err)
	}
	m, err = mt.Get(ctx, &computepb.GetMachineTypeRequest{Project: testProject, Zone: zoneA, MachineType: "a3-highgpu-1g"})
	if err != nil || m.GetGuestCpus() != 26 || len(m.GetAccelerators()) != 1 || m.GetAccelerators()[0].GetGuestAcceleratorType() != "nvidia-h100-80gb" {
		t.Fatalf("a3-highgpu-1g: %v %v", m, err)
	}
	m, err = mt.Get(ctx, &computepb.GetMachineTypeRequest{Project: testProject, Zone: zoneA, MachineType: "e2-medium"})
	if err != nil || !m.GetIsSharedCpu() || m.GetMemoryMb() != 4096 {
		t.Fatalf("e2-medium: %v %v", m, err)
	}
	_, err = mt.Get(ctx, &computepb.GetMachineTypeRequest{Project: testProject, Zone: "us-east1-b", MachineType: "a3-highgpu-1g"})
	wantSyncErr(t, err, 404, "notFound")
	all := collect(t, mt.List(ctx, &computepb.ListMachineTypesRequest{Project: testProject, Zone: "us-east1-b"}).Next, (*computepb.MachineType).GetName)
	// 22 N1, 16 E2, f1-micro and g1-small, c3-standard-4, n2d-standard-4.
	if len(all) != 43 {
		t.Fatalf("us-east1-b machine types: %d %v", len(all), all)
	}
	// Paging through the real iterator with a small page size.
	paged := collect(t, mt.List(ctx, &computepb.ListMachineTypesRequest{Project: testProject, Zone: "us-east1-b", MaxResults: proto.Uint32(5)}).Next, (*computepb.MachineType).GetName)
	if strings.Join(paged, ",") != strings.Join(all, ",") {
		t.Fatalf("paged list differs: %v", paged)
	}
	one := collect(t, mt.List(ctx, &computepb.ListMachineTypesRequest{Project: testProject, Zone: zoneA, Filter: proto.String(`name = "n1-standard-8"`)}).Next, (*computepb.MachineType).GetMemoryMb)
	if len(one) != 1 || one[0] != 30720 {
		t.Fatalf("filtered machine types: %v", one)
	}

	zc := newClient(t, s, compute.NewZonesRESTClient)
	zones := collect(t, zc.List(ctx, &computepb.ListZonesRequest{Project: testProject}).Next, (*computepb.Zone).GetName)
	if len(zones) != 13 {
		t.Fatalf("zones: %v", zones)
	}
	z, err := zc.Get(ctx, &computepb.GetZoneRequest{Project: testProject, Zone: "us-east5-a"})
	if err != nil || z.GetRegion() != "https://www.googleapis.com/compute/v1/projects/demo-project/regions/us-east5" || z.GetStatus() != "UP" {
		t.Fatalf("zone: %v %v", z, err)
	}

	nc := newClient(t, s, compute.NewNetworksRESTClient)
	n, err := nc.Get(ctx, &computepb.GetNetworkRequest{Project: testProject, Network: "default"})
	if err != nil || !n.GetAutoCreateSubnetworks() || len(n.GetSubnetworks()) != 4 {
		t.Fatalf("network: %v %v", n, err)
	}
	sc := newClient(t, s, compute.NewSubnetworksRESTClient)
	sn, err := sc.Get(ctx, &computepb.GetSubnetworkRequest{Project: testProject, Region: "europe-west4", Subnetwork: "default"})
	if err != nil || sn.GetIpCidrRange() != "10.164.0.0/20" || sn.GetGatewayAddress() != "10.164.0.1" {
		t.Fatalf("subnetwork: %v %v", sn, err)
	}
	_, err = sc.Get(ctx, &computepb.GetSubnetworkRequest{Project: testProject, Region: "europe-west4", Subnetwork: "other"})
	wantSyncErr(t, err, 404, "notFound")
}

// collect drains an apiv1 iterator.
func collect[T any, V any](t *testing.T, next func() (T, error), get func(T) V) []V {
	t.Helper()
	var out []V
	for {
		item, err := next()
		if err == iterator.Done {
			return out
		}
		if err != nil {
			t.Fatalf("iterating: %v", err)
		}
		out = append(out, get(item))
	}
}

func TestImages(t *testing.T) {
	s := newFake(t)
	ctx := testCtx(t)
	ic := newClient(t, s, compute.NewImagesRESTClient)
	img, err := ic.Get(ctx, &computepb.GetImageRequest{Project: testProject, Image: "podvm-t4"})
	if err != nil || img.GetDiskSizeGb() != 20 || img.GetStatus() != "READY" || !hasGuestOSFeature(img, "UEFI_COMPATIBLE") {
		t.Fatalf("image: %v %v", img, err)
	}
	now := time.Now()
	s.AddImage(testProject, &computepb.Image{Name: proto.String("podvm-t4-v2"), Family: proto.String("podvm-t4"), DiskSizeGb: proto.Int64(25),
		CreationTimestamp: proto.String(now.Format(timestamp))})
	s.AddImage(testProject, &computepb.Image{Name: proto.String("podvm-t4-v3"), Family: proto.String("podvm-t4"), DiskSizeGb: proto.Int64(30),
		CreationTimestamp: proto.String(now.Add(time.Hour).Format(timestamp)),
		Deprecated:        &computepb.DeprecationStatus{State: proto.String("DEPRECATED")}})
	s.AddImage("debian-cloud", &computepb.Image{Name: proto.String("debian-12-x"), Family: proto.String("debian-12"), DiskSizeGb: proto.Int64(10)})

	fam, err := ic.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: testProject, Family: "podvm-t4"})
	if err != nil || fam.GetName() != "podvm-t4-v2" {
		t.Fatalf("family resolves to %v (%v), want newest non-deprecated podvm-t4-v2", fam.GetName(), err)
	}
	pub, err := ic.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: "debian-cloud", Family: "debian-12"})
	if err != nil || pub.GetName() != "debian-12-x" {
		t.Fatalf("public image project: %v %v", pub, err)
	}
	_, err = ic.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: testProject, Family: "nope"})
	wantSyncErr(t, err, 404, "notFound")

	// The family form on insert picks the same image: its size is the floor.
	c := instancesClient(t, s)
	inst := t4Instance("fam", zoneA, 1)
	inst.Disks[0].InitializeParams.SourceImage = proto.String("https://www.googleapis.com/compute/v1/projects/demo-project/global/images/family/podvm-t4")
	inst.Disks[0].InitializeParams.DiskSizeGb = proto.Int64(24)
	if gerr := insertErr(t, s, zoneA, inst, 400, "invalid"); !strings.Contains(gerr.Message, "(25 GB)") {
		t.Fatalf("message %q", gerr.Message)
	}
	inst.Disks[0].InitializeParams.DiskSizeGb = nil
	mustInsert(t, c, zoneA, inst)
	if got := s.Instances()[0].GetDisks()[0].GetDiskSizeGb(); got != 25 {
		t.Fatalf("disk size %d, want 25 from podvm-t4-v2", got)
	}
	// Images from public projects can be used by the served project.
	deb := t4Instance("deb", zoneA, 1)
	deb.Disks[0].InitializeParams.SourceImage = proto.String("projects/debian-cloud/global/images/family/debian-12")
	mustInsert(t, c, zoneA, deb)
}

func TestInstanceTemplates(t *testing.T) {
	s := newFake(t)
	ctx := testCtx(t)
	props := &computepb.InstanceProperties{
		MachineType: proto.String("n1-standard-4"),
		GuestAccelerators: []*computepb.AcceleratorConfig{{
			AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1),
		}},
		Scheduling: &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)},
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String("projects/demo-project/global/images/family/podvm-t4"),
				DiskType:    proto.String("pd-balanced"),
			},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default")}},
		Labels:            map[string]string{"from": "template"},
		Metadata: &computepb.Metadata{Items: []*computepb.Items{
			{Key: proto.String("template-key"), Value: proto.String("t")},
			{Key: proto.String("shared"), Value: proto.String("template")},
		}},
	}
	s.AddInstanceTemplate("", &computepb.InstanceTemplate{Name: proto.String("podvm-global"), Properties: props})
	s.AddInstanceTemplate("us-central1", &computepb.InstanceTemplate{Name: proto.String("podvm-regional"), Properties: props})

	tc := newClient(t, s, compute.NewInstanceTemplatesRESTClient)
	tpl, err := tc.Get(ctx, &computepb.GetInstanceTemplateRequest{Project: testProject, InstanceTemplate: "podvm-global"})
	if err != nil || tpl.GetProperties().GetMachineType() != "n1-standard-4" {
		t.Fatalf("template get: %v %v", tpl, err)
	}
	rtc := newClient(t, s, compute.NewRegionInstanceTemplatesRESTClient)
	rtpl, err := rtc.Get(ctx, &computepb.GetRegionInstanceTemplateRequest{Project: testProject, Region: "us-central1", InstanceTemplate: "podvm-regional"})
	if err != nil || !strings.HasSuffix(rtpl.GetRegion(), "/regions/us-central1") {
		t.Fatalf("regional template get: %v %v", rtpl, err)
	}

	c := instancesClient(t, s)
	insert := func(zone, name, tmpl string, body *computepb.Instance) (*compute.Operation, error) {
		if body == nil {
			body = &computepb.Instance{}
		}
		body.Name = proto.String(name)
		req := insertReq(zone, body)
		req.SourceInstanceTemplate = proto.String(tmpl)
		op, err := c.Insert(ctx, req)
		if err == nil {
			err = op.Wait(ctx)
		}
		return op, err
	}
	forms := []string{
		"https://www.googleapis.com/compute/v1/projects/demo-project/global/instanceTemplates/podvm-global",
		"projects/demo-project/global/instanceTemplates/podvm-global",
		"global/instanceTemplates/podvm-global",
		"projects/demo-project/regions/us-central1/instanceTemplates/podvm-regional",
		"regions/us-central1/instanceTemplates/podvm-regional",
	}
	for i, form := range forms {
		// The body's metadata replaces the template's item list wholesale.
		body := &computepb.Instance{Metadata: &computepb.Metadata{Items: []*computepb.Items{
			{Key: proto.String("shared"), Value: proto.String("override")},
		}}}
		if _, err := insert(zoneA, fmt.Sprintf("tpl-%d", i), form, body); err != nil {
			t.Fatalf("insert from %s: %v", form, err)
		}
	}
	for _, inst := range s.Instances() {
		items := inst.GetMetadata().GetItems()
		if len(items) != 1 || items[0].GetKey() != "shared" || items[0].GetValue() != "override" {
			t.Fatalf("%s metadata = %v, want only the override", inst.GetName(), items)
		}
		if inst.GetLabels()["from"] != "template" ||
			!strings.HasSuffix(inst.GetGuestAccelerators()[0].GetAcceleratorType(), "/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4") ||
			!strings.HasSuffix(inst.GetMachineType(), "/zones/us-central1-a/machineTypes/n1-standard-4") {
			t.Fatalf("%s did not inherit the template: %v", inst.GetName(), inst)
		}
	}
	// Without overrides the template metadata is kept.
	if _, err := insert(zoneA, "tpl-plain", "global/instanceTemplates/podvm-global", nil); err != nil {
		t.Fatalf("plain template insert: %v", err)
	}
	// A body that overrides machineType and labels replaces them.
	over := &computepb.Instance{MachineType: proto.String("zones/us-central1-f/machineTypes/n1-highmem-8"), Labels: map[string]string{"only": "body"}}
	if _, err := insert("us-central1-f", "tpl-over", "global/instanceTemplates/podvm-global", over); err != nil {
		t.Fatalf("override insert: %v", err)
	}
	got := map[string]*computepb.Instance{}
	for _, inst := range s.Instances() {
		got[inst.GetName()] = inst
	}
	if len(got["tpl-plain"].GetMetadata().GetItems()) != 2 {
		t.Fatalf("template metadata lost: %v", got["tpl-plain"].GetMetadata())
	}
	if o := got["tpl-over"]; !strings.HasSuffix(o.GetMachineType(), "/n1-highmem-8") || len(o.GetLabels()) != 1 || o.GetLabels()["only"] != "body" {
		t.Fatalf("override instance: %v", o)
	}
	// Regional templates only work in their region.
	if _, err := insert("us-east1-c", "tpl-east", "regions/us-central1/instanceTemplates/podvm-regional", nil); err == nil {
		t.Fatal("regional template accepted outside its region")
	} else {
		wantSyncErr(t, err, 400, "invalid")
	}
	_, err = insert(zoneA, "tpl-missing", "global/instanceTemplates/nope", nil)
	wantSyncErr(t, err, 404, "notFound")
	// The template's T4 does not exist in us-central1-c.
	_, err = insert("us-central1-c", "tpl-c", "global/instanceTemplates/podvm-global", nil)
	if gerr := syncErr(t, err, 400, "invalid"); !strings.Contains(gerr.Message, "does not exist in zone 'us-central1-c'") {
		t.Fatalf("message %q", gerr.Message)
	}
	// A template without TERMINATE still hits the live-migration rule.
	bad := proto.Clone(props).(*computepb.InstanceProperties)
	bad.Scheduling = nil
	s.AddInstanceTemplate("", &computepb.InstanceTemplate{Name: proto.String("migrating"), Properties: bad})
	_, err = insert(zoneA, "tpl-migrate", "global/instanceTemplates/migrating", nil)
	if gerr := syncErr(t, err, 400, "badRequest"); gerr.Message != liveMigrationReject {
		t.Fatalf("message %q", gerr.Message)
	}
}

func TestListFilters(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	for i, zone := range []string{zoneA, zoneA, zoneA, "us-central1-b", "europe-west4-b"} {
		inst := t4Instance(fmt.Sprintf("vm-%d", i), zone, 1)
		inst.Labels = map[string]string{"managed-by": "caa", "idx": fmt.Sprint(i)}
		if i == 2 {
			inst.Labels = map[string]string{"owner": "someone-else"}
		}
		mustInsert(t, c, zone, inst)
	}
	list := func(zone, filter string) []string {
		req := &computepb.ListInstancesRequest{Project: testProject, Zone: zone}
		if filter != "" {
			req.Filter = proto.String(filter)
		}
		return collect(t, c.List(ctx, req).Next, (*computepb.Instance).GetName)
	}
	for filter, want := range map[string]string{
		"":                          "vm-0,vm-1,vm-2",
		`labels.managed-by = "caa"`: "vm-0,vm-1",
		`labels.managed-by:*`:       "vm-0,vm-1",
		`labels.owner:*`:            "vm-2",
		`labels.managed-by = "caa" AND labels.idx = "1"`:   "vm-1",
		`(labels.managed-by = "caa") (labels.idx = "0")`:   "vm-0",
		`labels.managed-by = caa labels.idx != "0"`:        "vm-1",
		`name = "vm-2" OR labels.idx = "0"`:                "vm-0,vm-2",
		`labels.nothing:*`:                                 "",
		`status = "RUNNING" AND labels.managed-by = "caa"`: "vm-0,vm-1",
	} {
		if got := strings.Join(list(zoneA, filter), ","); got != want {
			t.Errorf("filter %q: got %q, want %q", filter, got, want)
		}
	}
	for _, bad := range []string{`labels.managed-by ~ "caa"`, `labels.x = `, `(labels.x = "y"`, `cpuPlatform = "x"`, `labels.x = "unterminated`} {
		_, err := c.List(ctx, &computepb.ListInstancesRequest{Project: testProject, Zone: zoneA, Filter: proto.String(bad)}).Next()
		if gerr := syncErr(t, err, 400, "invalid"); !strings.Contains(gerr.Message, "filter") {
			t.Errorf("filter %q: message %q", bad, gerr.Message)
		}
	}
	// Paging with maxResults through the real iterator.
	paged := collect(t, c.List(ctx, &computepb.ListInstancesRequest{Project: testProject, Zone: zoneA, MaxResults: proto.Uint32(1)}).Next, (*computepb.Instance).GetName)
	if strings.Join(paged, ",") != "vm-0,vm-1,vm-2" {
		t.Fatalf("paged = %v", paged)
	}
	_, err := c.List(ctx, &computepb.ListInstancesRequest{Project: testProject, Zone: zoneA, MaxResults: proto.Uint32(501)}).Next()
	wantSyncErr(t, err, 400, "invalid")

	// Aggregated list: every zone appears; empty ones carry a warning.
	agg := c.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: testProject, Filter: proto.String(`labels.managed-by = "caa"`)})
	found := map[string][]string{}
	scopes := 0
	for {
		pair, err := agg.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatalf("aggregated: %v", err)
		}
		scopes++
		for _, inst := range pair.Value.GetInstances() {
			found[pair.Key] = append(found[pair.Key], inst.GetName())
		}
		if len(pair.Value.GetInstances()) == 0 && pair.Value.GetWarning().GetCode() != "NO_RESULTS_ON_PAGE" {
			t.Fatalf("empty scope %s without warning", pair.Key)
		}
	}
	if scopes != 13 || strings.Join(found["zones/us-central1-a"], ",") != "vm-0,vm-1" ||
		strings.Join(found["zones/us-central1-b"], ",") != "vm-3" || strings.Join(found["zones/europe-west4-b"], ",") != "vm-4" || len(found) != 3 {
		t.Fatalf("aggregated: %d scopes, %v", scopes, found)
	}
	// Paged aggregated list still yields every instance once.
	var names []string
	agg = c.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: testProject, MaxResults: proto.Uint32(2)})
	for {
		pair, err := agg.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatalf("aggregated paging: %v", err)
		}
		for _, inst := range pair.Value.GetInstances() {
			names = append(names, inst.GetName())
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "vm-0,vm-1,vm-2,vm-3,vm-4" {
		t.Fatalf("paged aggregated = %v", names)
	}
}

func TestRegionQuotaUsage(t *testing.T) {
	s := newFake(t)
	ctx := testCtx(t)
	rc := newClient(t, s, compute.NewRegionsRESTClient)
	quota := func(region, metric string) (limit, usage float64) {
		t.Helper()
		r, err := rc.Get(ctx, &computepb.GetRegionRequest{Project: testProject, Region: region})
		if err != nil {
			t.Fatalf("region get: %v", err)
		}
		for _, q := range r.GetQuotas() {
			if q.GetMetric() == metric {
				return q.GetLimit(), q.GetUsage()
			}
		}
		t.Fatalf("metric %s missing in %v", metric, r.GetQuotas())
		return 0, 0
	}
	if l, u := quota("us-central1", "NVIDIA_T4_GPUS"); l != 8 || u != 0 {
		t.Fatalf("initial T4 quota %v/%v", u, l)
	}
	for _, m := range []string{"CPUS", "PREEMPTIBLE_NVIDIA_T4_GPUS", "NVIDIA_H100_GPUS", "PREEMPTIBLE_NVIDIA_H100_GPUS", "INSTANCES"} {
		quota("us-central1", m)
	}
	c := instancesClient(t, s)
	inst := t4Instance("usage", zoneA, 2)
	inst.MachineType = proto.String("zones/us-central1-a/machineTypes/n1-standard-8")
	mustInsert(t, c, zoneA, inst)
	spot := t4Instance("usage-spot", zoneA, 1)
	spot.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)}
	mustInsert(t, c, zoneA, spot)
	s.AddInstance("us-central1-f", &computepb.Instance{Name: proto.String("orphan"), MachineType: proto.String("n1-standard-4"),
		GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}}})
	if _, u := quota("us-central1", "NVIDIA_T4_GPUS"); u != 3 {
		t.Fatalf("T4 usage %v, want 3", u)
	}
	if _, u := quota("us-central1", "PREEMPTIBLE_NVIDIA_T4_GPUS"); u != 1 {
		t.Fatalf("preemptible T4 usage %v, want 1", u)
	}
	if _, u := quota("us-central1", "CPUS"); u != 16 {
		t.Fatalf("CPU usage %v, want 16", u)
	}
	if _, u := quota("us-central1", "INSTANCES"); u != 3 {
		t.Fatalf("instance usage %v, want 3", u)
	}
	if _, u := quota("us-east1", "NVIDIA_T4_GPUS"); u != 0 {
		t.Fatalf("us-east1 usage %v", u)
	}
	s.SetQuota("us-central1", "NVIDIA_T4_GPUS", 3)
	if l, _ := quota("us-central1", "NVIDIA_T4_GPUS"); l != 3 {
		t.Fatalf("limit %v after SetQuota", l)
	}
	// Project-wide quota via projects.get.
	pc := newClient(t, s, compute.NewProjectsRESTClient)
	p, err := pc.Get(ctx, &computepb.GetProjectRequest{Project: testProject})
	if err != nil {
		t.Fatalf("project get: %v", err)
	}
	var gpusAll *computepb.Quota
	for _, q := range p.GetQuotas() {
		if q.GetMetric() == "GPUS_ALL_REGIONS" {
			gpusAll = q
		}
	}
	if gpusAll.GetLimit() != 16 || gpusAll.GetUsage() != 4 {
		t.Fatalf("GPUS_ALL_REGIONS = %v", gpusAll)
	}
	regions := collect(t, rc.List(ctx, &computepb.ListRegionsRequest{Project: testProject}).Next, (*computepb.Region).GetName)
	if strings.Join(regions, ",") != "europe-west4,us-central1,us-east1,us-east5" {
		t.Fatalf("regions = %v", regions)
	}
}

func TestAddInstanceOrphan(t *testing.T) {
	s := newFake(t)
	s.AddInstance(zoneA, &computepb.Instance{
		Name:   proto.String("podvm-orphan"),
		Labels: map[string]string{"managed-by": "caa"},
	})
	c := instancesClient(t, s)
	ctx := testCtx(t)
	inst, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "podvm-orphan"})
	if err != nil || inst.GetStatus() != "RUNNING" || inst.GetNetworkInterfaces()[0].GetNetworkIP() == "" || inst.GetId() == 0 {
		t.Fatalf("orphan: %v %v", inst, err)
	}
	// It blocks its name like any instance, and can be deleted.
	_, err = c.Insert(ctx, insertReq(zoneA, t4Instance("podvm-orphan", zoneA, 1)))
	wantSyncErr(t, err, 409, "alreadyExists")
	op, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "podvm-orphan"})
	if err != nil || op.Wait(ctx) != nil || len(s.Instances()) != 0 {
		t.Fatalf("delete orphan: %v", err)
	}
}

func TestSerialPortOutput(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	mustInsert(t, c, zoneA, t4Instance("serial", zoneA, 1))
	s.SetSerialOutput(zoneA, "serial", "boot ok\nagent started\n")
	out, err := c.GetSerialPortOutput(ctx, &computepb.GetSerialPortOutputInstanceRequest{Project: testProject, Zone: zoneA, Instance: "serial", Port: proto.Int32(1)})
	if err != nil || out.GetContents() != "boot ok\nagent started\n" || out.GetStart() != 0 || out.GetNext() != 22 {
		t.Fatalf("serial: %v %v", out, err)
	}
	out, err = c.GetSerialPortOutput(ctx, &computepb.GetSerialPortOutputInstanceRequest{Project: testProject, Zone: zoneA, Instance: "serial", Port: proto.Int32(1), Start: proto.Int64(8)})
	if err != nil || out.GetContents() != "agent started\n" || out.GetStart() != 8 || out.GetNext() != 22 {
		t.Fatalf("serial from 8: %v %v", out, err)
	}
	out, err = c.GetSerialPortOutput(ctx, &computepb.GetSerialPortOutputInstanceRequest{Project: testProject, Zone: zoneA, Instance: "serial", Start: proto.Int64(100)})
	if err != nil || out.GetContents() != "" || out.GetNext() != 22 {
		t.Fatalf("serial past end: %v %v", out, err)
	}
	_, err = c.GetSerialPortOutput(ctx, &computepb.GetSerialPortOutputInstanceRequest{Project: testProject, Zone: zoneA, Instance: "serial", Port: proto.Int32(7)})
	wantSyncErr(t, err, 400, "invalid")
	_, err = c.GetSerialPortOutput(ctx, &computepb.GetSerialPortOutputInstanceRequest{Project: testProject, Zone: zoneA, Instance: "nope"})
	wantSyncErr(t, err, 404, "notFound")
}

func TestRoutingAndCalls(t *testing.T) {
	s := newFake(t)
	get := func(method, path string) (int, string) {
		req, err := http.NewRequest(method, s.URL()+path, nil)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		var we wireError
		if resp.StatusCode != 200 {
			if err := json.Unmarshal(b, &we); err != nil || we.Error.Code != resp.StatusCode || len(we.Error.Errors) != 1 {
				t.Fatalf("%s %s: error body not in GCE shape: %s", method, path, b)
			}
		}
		return resp.StatusCode, we.Error.Message
	}
	if code, _ := get("GET", "/compute/v1/projects/demo-project/zones/us-central1-a/bogus"); code != 404 {
		t.Fatalf("unknown route: %d", code)
	}
	if code, _ := get("GET", "/storage/v1/b"); code != 404 {
		t.Fatalf("foreign API: %d", code)
	}
	if code, _ := get("PUT", "/compute/v1/projects/demo-project/zones/us-central1-a/instances/x"); code != 405 {
		t.Fatalf("wrong method: %d", code)
	}
	if code, msg := get("GET", "/compute/v1/projects/other/zones/us-central1-a"); code != 404 || msg != "The resource 'projects/other' was not found" {
		t.Fatalf("other project: %d %q", code, msg)
	}
	if code, _ := get("GET", "/compute/v1/projects/demo-project/zones/us-central1-a"); code != 200 {
		t.Fatalf("zones.get: %d", code)
	}
	if code, _ := get("GET", "/compute/v1/projects/demo-project/zones/mars-1a"); code != 404 {
		t.Fatalf("unknown zone: %d", code)
	}
	calls := s.Calls()
	if len(calls) != 6 || calls[4].Kind != "zones.get" || calls[4].Status != 200 || calls[2].Status != 405 || calls[0].Kind != "" {
		t.Fatalf("calls = %+v", calls)
	}
	if s.CountCalls("zones.get") != 3 {
		t.Fatalf("zones.get count = %d", s.CountCalls("zones.get"))
	}

	// Through the client: one insert = one POST + one operation GET.
	s.ResetCalls()
	if len(s.Calls()) != 0 {
		t.Fatal("ResetCalls kept calls")
	}
	mustInsert(t, instancesClient(t, s), zoneA, t4Instance("counted", zoneA, 1))
	if s.CountCalls("instances.insert") != 1 || s.CountCalls("zoneOperations.get") != 1 {
		t.Fatalf("calls = %+v", s.Calls())
	}
	ins := s.Calls()[0]
	if ins.Method != "POST" || ins.Path != "/compute/v1/projects/demo-project/zones/us-central1-a/instances" || ins.Status != 200 {
		t.Fatalf("insert call = %+v", ins)
	}
}

func TestConcurrentInserts(t *testing.T) {
	// Concurrent inserts must respect quota exactly: 8 T4, 12 requests.
	s := newFake(t)
	c := instancesClient(t, s)
	ctx := testCtx(t)
	type result struct {
		ok  bool
		err error
	}
	results := make(chan result, 12)
	for i := range 12 {
		go func() {
			zone := []string{"us-central1-a", "us-central1-b", "us-central1-f"}[i%3]
			op, err := c.Insert(ctx, insertReq(zone, t4Instance(fmt.Sprintf("c-%d", i), zone, 1)))
			if err != nil {
				results <- result{err: err}
				return
			}
			_ = op.Wait(ctx)
			results <- result{ok: op.Proto().GetError() == nil}
		}()
	}
	okCount := 0
	for range 12 {
		r := <-results
		if r.err != nil {
			t.Fatalf("insert: %v", r.err)
		}
		if r.ok {
			okCount++
		}
	}
	if okCount != 8 || len(s.Instances()) != 8 {
		t.Fatalf("%d succeeded, %d stored; want 8", okCount, len(s.Instances()))
	}
}
