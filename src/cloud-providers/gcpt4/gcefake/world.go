// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

const (
	defaultNetwork = "default"
	// worldEpoch is the creation time of the built-in world, fixed so that
	// outputs are stable across runs.
	worldEpoch = "2020-01-01T00:00:00.000-08:00"
)

// world is the static part of the fake: geography, catalogues, images,
// templates and quota limits.
type world struct {
	project      string
	regions      []*regionSpec
	regionByName map[string]*regionSpec
	zones        []*zoneSpec
	zoneByName   map[string]*zoneSpec
	accels       map[string]*accelSpec

	images    map[string][]*computepb.Image // project -> images in insertion order
	templates map[string]*computepb.InstanceTemplate
	quotas    map[string]map[string]float64 // region ("" = project) -> metric -> limit
	// infra is the network plumbing and IAM grants (network.go, iam.go).
	infra *infra
	// serviceAccounts are the project's service account emails; an
	// insert may attach only these (or "default").
	serviceAccounts map[string]bool
	// modelStockouts are zone/provisioning-model pairs out of capacity:
	// Spot and standard capacity run out independently.
	modelStockouts map[string]bool
}

type regionSpec struct {
	name   string
	zones  []string
	subnet netip.Prefix
}

type zoneSpec struct {
	name     string
	region   string
	accels   []string
	machines []*machineSpec
}

type machineSpec struct {
	name       string
	cpus       int32
	memoryMB   int32
	shared     bool
	accel      string // bundled accelerator, "" if none
	accelCount int32
	custom     bool
}

// family is the machine series; N1 custom types (custom-N-M) are N1.
func (m *machineSpec) family() string {
	if m.custom {
		return "n1"
	}
	fam, _, _ := strings.Cut(m.name, "-")
	return fam
}

func defaultWorld(project string) *world {
	w := &world{
		project:      project,
		regionByName: map[string]*regionSpec{},
		zoneByName:   map[string]*zoneSpec{},
		accels:       map[string]*accelSpec{},
		images:       map[string][]*computepb.Image{},
		templates:    map[string]*computepb.InstanceTemplate{},
		quotas:       map[string]map[string]float64{"": {"GPUS_ALL_REGIONS": 16}},
		// Every project has the Compute Engine default service account,
		// PROJECT_NUMBER-compute@developer.gserviceaccount.com
		// (compute/docs/access/service-accounts#default_service_account).
		serviceAccounts: map[string]bool{defaultServiceAccount(project): true},
		modelStockouts:  map[string]bool{},
	}
	geo := []struct {
		region   string
		suffixes []string
		cidr     string
	}{
		{"us-central1", []string{"a", "b", "c", "f"}, "10.128.0.0/20"},
		{"us-east1", []string{"b", "c", "d"}, "10.142.0.0/20"},
		{"europe-west4", []string{"a", "b", "c"}, "10.164.0.0/20"},
		{"us-east5", []string{"a", "b", "c"}, "10.202.0.0/20"},
	}
	table := accelTable()
	for _, a := range table {
		w.accels[a.name] = a
	}
	for _, g := range geo {
		r := &regionSpec{name: g.region, subnet: netip.MustParsePrefix(g.cidr)}
		for _, suf := range g.suffixes {
			zn := g.region + "-" + suf
			r.zones = append(r.zones, zn)
			z := &zoneSpec{name: zn, region: g.region}
			var here []*accelSpec
			for _, a := range table {
				if slices.Contains(a.zones, zn) {
					z.accels = append(z.accels, a.name)
					here = append(here, a)
				}
			}
			z.machines = machineCatalog(here)
			w.zones = append(w.zones, z)
			w.zoneByName[zn] = z
		}
		w.regions = append(w.regions, r)
		w.regionByName[r.name] = r
		w.quotas[r.name] = map[string]float64{"CPUS": 96, "INSTANCES": 100}
		for _, a := range table {
			w.quotas[r.name][a.quotaMetric] = a.quota
			w.quotas[r.name][a.preemptibleMetric] = a.preemptibleQuota
		}
	}
	// GCE lists zones and regions by name.
	sort.Slice(w.regions, func(i, j int) bool { return w.regions[i].name < w.regions[j].name })
	sort.Slice(w.zones, func(i, j int) bool { return w.zones[i].name < w.zones[j].name })
	w.addImage(project, &computepb.Image{
		Name:       proto.String("podvm-t4"),
		DiskSizeGb: proto.Int64(20),
		Family:     proto.String("podvm-t4"),
		GuestOsFeatures: []*computepb.GuestOsFeature{
			{Type: proto.String("UEFI_COMPATIBLE")},
			{Type: proto.String("GVNIC")},
		},
		CreationTimestamp: proto.String(worldEpoch),
	}, worldEpoch)
	return w
}

