// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"sort"
	"strconv"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Read-only endpoints over the static world. All run with s.mu held.

func (s *Server) zoneProto(z *zoneSpec) *computepb.Zone {
	return &computepb.Zone{
		Kind:                  proto.String("compute#zone"),
		Id:                    proto.Uint64(stableID("zone/" + z.name)),
		CreationTimestamp:     proto.String(worldEpoch),
		Name:                  proto.String(z.name),
		Description:           proto.String(z.name),
		Status:                proto.String("UP"),
		Region:                proto.String(s.regionURL(z.region)),
		SelfLink:              proto.String(s.zoneURL(z.name)),
		AvailableCpuPlatforms: []string{"Intel Sapphire Rapids", "Intel Cascade Lake", "Intel Skylake", "AMD Milan"},
		SupportsPzs:           proto.Bool(false),
	}
}

func (s *Server) regionProto(r *regionSpec) *computepb.Region {
	reg := &computepb.Region{
		Kind:              proto.String("compute#region"),
		Id:                proto.Uint64(stableID("region/" + r.name)),
		CreationTimestamp: proto.String(worldEpoch),
		Name:              proto.String(r.name),
		Description:       proto.String(r.name),
		Status:            proto.String("UP"),
		SelfLink:          proto.String(s.regionURL(r.name)),
		Quotas:            s.quotaList(r.name),
		SupportsPzs:       proto.Bool(false),
	}
	for _, z := range r.zones {
		reg.Zones = append(reg.Zones, s.zoneURL(z))
	}
	return reg
}

func (s *Server) machineTypeProto(zone string, m *machineSpec) *computepb.MachineType {
	mt := &computepb.MachineType{
		Kind:                         proto.String("compute#machineType"),
		Id:                           proto.Uint64(stableID("machineType/" + m.name)),
		CreationTimestamp:            proto.String(worldEpoch),
		Name:                         proto.String(m.name),
		Description:                  proto.String(fmt.Sprintf("%d vCPUs, %s GB RAM", m.cpus, strconv.FormatFloat(float64(m.memoryMB)/1024, 'f', -1, 64))),
		GuestCpus:                    proto.Int32(m.cpus),
		MemoryMb:                     proto.Int32(m.memoryMB),
		ImageSpaceGb:                 proto.Int32(0),
		MaximumPersistentDisks:       proto.Int32(128),
		MaximumPersistentDisksSizeGb: proto.Int64(263168),
		// GCE reports the zone of a machine type as a bare name, unlike
		// accelerator types, which carry a URL.
		Zone:        proto.String(zone),
		SelfLink:    proto.String(s.zoneURL(zone) + "/machineTypes/" + m.name),
		IsSharedCpu: proto.Bool(m.shared),
	}
	if m.accel != "" {
		mt.Accelerators = []*computepb.Accelerators{{
			GuestAcceleratorType:  proto.String(m.accel),
			GuestAcceleratorCount: proto.Int32(m.accelCount),
		}}
	}
	return mt
}

func (s *Server) acceleratorTypeProto(zone string, a *accelSpec) *computepb.AcceleratorType {
	return &computepb.AcceleratorType{
		Kind:                    proto.String("compute#acceleratorType"),
		Id:                      proto.Uint64(stableID("acceleratorType/" + a.name)),
		CreationTimestamp:       proto.String(worldEpoch),
		Name:                    proto.String(a.name),
		Description:             proto.String(a.description),
		Zone:                    proto.String(s.zoneURL(zone)),
		SelfLink:                proto.String(s.zoneURL(zone) + "/acceleratorTypes/" + a.name),
		MaximumCardsPerInstance: proto.Int32(a.maxCards),
	}
}

func (s *Server) zoneOf(rc *reqCtx) (*zoneSpec, error) {
	z := s.world.zoneByName[rc.params["zone"]]
	if z == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/zones/%s", s.project, rc.params["zone"]))
	}
	return z, nil
}

func (s *Server) handleProjectGet(_ *reqCtx) (proto.Message, error) {
	return &computepb.Project{
		Kind:              proto.String("compute#project"),
		Id:                proto.Uint64(stableID("project/" + s.project)),
		Name:              proto.String(s.project),
		CreationTimestamp: proto.String(worldEpoch),
		SelfLink:          proto.String(s.projectURL()),
		Quotas:            s.quotaList(""),
	}, nil
}

