// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Shared VPC: with a host project set, the fake's one VPC (the "default"
// network, its subnets, firewall rules and Cloud Routers) belongs to the
// host; the served project is a service project attached to it, whose own
// network reads answer 404. projects.getXpnHost returns the host, as GCE
// does for an attached service project
// (https://cloud.google.com/compute/docs/reference/rest/v1/projects/getXpnHost);
// it returns an empty Project when there is none. Resource Manager's
// testIamPermissions answers for the host project too, with the same
// grants (the caller's compute.subnetworks.use there is what counts).

// SetSharedVPCHost attaches the served project to host ("" detaches).
func (s *Server) SetSharedVPCHost(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.xpnHost = host
}

// vpcProject is the project that owns the VPC.
func (s *Server) vpcProject() string {
	if s.xpnHost != "" {
		return s.xpnHost
	}
	return s.project
}

// projectGate answers for requests to a project the fake does not serve:
// VPC reads go to the VPC's project, image reads may reach public image
// projects, everything else only to the served project.
func (s *Server) projectGate(rt *route, project, path string) *apiError {
	if rt.vpc {
		if project == s.vpcProject() {
			return nil
		}
		if project == s.project {
			return resourceNotFound(trimAPIPath(path))
		}
		return notFoundf("The resource 'projects/%s' was not found", project)
	}
	if project != s.project && (!rt.anyProject || !s.world.hasImageProject(project)) {
		return notFoundf("The resource 'projects/%s' was not found", project)
	}
	return nil
}

func trimAPIPath(path string) string {
	if len(path) > len("/compute/v1/") {
		return path[len("/compute/v1/"):]
	}
	return path
}

func (s *Server) handleGetXpnHost(_ *reqCtx) (proto.Message, error) {
	if s.xpnHost == "" {
		return &computepb.Project{}, nil
	}
	return &computepb.Project{
		Kind:             proto.String("compute#project"),
		Name:             proto.String(s.xpnHost),
		Id:               proto.Uint64(stableID("project/" + s.xpnHost)),
		SelfLink:         proto.String(apiBase + "projects/" + s.xpnHost),
		XpnProjectStatus: proto.String("HOST"),
	}, nil
}
