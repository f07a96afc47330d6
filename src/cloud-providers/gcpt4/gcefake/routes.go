package gcefake

import (
	"net/http"
	"sort"
	"strings"
)

// routeTable lists the endpoints the fake serves, relative to
// /compute/v1/projects/{project}/. It is built per call rather than kept in a
// package variable so there is no shared mutable state.
func routeTable() []route {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	return []route{
		{method: get, kind: "projects.get", segs: nil, h: (*Server).handleProjectGet},
		{method: get, kind: "projects.getXpnHost", segs: split("getXpnHost"), h: (*Server).handleGetXpnHost},
		{method: get, kind: "zones.list", segs: split("zones"), h: (*Server).handleZonesList},
		{method: get, kind: "zones.get", segs: split("zones/{zone}"), h: (*Server).handleZonesGet},
		{method: get, kind: "regions.list", segs: split("regions"), h: (*Server).handleRegionsList},
		{method: get, kind: "regions.get", segs: split("regions/{region}"), h: (*Server).handleRegionsGet},
		{method: get, kind: "instances.list", segs: split("zones/{zone}/instances"), h: (*Server).handleInstancesList},
		{method: post, kind: "instances.insert", segs: split("zones/{zone}/instances"), h: (*Server).handleInstancesInsert},
		{method: get, kind: "instances.get", segs: split("zones/{zone}/instances/{instance}"), h: (*Server).handleInstancesGet},
		{method: del, kind: "instances.delete", segs: split("zones/{zone}/instances/{instance}"), h: (*Server).handleInstancesDelete},
		{method: get, kind: "instances.getSerialPortOutput", segs: split("zones/{zone}/instances/{instance}/serialPort"), h: (*Server).handleSerialPort},
		{method: get, kind: "instances.aggregatedList", segs: split("aggregated/instances"), h: (*Server).handleInstancesAggregated},
		{method: get, kind: "zoneOperations.get", segs: split("zones/{zone}/operations/{operation}"), h: (*Server).handleZoneOperationGet},
		{method: post, kind: "zoneOperations.wait", segs: split("zones/{zone}/operations/{operation}/wait"), h: (*Server).handleZoneOperationWait, unlocked: true},
		{method: get, kind: "machineTypes.list", segs: split("zones/{zone}/machineTypes"), h: (*Server).handleMachineTypesList},
		{method: get, kind: "machineTypes.get", segs: split("zones/{zone}/machineTypes/{machineType}"), h: (*Server).handleMachineTypesGet},
		{method: get, kind: "acceleratorTypes.list", segs: split("zones/{zone}/acceleratorTypes"), h: (*Server).handleAcceleratorTypesList},
		{method: get, kind: "acceleratorTypes.get", segs: split("zones/{zone}/acceleratorTypes/{acceleratorType}"), h: (*Server).handleAcceleratorTypesGet},
		{method: get, kind: "acceleratorTypes.aggregatedList", segs: split("aggregated/acceleratorTypes"), h: (*Server).handleAcceleratorTypesAggregated},
		{method: get, kind: "images.get", segs: split("global/images/{image}"), h: (*Server).handleImagesGet, anyProject: true},
		{method: get, kind: "images.getFromFamily", segs: split("global/images/family/{family}"), h: (*Server).handleImagesFromFamily, anyProject: true},
		{method: get, kind: "instanceTemplates.get", segs: split("global/instanceTemplates/{template}"), h: (*Server).handleTemplateGet},
		{method: get, kind: "regionInstanceTemplates.get", segs: split("regions/{region}/instanceTemplates/{template}"), h: (*Server).handleRegionTemplateGet},
		{method: get, kind: "networks.get", segs: split("global/networks/{network}"), h: (*Server).handleNetworksGet, vpc: true},
		{method: get, kind: "subnetworks.get", segs: split("regions/{region}/subnetworks/{subnetwork}"), h: (*Server).handleSubnetworksGet, vpc: true},
		{method: get, kind: "firewalls.list", segs: split("global/firewalls"), h: (*Server).handleFirewallsList, vpc: true},
		{method: get, kind: "firewalls.get", segs: split("global/firewalls/{firewall}"), h: (*Server).handleFirewallsGet, vpc: true},
		{method: get, kind: "routers.list", segs: split("regions/{region}/routers"), h: (*Server).handleRoutersList, vpc: true},
		{method: get, kind: "routers.get", segs: split("regions/{region}/routers/{router}"), h: (*Server).handleRoutersGet, vpc: true},
	}
}

func split(p string) []string { return strings.Split(p, "/") }

// matchRoute finds the route for method and path. When the path exists but
// not for this method, it returns no route and the allowed methods so the
// caller can answer 405.
func (s *Server) matchRoute(method, path string) (rt *route, params map[string]string, project string, allowed []string) {
	rest, ok := strings.CutPrefix(path, pathBase)
	if !ok {
		return nil, nil, "", nil
	}
	segs := strings.Split(rest, "/")
	project, segs = segs[0], segs[1:]
	if project == "" {
		return nil, nil, "", nil
	}
	methods := map[string]bool{}
	for i := range s.routes {
		cand := &s.routes[i]
		p, ok := matchSegs(cand.segs, segs)
		if !ok {
			continue
		}
		if cand.method == method {
			return cand, p, project, nil
		}
		methods[cand.method] = true
	}
	for m := range methods {
		allowed = append(allowed, m)
	}
	sort.Strings(allowed)
	return nil, nil, project, allowed
}

func matchSegs(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	params := map[string]string{}
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return nil, false
			}
			params[p[1:len(p)-1]] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}
