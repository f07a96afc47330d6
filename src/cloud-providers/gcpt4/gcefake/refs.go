// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"strings"
)

// resourceRef is a parsed resource reference: a full URL, a
// "projects/P/..." partial URL or a project-relative "zones/..."/"global/..."
// form. GCE accepts all three wherever a request refers to another resource.
type resourceRef struct {
	project string
	segs    []string
}

// parseRef returns ok=false for anything that is not a resource path (a bare
// name, another API's URL). Bare names are only valid inside templates, so the
// callers decide about them.
func (s *Server) parseRef(ref string) (resourceRef, bool) {
	rest := ref
	for _, prefix := range []string{
		apiBase,
		"https://compute.googleapis.com/compute/v1/",
		s.URL() + "/compute/v1/",
	} {
		if r, ok := strings.CutPrefix(ref, prefix); ok {
			rest = r
			break
		}
	}
	if strings.Contains(rest, "://") {
		return resourceRef{}, false
	}
	segs := strings.Split(rest, "/")
	for _, seg := range segs {
		if seg == "" {
			return resourceRef{}, false
		}
	}
	out := resourceRef{project: s.project}
	if segs[0] == "projects" {
		if len(segs) < 3 {
			return resourceRef{}, false
		}
		out.project, segs = segs[1], segs[2:]
	} else if strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "http://") {
		// A full URL must name its project.
		return resourceRef{}, false
	}
	out.segs = segs
	return out, true
}

// zonal matches zones/Z/<collection>/N.
func (r resourceRef) zonal(collection string) (zone, name string, ok bool) {
	if len(r.segs) == 4 && r.segs[0] == "zones" && r.segs[2] == collection {
		return r.segs[1], r.segs[3], true
	}
	return "", "", false
}

// regional matches regions/R/<collection>/N.
func (r resourceRef) regional(collection string) (region, name string, ok bool) {
	if len(r.segs) == 4 && r.segs[0] == "regions" && r.segs[2] == collection {
		return r.segs[1], r.segs[3], true
	}
	return "", "", false
}

// global matches global/<collection>/N.
func (r resourceRef) global(collection string) (name string, ok bool) {
	if len(r.segs) == 3 && r.segs[0] == "global" && r.segs[1] == collection {
		return r.segs[2], true
	}
	return "", false
}

// imageFamily matches global/images/family/F.
func (r resourceRef) imageFamily() (family string, ok bool) {
	if len(r.segs) == 4 && r.segs[0] == "global" && r.segs[1] == "images" && r.segs[2] == "family" {
		return r.segs[3], true
	}
	return "", false
}

func (r resourceRef) path() string {
	return "projects/" + r.project + "/" + strings.Join(r.segs, "/")
}