// machineCatalog returns the machine types of a zone. Bundled-GPU types only
// exist where their GPU does, as on GCE.
func machineCatalog(zoneAccels []*accelSpec) []*machineSpec {
	var ms []*machineSpec
	for _, n := range []int32{1, 2, 4, 8, 16, 32, 64, 96} {
		ms = append(ms, &machineSpec{name: fmt.Sprintf("n1-standard-%d", n), cpus: n, memoryMB: n * 3840})
	}
	for _, n := range []int32{2, 4, 8, 16, 32, 64, 96} {
		ms = append(ms, &machineSpec{name: fmt.Sprintf("n1-highmem-%d", n), cpus: n, memoryMB: n * 6656})
	}
	for _, n := range []int32{2, 4, 8, 16, 32, 64, 96} {
		// GCE gives n1-highcpu 0.9 GB per vCPU and rounds the MB value.
		ms = append(ms, &machineSpec{name: fmt.Sprintf("n1-highcpu-%d", n), cpus: n, memoryMB: int32(math.Round(float64(n) * 921.6))})
	}
	// E2: 4, 8 and 1 GB per vCPU (compute/docs/general-purpose-machines#e2_machine_types).
	for fam, per := range map[string]int32{"standard": 4096, "highmem": 8192, "highcpu": 1024} {
		for _, n := range []int32{2, 4, 8, 16, 32} {
			if fam == "highmem" && n == 32 {
				continue
			}
			ms = append(ms, &machineSpec{name: fmt.Sprintf("e2-%s-%d", fam, n), cpus: n, memoryMB: n * per})
		}
	}
	ms = append(ms,
		&machineSpec{name: "e2-micro", cpus: 2, memoryMB: 1024, shared: true},
		&machineSpec{name: "e2-small", cpus: 2, memoryMB: 2048, shared: true},
		&machineSpec{name: "e2-medium", cpus: 2, memoryMB: 4096, shared: true},
		&machineSpec{name: "f1-micro", cpus: 1, memoryMB: 614, shared: true},
		&machineSpec{name: "g1-small", cpus: 1, memoryMB: 1740, shared: true},
		&machineSpec{name: "c3-standard-4", cpus: 4, memoryMB: 16384},
		&machineSpec{name: "n2d-standard-4", cpus: 4, memoryMB: 16384},
	)
	for _, a := range zoneAccels {
		for _, b := range a.bundled {
			ms = append(ms, &machineSpec{name: b.name, cpus: b.cpus, memoryMB: b.memoryMB, accel: a.name, accelCount: b.gpus})
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	return ms
}

func (z *zoneSpec) machine(name string) *machineSpec {
	for _, m := range z.machines {
		if m.name == name {
			return m
		}
	}
	if m, err := customMachine(name); m != nil && err == "" {
		return m
	}
	return nil
}

// customMachine parses an N1 custom type, custom-<vCPUs>-<MiB>, and says
// why GCE would refuse it: N1 custom types have 1 or an even number of
// vCPUs up to 96 and 0.9 to 6.5 GB per vCPU in steps of 256 MB
// (compute/docs/general-purpose-machines#custom_machine_types; the same
// limits as GoogleCloudPlatform/golang-samples compute/custom-machine-types,
// cpuSeriesN1Limit). Every zone with N1 serves them. m is nil for names
// that are not custom types at all.
func customMachine(name string) (m *machineSpec, why string) {
	rest, ok := strings.CutPrefix(name, "custom-")
	if !ok {
		return nil, ""
	}
	cpu, mem, ok := strings.Cut(rest, "-")
	n, err1 := strconv.Atoi(cpu)
	mb, err2 := strconv.Atoi(mem)
	if !ok || err1 != nil || err2 != nil {
		return nil, ""
	}
	m = &machineSpec{name: name, cpus: int32(n), memoryMB: int32(mb), custom: true}
	switch {
	case n < 1 || n > 96 || (n > 1 && n%2 != 0):
		return m, "Custom machine types of the N1 series have 1 or an even number of vCPUs, up to 96."
	case mb%256 != 0:
		return m, "The memory of a custom machine type must be a multiple of 256 MB."
	case mb < n*922 || mb > n*6656:
		return m, "The memory of an N1 custom machine type must be between 0.9 GB and 6.5 GB per vCPU."
	}
	return m, ""
}

func defaultServiceAccount(project string) string {
	return fmt.Sprintf("%d-compute@developer.gserviceaccount.com", stableID("project/"+project))
}

// DefaultServiceAccount is the project's Compute Engine default service
// account email.
func (s *Server) DefaultServiceAccount() string { return defaultServiceAccount(s.project) }

// SetStockoutFor makes inserts under one provisioning model (SPOT,
// STANDARD) in zone fail as stocked out, while the other model still has
// capacity; SetStockout covers every model.
func (s *Server) SetStockoutFor(zone, model string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world.modelStockouts[zone+"/"+model] = on
}

// stockedOut reports whether zone has no capacity for model.
func (s *Server) stockedOut(zone, model string) bool {
	return s.stockout[zone] || s.world.modelStockouts[zone+"/"+model]
}

func (z *zoneSpec) hasAccel(name string) bool { return slices.Contains(z.accels, name) }

func (w *world) hasImageProject(p string) bool { return len(w.images[p]) > 0 }

// addImage fills the output-only fields GCE would set and stores a copy.
func (w *world) addImage(project string, img *computepb.Image, now string) {
	img = proto.Clone(img).(*computepb.Image)
	name := img.GetName()
	img.Kind = proto.String("compute#image")
	img.Id = proto.Uint64(stableID("image/" + project + "/" + name))
	img.SelfLink = proto.String(apiBase + "projects/" + project + "/global/images/" + name)
	if img.Status == nil {
		img.Status = proto.String("READY")
	}
	if img.CreationTimestamp == nil {
		img.CreationTimestamp = proto.String(now)
	}
	list := w.images[project]
	list = slices.DeleteFunc(list, func(i *computepb.Image) bool { return i.GetName() == name })
	w.images[project] = append(list, img)
}

func (w *world) image(project, name string) *computepb.Image {
	for _, img := range w.images[project] {
		if img.GetName() == name {
			return img
		}
	}
	return nil
}

// imageFromFamily returns the newest usable image of a family, which is how
// GCE resolves ".../images/family/F".
func (w *world) imageFromFamily(project, family string) *computepb.Image {
	var best *computepb.Image
	var bestT time.Time
	for _, img := range w.images[project] {
		if img.GetFamily() != family || img.GetStatus() != "READY" {
			continue
		}
		switch img.GetDeprecated().GetState() {
		case "DEPRECATED", "OBSOLETE", "DELETED":
			continue
		}
		t, err := time.Parse(time.RFC3339, img.GetCreationTimestamp())
		if err != nil {
			t = time.Time{}
		}
		// Later insertion wins ties, so the newest AddImage is preferred
		// when timestamps are equal.
		if best == nil || !t.Before(bestT) {
			best, bestT = img, t
		}
	}
	return best
}

func templateKey(region, name string) string { return region + "/" + name }

// stableID derives a deterministic numeric id for world objects, so repeated
// runs return the same ids.
func stableID(key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return h.Sum64() >> 1
}

func (s *Server) projectURL() string { return apiBase + "projects/" + s.project }
func (s *Server) zoneURL(zone string) string {
	return s.projectURL() + "/zones/" + zone
}
func (s *Server) regionURL(region string) string {
	return s.projectURL() + "/regions/" + region
}
func (s *Server) networkURL() string {
	return apiBase + "projects/" + s.vpcProject() + "/global/networks/" + defaultNetwork
}
func (s *Server) subnetURL(region string) string {
	return apiBase + "projects/" + s.vpcProject() + "/regions/" + region + "/subnetworks/" + defaultNetwork
}
func (s *Server) instanceURL(zone, name string) string {
	return s.zoneURL(zone) + "/instances/" + name
}
func (s *Server) instancePath(zone, name string) string {
	return "projects/" + s.project + "/zones/" + zone + "/instances/" + name
}

// AddImage adds or replaces an image. Images of projects other than the
// served one stand for public image projects and can be read by anyone.
func (s *Server) AddImage(project string, img *computepb.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world.addImage(project, img, s.stamp())
}

// AddInstanceTemplate stores a template; region "" means a global template.
// Templates hold bare names for machineType and acceleratorType, as GCE's do.
func (s *Server) AddInstanceTemplate(region string, t *computepb.InstanceTemplate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t = proto.Clone(t).(*computepb.InstanceTemplate)
	if t.GetName() == "" {
		t.Name = proto.String(fmt.Sprintf("template-%d", s.nextSeq()))
	}
	t.Kind = proto.String("compute#instanceTemplate")
	t.Id = proto.Uint64(stableID("template/" + region + "/" + t.GetName()))
	if t.CreationTimestamp == nil {
		t.CreationTimestamp = proto.String(s.stamp())
	}
	if region == "" {
		t.SelfLink = proto.String(s.projectURL() + "/global/instanceTemplates/" + t.GetName())
		t.Region = nil
	} else {
		t.SelfLink = proto.String(s.regionURL(region) + "/instanceTemplates/" + t.GetName())
		t.Region = proto.String(s.regionURL(region))
	}
	if t.Properties == nil {
		t.Properties = &computepb.InstanceProperties{}
	}
	s.world.templates[templateKey(region, t.GetName())] = t
}

// SetQuota sets a quota limit; region "" addresses project-wide metrics such
// as GPUS_ALL_REGIONS.
func (s *Server) SetQuota(region, metric string, limit float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.world.quotas[region] == nil {
		s.world.quotas[region] = map[string]float64{}
	}
	s.world.quotas[region][metric] = limit
}
