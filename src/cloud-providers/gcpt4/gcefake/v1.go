// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Two more Google APIs the fake serves beside Compute, both under /v1/,
// for `gcp-t4 preflight`:
//
//	POST /v1/projects/{project}/serviceAccounts/{email}:testIamPermissions
//	     IAM: which permissions the caller holds on one service account
//	     (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/testIamPermissions)
//	POST /v1/projects/{project}:getEffectiveOrgPolicy
//	     Resource Manager v1: the organisation policy in force for a
//	     constraint on the project
//	     (https://cloud.google.com/resource-manager/reference/rest/v1/projects/getEffectiveOrgPolicy)
//
// A client points that API's endpoint at the fake's URL. Errors use the
// google.rpc status shape both APIs answer with.
const v1Prefix = "/v1/projects/"

type v1State struct {
	// serviceAccounts: email -> the permissions the caller holds on it.
	serviceAccounts map[string]map[string]bool
	// policies: constraint name -> its effective policy on the project.
	policies map[string]OrgPolicy
}

// OrgPolicy is a v1 organisation policy as getEffectiveOrgPolicy returns it.
type OrgPolicy struct {
	Constraint    string         `json:"constraint"`
	BooleanPolicy *BooleanPolicy `json:"booleanPolicy,omitempty"`
	ListPolicy    *ListPolicy    `json:"listPolicy,omitempty"`
}

// BooleanPolicy enforces a boolean constraint.
type BooleanPolicy struct {
	Enforced bool `json:"enforced"`
}

// ListPolicy restricts a list constraint; AllValues is ALLOW or DENY.
type ListPolicy struct {
	AllowedValues []string `json:"allowedValues,omitempty"`
	DeniedValues  []string `json:"deniedValues,omitempty"`
	AllValues     string   `json:"allValues,omitempty"`
}

// orgConstraints are the constraints the fake knows, with their kind; any
// other name is a 400, as Resource Manager answers for an unknown one
// (https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints).
var orgConstraints = map[string]string{
	"constraints/compute.trustedImageProjects": "list",
	"constraints/compute.requireShieldedVm":    "boolean",
	"constraints/gcp.resourceLocations":        "list",
	"constraints/compute.vmExternalIpAccess":   "list",
	"constraints/compute.requireOsLogin":       "boolean",
}

// AddServiceAccount creates a service account in the served project, so
// inserts may attach it, and grants the caller perms on it
// (iam.serviceAccounts.actAs, typically).
func (s *Server) AddServiceAccount(email string, perms ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world.serviceAccounts[email] = true
	if s.v1.serviceAccounts == nil {
		s.v1.serviceAccounts = map[string]map[string]bool{}
	}
	g := map[string]bool{}
	for _, p := range perms {
		g[p] = true
	}
	s.v1.serviceAccounts[email] = g
}

// SetOrgPolicy sets the effective policy of a constraint on the project;
// unknown constraints panic, as they are a bug in the calling test.
func (s *Server) SetOrgPolicy(p OrgPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kind, ok := orgConstraints[p.Constraint]
	if !ok || (kind == "list" && p.BooleanPolicy != nil) || (kind == "boolean" && p.ListPolicy != nil) {
		panic("gcefake: bad org policy for " + p.Constraint)
	}
	if s.v1.policies == nil {
		s.v1.policies = map[string]OrgPolicy{}
	}
	s.v1.policies[p.Constraint] = p
}

func (s *Server) serveV1(w http.ResponseWriter, r *http.Request, body []byte) {
	rest := strings.TrimPrefix(r.URL.Path, v1Prefix)
	kind, code, resp := "", 0, []byte(nil)
	switch {
	case strings.Contains(rest, "/serviceAccounts/") && strings.HasSuffix(rest, ":testIamPermissions"):
		kind = "serviceAccounts.testIamPermissions"
	case strings.HasSuffix(rest, ":getEffectiveOrgPolicy") && !strings.Contains(rest, "/"):
		kind = "projects.getEffectiveOrgPolicy"
	}
	s.mu.Lock()
	call := &Call{Method: r.Method, Kind: kind, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Body: bytes.Clone(body)}
	s.calls = append(s.calls, call)
	switch {
	case kind == "":
		code, resp = rpcFail(http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path))
	case r.Method != http.MethodPost:
		code, resp = rpcFail(http.StatusMethodNotAllowed, "INVALID_ARGUMENT", fmt.Sprintf("Method %s is not allowed for %s.", r.Method, r.URL.Path))
	default:
		if f := s.takeFault(r.Method, kind); f != nil {
			code, resp = rpcFail(f.code, "PERMISSION_DENIED", f.message)
		} else if kind == "serviceAccounts.testIamPermissions" {
			code, resp = s.serviceAccountPermissions(rest, body)
		} else {
			code, resp = s.effectiveOrgPolicy(strings.TrimSuffix(rest, ":getEffectiveOrgPolicy"), body)
		}
	}
	call.Status = code
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_, _ = w.Write(resp)
}

func (s *Server) serviceAccountPermissions(rest string, body []byte) (int, []byte) {
	// {project}/serviceAccounts/{email}:testIamPermissions; "-" stands
	// for the account's own project.
	project, acct, _ := strings.Cut(strings.TrimSuffix(rest, ":testIamPermissions"), "/serviceAccounts/")
	if project != "-" && project != s.project {
		return rpcFail(http.StatusForbidden, "PERMISSION_DENIED", "The caller does not have permission")
	}
	granted, ok := s.v1.serviceAccounts[acct]
	if !ok {
		return rpcFail(http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("Service account projects/%s/serviceAccounts/%s does not exist.", project, acct))
	}
	var req struct {
		Permissions []string `json:"permissions"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Invalid JSON payload received. %v", err))
	}
	var out struct {
		Permissions []string `json:"permissions,omitempty"`
	}
	for _, p := range req.Permissions {
		if !permissionRE.MatchString(p) || !strings.HasPrefix(p, "iam.serviceAccounts.") {
			return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Permission %s is not valid for this resource.", p))
		}
		if granted[p] && !slices.Contains(out.Permissions, p) {
			out.Permissions = append(out.Permissions, p)
		}
	}
	b, _ := json.Marshal(out)
	return http.StatusOK, b
}

func (s *Server) effectiveOrgPolicy(project string, body []byte) (int, []byte) {
	if project != s.project {
		return rpcFail(http.StatusForbidden, "PERMISSION_DENIED", "The caller does not have permission")
	}
	var req struct {
		Constraint string `json:"constraint"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Invalid JSON payload received. %v", err))
	}
	if _, ok := orgConstraints[req.Constraint]; !ok {
		return rpcFail(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Request contains an invalid argument: constraint %q is not valid.", req.Constraint))
	}
	p, ok := s.v1.policies[req.Constraint]
	if !ok {
		p = OrgPolicy{Constraint: req.Constraint} // no policy: the constraint's default
	}
	b, _ := json.Marshal(p)
	return http.StatusOK, b
}
