// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"google.golang.org/protobuf/proto"
	"strconv"
)

const maxPageSize = 500

// listParams holds the common list query parameters after validation.
type listParams struct {
	filter   filterExpr
	rawFltr  string
	max      int
	offset   int
	hadToken bool
}

func parseListParams(rc *reqCtx) (*listParams, error) {
	lp := &listParams{max: maxPageSize}
	if f, ok := rc.query("filter"); ok {
		e, err := parseFilter(f)
		if err != nil {
			return nil, invalidField("filter", f, fmt.Sprintf("Invalid list filter expression: %v.", err))
		}
		lp.filter, lp.rawFltr = e, f
	}
	if m, ok := rc.query("maxResults"); ok {
		n, err := strconv.Atoi(m)
		if err != nil || n < 0 {
			return nil, invalidField("maxResults", m, "Must be a non-negative integer.")
		}
		if n > maxPageSize {
			return nil, invalidField("maxResults", m, fmt.Sprintf("Must be less than or equal to %d.", maxPageSize))
		}
		if n > 0 {
			lp.max = n
		}
	}
	if t, ok := rc.query("pageToken"); ok && t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			return nil, invalidField("pageToken", t, "Invalid page token.")
		}
		lp.offset, lp.hadToken = n, true
	}
	return lp, nil
}

// match applies the filter; an unsupported field is a 400, as an ignored
// filter would silently return resources the caller excluded.
func (lp *listParams) match(get fieldGetter) (bool, error) {
	if lp.filter == nil {
		return true, nil
	}
	ok, err := lp.filter.eval(get)
	if err != nil {
		return false, invalidField("filter", lp.rawFltr, fmt.Sprintf("Invalid list filter expression: %v.", err))
	}
	return ok, nil
}

// page cuts one page out of items; the token is the next offset.
func page[T any](lp *listParams, items []T) ([]T, string) {
	if lp.offset >= len(items) {
		return nil, ""
	}
	end := min(lp.offset+lp.max, len(items))
	next := ""
	if end < len(items) {
		next = strconv.Itoa(end)
	}
	return items[lp.offset:end], next
}

// filterItems keeps the items the filter matches.
func filterItems[T any](lp *listParams, items []T, get func(T) fieldGetter) ([]T, error) {
	var out []T
	for _, it := range items {
		ok, err := lp.match(get(it))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, it)
		}
	}
	return out, nil
}

// listPage is what every flat list call does: read the list parameters,
// keep the items the filter matches, and cut out the requested page.
func listPage[T any](rc *reqCtx, items []T, get func(T) fieldGetter) ([]T, *string, error) {
	lp, err := parseListParams(rc)
	if err != nil {
		return nil, nil, err
	}
	kept, err := filterItems(lp, items, get)
	if err != nil {
		return nil, nil, err
	}
	pg, next := page(lp, kept)
	return pg, nextToken(next), nil
}

// nextToken is a list response's nextPageToken: absent on the last page.
func nextToken(next string) *string {
	if next == "" {
		return nil
	}
	return proto.String(next)
}
