// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
)

// routeTable lists the endpoints the fake serves, relative to
// /compute/v1/projects/{project}/, as net/http.ServeMux wildcards. It is
// built per call rather than kept in a package variable so there is no
// shared mutable state.
func routeTable() []route {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	return []route{
		{method: get, kind: "projects.get", path: "", h: (*Server).handleProjectGet},
		{method: get, kind: "projects.getXpnHost", path: "getXpnHost", h: (*Server).handleGetXpnHost},
		{method: get, kind: "zones.list", path: "zones", h: (*Server).handleZonesList},
		{method: get, kind: "zones.get", path: "zones/{zone}", h: (*Server).handleZonesGet},
		{method: get, kind: "regions.list", path: "regions", h: (*Server).handleRegionsList},
		{method: get, kind: "regions.get", path: "regions/{region}", h: (*Server).handleRegionsGet},
		{method: get, kind: "instances.list", path: "zones/{zone}/instances", h: (*Server).handleInstancesList},
		{method: post, kind: "instances.insert", path: "zones/{zone}/instances", h: (*Server).handleInstancesInsert},
		{method: get, kind: "instances.get", path: "zones/{zone}/instances/{instance}", h: (*Server).handleInstancesGet},
		{method: del, kind: "instances.delete", path: "zones/{zone}/instances/{instance}", h: (*Server).handleInstancesDelete},
		{method: post, kind: "instances.stop", path: "zones/{zone}/instances/{instance}/stop", h: (*Server).handleInstancesStop},
		{method: post, kind: "instances.start", path: "zones/{zone}/instances/{instance}/start", h: (*Server).handleInstancesStart},
		{method: get, kind: "instances.getSerialPortOutput", path: "zones/{zone}/instances/{instance}/serialPort", h: (*Server).handleSerialPort},
		{method: get, kind: "instances.aggregatedList", path: "aggregated/instances", h: (*Server).handleInstancesAggregated},
		{method: get, kind: "zoneOperations.list", path: "zones/{zone}/operations", h: (*Server).handleZoneOperationsList},
		{method: get, kind: "zoneOperations.get", path: "zones/{zone}/operations/{operation}", h: (*Server).handleZoneOperationGet},
		{method: post, kind: "zoneOperations.wait", path: "zones/{zone}/operations/{operation}/wait", h: (*Server).handleZoneOperationWait, unlocked: true},
		{method: get, kind: "machineTypes.list", path: "zones/{zone}/machineTypes", h: (*Server).handleMachineTypesList},
		{method: get, kind: "machineTypes.get", path: "zones/{zone}/machineTypes/{machineType}", h: (*Server).handleMachineTypesGet},
		{method: get, kind: "acceleratorTypes.list", path: "zones/{zone}/acceleratorTypes", h: (*Server).handleAcceleratorTypesList},
		{method: get, kind: "acceleratorTypes.get", path: "zones/{zone}/acceleratorTypes/{acceleratorType}", h: (*Server).handleAcceleratorTypesGet},
		{method: get, kind: "acceleratorTypes.aggregatedList", path: "aggregated/acceleratorTypes", h: (*Server).handleAcceleratorTypesAggregated},
		{method: get, kind: "images.get", path: "global/images/{image}", h: (*Server).handleImagesGet, anyProject: true},
		{method: get, kind: "images.getFromFamily", path: "global/images/family/{family}", h: (*Server).handleImagesFromFamily, anyProject: true},
		{method: get, kind: "instanceTemplates.get", path: "global/instanceTemplates/{template}", h: (*Server).handleTemplateGet},
		{method: get, kind: "regionInstanceTemplates.get", path: "regions/{region}/instanceTemplates/{template}", h: (*Server).handleRegionTemplateGet},
		{method: get, kind: "networks.get", path: "global/networks/{network}", h: (*Server).handleNetworksGet, vpc: true},
		{method: get, kind: "subnetworks.get", path: "regions/{region}/subnetworks/{subnetwork}", h: (*Server).handleSubnetworksGet, vpc: true},
		{method: get, kind: "firewalls.list", path: "global/firewalls", h: (*Server).handleFirewallsList, vpc: true},
		{method: get, kind: "firewalls.get", path: "global/firewalls/{firewall}", h: (*Server).handleFirewallsGet, vpc: true},
		{method: get, kind: "routers.list", path: "regions/{region}/routers", h: (*Server).handleRoutersList, vpc: true},
		{method: get, kind: "routers.get", path: "regions/{region}/routers/{router}", h: (*Server).handleRoutersGet, vpc: true},
	}
}

// newMux registers every route as a ServeMux method+path pattern, plus the
// Resource Manager paths the IAM check uses.
func (s *Server) newMux(routes []route) *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routes {
		pattern := rt.method + " " + pathBase + "{project}"
		if rt.path != "" {
			pattern += "/" + rt.path
		}
		names := wildcards(rt.path)
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			params := make(map[string]string, len(names))
			for _, n := range names {
				params[n] = r.PathValue(n)
			}
			s.serve(w, r, &rt, r.PathValue("project"), params, nil)
		})
	}
	// Resource Manager checks method and path itself: its errors have
	// another shape.
	mux.HandleFunc(crmPrefix, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s.writeError(w, apiErr(http.StatusBadRequest, "badRequest", fmt.Sprintf("reading request body: %v", err)))
			return
		}
		s.serveResourceManager(w, r, body)
	})
	// IAM and organisation policy (v1.go) answer in their own shape too.
	mux.HandleFunc(v1Prefix, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s.writeError(w, apiErr(http.StatusBadRequest, "badRequest", fmt.Sprintf("reading request body: %v", err)))
			return
		}
		s.serveV1(w, r, body)
	})
	return mux
}

// wildcards lists the {name} segments of a route path.
func wildcards(path string) []string {
	var names []string
	for _, seg := range strings.Split(path, "/") {
		if n, ok := strings.CutPrefix(seg, "{"); ok {
			names = append(names, strings.TrimSuffix(n, "}"))
		}
	}
	return names
}

// serveHTTP dispatches through the mux. A request no pattern matches is
// answered in GCE's JSON error shape rather than ServeMux's plain text: 405
// with the mux's Allow header when the path exists for other methods, 404
// otherwise (ServeMux's redirects for unclean paths included: GCE does not
// redirect).
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// Learn what the mux would answer without sending its plain-text body.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var ae *apiError
	if allow := rec.Header().Get("Allow"); rec.Code == http.StatusMethodNotAllowed && allow != "" {
		w.Header().Set("Allow", allow)
		ae = apiErr(http.StatusMethodNotAllowed, "badRequest", "Method "+r.Method+" is not allowed for "+r.URL.Path+".")
	} else {
		ae = notFoundf("The requested URL %s was not found on this server.", r.URL.Path)
	}
	s.serve(w, r, nil, "", nil, ae)
}
