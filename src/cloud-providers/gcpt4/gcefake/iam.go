// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The Cloud Resource Manager v3 method the fake serves beside Compute:
//
//	POST /v3/projects/{project}:testIamPermissions
//
// It is a different Google API (cloudresourcemanager.googleapis.com), so a
// client points its own endpoint at the fake's URL. Errors use the
// google.rpc status shape that API answers with.
const crmPrefix = "/v3/projects/"

// knownPermissions are the permissions the fake can test: those the
// provider and `gcp-t4 preflight` need. Testing any other permission is a
// 400, as Resource Manager answers for one that is not valid on a project.
// The default caller holds all of them.
var knownPermissions = []string{
	"compute.acceleratorTypes.get",
	"compute.acceleratorTypes.list",
	"compute.disks.create",
	"compute.firewalls.list",
	"compute.images.get",
	"compute.images.getFromFamily",
	"compute.images.useReadOnly",
	"compute.instanceTemplates.get",
	"compute.instanceTemplates.useReadOnly",
	"compute.instances.create",
	"compute.instances.delete",
	"compute.instances.get",
	"compute.instances.getSerialPortOutput",
	"compute.instances.list",
	"compute.instances.setLabels",
	"compute.instances.setMetadata",
	"compute.instances.setServiceAccount",
	"compute.instances.setTags",
	"compute.networks.get",
	"compute.networks.use",
	"compute.projects.get",
	"compute.regions.get",
	"compute.routers.list",
	"compute.subnetworks.get",
	"compute.subnetworks.use",
	"compute.zoneOperations.get",
	"compute.zoneOperations.list",
	"iam.serviceAccounts.actAs",
	"resourcemanager.projects.get",
}

var permissionRE = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*\.[a-zA-Z0-9]+\.[a-zA-Z0-9]+$`)

// SetPermissions replaces the caller's grants on the project; unknown
// names panic, as they are a bug in the calling test.
func (s *Server) SetPermissions(granted ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world.infra.granted = map[string]bool{}
	for _, p := range granted {
		if !slices.Contains(knownPermissions, p) {
			panic("gcefake: unknown permission " + p)
		}
		s.world.infra.granted[p] = true
	}
}

// RevokePermissions removes grants from the caller.
func (s *Server) RevokePermissions(perms ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range perms {
		delete(s.world.infra.granted, p)
	}
}

type rpcError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

// serveResourceManager answers the Resource Manager paths.
func (s *Server) serveResourceManager(w http.ResponseWriter, r *http.Request, body []byte) {
	code, resp := func() (int, []byte) {
		s.mu.Lock()
		defer s.mu.Unlock() // also on panic: later requests must not hang
		call := &Call{Method: r.Method, Kind: "projects.testIamPermissions", Path: r.URL.Path, RawQuery: r.URL.RawQuery, Body: bytes.Clone(body)}
		s.calls = append(s.calls, call)
		code, resp := s.testIamPermissions(r, body)
		call.Status = code
		return code, resp
	}()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_, _ = w.Write(resp)
}

func rpcFail(code int, status, msg string) (int, []byte) {
	var e rpcError
	e.Error.Code, e.Error.Status, e.Error.Message = code, status, msg
	b, _ := json.Marshal(e)
	return code, b
}

func (s *Server) testIamPermissions(r *http.Request, body []byte) (int, []byte) {
	rest := strings.TrimPrefix(r.URL.Path, crmPrefix)
	project, method, ok := strings.Cut(rest, ":")
	if !ok || method != "testIamPermissions" || strings.Contains(project, "/") {
		return rpcFail(http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path))
	}
	if r.Method != http.MethodPost {
		return rpcFail(http.StatusMethodNotAllowed, "INVALID_ARGUMENT", fmt.Sprintf("Method %s is not allowed for %s.", r.Method, r.URL.Path))
	}
	// Resource Manager does not tell a missing project from one the
	// caller may not see.
	if project != s.project && project != strconv.FormatUint(stableID("project/"+s.project), 10) && (s.xpnHost == "" || project != s.xpnHost) {
		return rpcFail(http.StatusForbidden, "PERMISSION_DENIED", "The caller does not have permission")
	}
	if t := s.takeFault(r.Method, "projects.testIamPermissions"); t != nil {
		return rpcFail(t.code, "UNAVAILABLE", t.message)
	}
	var req struct {
		Permissions []string `json:"permissions"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Invalid JSON payload received. %v", err))
	}
	var granted []string
	for _, p := range req.Permissions {
		if strings.Contains(p, "*") {
			return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Permissions with wildcards (such as '*' or 'storage.*') are not allowed for testIamPermissions: %s", p))
		}
		if !permissionRE.MatchString(p) || !slices.Contains(knownPermissions, p) {
			return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Permission %s is not valid for this resource.", p))
		}
		if s.world.infra.granted[p] && !slices.Contains(granted, p) {
			granted = append(granted, p)
		}
	}
	out := struct {
		Permissions []string `json:"permissions,omitempty"`
	}{granted}
	b, _ := json.Marshal(out)
	return http.StatusOK, b
}