func (s *Server) handleZonesList(rc *reqCtx) (proto.Message, error) {
	pg, next, err := listPage(rc, s.world.zones, func(z *zoneSpec) fieldGetter {
		return simpleGetter(map[string]string{"name": z.name, "status": "UP", "region": s.regionURL(z.region)})
	})
	if err != nil {
		return nil, err
	}
	out := &computepb.ZoneList{Kind: proto.String("compute#zoneList"), SelfLink: proto.String(s.projectURL() + "/zones"), NextPageToken: next}
	for _, z := range pg {
		out.Items = append(out.Items, s.zoneProto(z))
	}
	return out, nil
}

func (s *Server) handleZonesGet(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	return s.zoneProto(z), nil
}

func (s *Server) handleRegionsList(rc *reqCtx) (proto.Message, error) {
	pg, next, err := listPage(rc, s.world.regions, func(r *regionSpec) fieldGetter {
		return simpleGetter(map[string]string{"name": r.name, "status": "UP"})
	})
	if err != nil {
		return nil, err
	}
	out := &computepb.RegionList{Kind: proto.String("compute#regionList"), SelfLink: proto.String(s.projectURL() + "/regions"), NextPageToken: next}
	for _, r := range pg {
		out.Items = append(out.Items, s.regionProto(r))
	}
	return out, nil
}

func (s *Server) handleRegionsGet(rc *reqCtx) (proto.Message, error) {
	r := s.world.regionByName[rc.params["region"]]
	if r == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/regions/%s", s.project, rc.params["region"]))
	}
	return s.regionProto(r), nil
}

func machineGetter(m *machineSpec) fieldGetter {
	return simpleGetter(map[string]string{
		"name":        m.name,
		"guestCpus":   strconv.Itoa(int(m.cpus)),
		"memoryMb":    strconv.Itoa(int(m.memoryMB)),
		"isSharedCpu": strconv.FormatBool(m.shared),
	})
}

func (s *Server) handleMachineTypesList(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	pg, next, err := listPage(rc, z.machines, machineGetter)
	if err != nil {
		return nil, err
	}
	out := &computepb.MachineTypeList{Kind: proto.String("compute#machineTypeList"), SelfLink: proto.String(s.zoneURL(z.name) + "/machineTypes"), NextPageToken: next}
	for _, m := range pg {
		out.Items = append(out.Items, s.machineTypeProto(z.name, m))
	}
	return out, nil
}

func (s *Server) handleMachineTypesGet(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	m := z.machine(rc.params["machineType"])
	if m == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/zones/%s/machineTypes/%s", s.project, z.name, rc.params["machineType"]))
	}
	return s.machineTypeProto(z.name, m), nil
}

func (s *Server) zoneAccels(z *zoneSpec) []*accelSpec {
	var out []*accelSpec
	for _, a := range z.accels {
		out = append(out, s.world.accels[a])
	}
	return out
}

func accelGetter(a *accelSpec) fieldGetter {
	return simpleGetter(map[string]string{"name": a.name, "maximumCardsPerInstance": strconv.Itoa(int(a.maxCards))})
}

func (s *Server) handleAcceleratorTypesList(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	pg, next, err := listPage(rc, s.zoneAccels(z), accelGetter)
	if err != nil {
		return nil, err
	}
	out := &computepb.AcceleratorTypeList{Kind: proto.String("compute#acceleratorTypeList"), SelfLink: proto.String(s.zoneURL(z.name) + "/acceleratorTypes"), NextPageToken: next}
	for _, a := range pg {
		out.Items = append(out.Items, s.acceleratorTypeProto(z.name, a))
	}
	return out, nil
}

func (s *Server) handleAcceleratorTypesGet(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	name := rc.params["acceleratorType"]
	if !z.hasAccel(name) {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/zones/%s/acceleratorTypes/%s", s.project, z.name, name))
	}
	return s.acceleratorTypeProto(z.name, s.world.accels[name]), nil
}

// handleAcceleratorTypesAggregated returns every zone, with GCE's
// NO_RESULTS_ON_PAGE warning for zones without a match, because callers must
// cope with empty scopes in aggregated lists.
func (s *Server) handleAcceleratorTypesAggregated(rc *reqCtx) (proto.Message, error) {
	lp, err := parseListParams(rc)
	if err != nil {
		return nil, err
	}
	out := &computepb.AcceleratorTypeAggregatedList{
		Kind:     proto.String("compute#acceleratorTypeAggregatedList"),
		SelfLink: proto.String(s.projectURL() + "/aggregated/acceleratorTypes"),
		Items:    map[string]*computepb.AcceleratorTypesScopedList{},
	}
	for _, z := range s.world.zones {
		as, err := filterItems(lp, s.zoneAccels(z), accelGetter)
		if err != nil {
			return nil, err
		}
		sl := &computepb.AcceleratorTypesScopedList{}
		for _, a := range as {
			sl.AcceleratorTypes = append(sl.AcceleratorTypes, s.acceleratorTypeProto(z.name, a))
		}
		if len(as) == 0 {
			sl.Warning = noResultsWarning("zones/" + z.name)
		}
		out.Items["zones/"+z.name] = sl
	}
	return out, nil
}

func noResultsWarning(scope string) *computepb.Warning {
	return &computepb.Warning{
		Code:    proto.String("NO_RESULTS_ON_PAGE"),
		Message: proto.String(fmt.Sprintf("There are no results for scope '%s' on this page.", scope)),
		Data:    []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(scope)}},
	}
}

func (s *Server) handleImagesGet(rc *reqCtx) (proto.Message, error) {
	img := s.world.image(rc.project, rc.params["image"])
	if img == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/global/images/%s", rc.project, rc.params["image"]))
	}
	return img, nil
}

func (s *Server) handleImagesFromFamily(rc *reqCtx) (proto.Message, error) {
	img := s.world.imageFromFamily(rc.project, rc.params["family"])
	if img == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/global/images/family/%s", rc.project, rc.params["family"]))
	}
	return img, nil
}

func (s *Server) handleTemplateGet(rc *reqCtx) (proto.Message, error) {
	t := s.world.templates[templateKey("", rc.params["template"])]
	if t == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/global/instanceTemplates/%s", s.project, rc.params["template"]))
	}
	return t, nil
}

func (s *Server) handleRegionTemplateGet(rc *reqCtx) (proto.Message, error) {
	r := rc.params["region"]
	t := s.world.templates[templateKey(r, rc.params["template"])]
	if t == nil || s.world.regionByName[r] == nil {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/regions/%s/instanceTemplates/%s", s.project, r, rc.params["template"]))
	}
	return t, nil
}

func (s *Server) handleNetworksGet(rc *reqCtx) (proto.Message, error) {
	if rc.params["network"] != defaultNetwork {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/global/networks/%s", s.vpcProject(), rc.params["network"]))
	}
	n := &computepb.Network{
		Kind:                                  proto.String("compute#network"),
		Id:                                    proto.Uint64(stableID("network/default")),
		CreationTimestamp:                     proto.String(worldEpoch),
		Name:                                  proto.String(defaultNetwork),
		Description:                           proto.String("Default network for the project"),
		AutoCreateSubnetworks:                 proto.Bool(true),
		SelfLink:                              proto.String(s.networkURL()),
		SelfLinkWithId:                        proto.String(fmt.Sprintf("%sprojects/%s/global/networks/%d", apiBase, s.vpcProject(), stableID("network/default"))),
		RoutingConfig:                         &computepb.NetworkRoutingConfig{RoutingMode: proto.String("REGIONAL")},
		NetworkFirewallPolicyEnforcementOrder: proto.String("AFTER_CLASSIC_FIREWALL"),
		Mtu:                                   proto.Int32(s.world.infra.networkMTU()),
	}
	regions := make([]string, 0, len(s.world.regions))
	for _, r := range s.world.regions {
		regions = append(regions, r.name)
	}
	sort.Strings(regions)
	for _, r := range regions {
		n.Subnetworks = append(n.Subnetworks, s.subnetURL(r))
	}
	return n, nil
}

func (s *Server) handleSubnetworksGet(rc *reqCtx) (proto.Message, error) {
	r := s.world.regionByName[rc.params["region"]]
	if r == nil || rc.params["subnetwork"] != defaultNetwork {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", s.vpcProject(), rc.params["region"], rc.params["subnetwork"]))
	}
	return &computepb.Subnetwork{
		Kind:                  proto.String("compute#subnetwork"),
		Id:                    proto.Uint64(stableID("subnetwork/" + r.name)),
		CreationTimestamp:     proto.String(worldEpoch),
		Name:                  proto.String(defaultNetwork),
		Network:               proto.String(s.networkURL()),
		IpCidrRange:           proto.String(r.subnet.String()),
		GatewayAddress:        proto.String(r.subnet.Addr().Next().String()),
		Region:                proto.String(s.regionURL(r.name)),
		SelfLink:              proto.String(s.subnetURL(r.name)),
		PrivateIpGoogleAccess: proto.Bool(s.world.infra.pga[r.name]),
		StackType:             proto.String("IPV4_ONLY"),
		Purpose:               proto.String("PRIVATE"),
		Fingerprint:           proto.String("fake-fingerprint"),
	}, nil
}

// simpleGetter serves fixed fields; anything else is an unsupported field.
func simpleGetter(fields map[string]string) fieldGetter {
	return func(f string) (string, bool, bool) {
		v, ok := fields[f]
		return v, ok, ok
	}
}
