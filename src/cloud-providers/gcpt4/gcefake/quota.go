// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// usage is what one instance consumes, keyed by quota metric. Regional and
// project-wide metrics have disjoint names, so one map serves both.
type usage map[string]float64

// Simplification: every vCPU counts against CPUS, whatever the machine
// family (real GCE has per-family metrics such as N2D_CPUS).
func (r *instanceRecord) usage(w *world) usage {
	u := usage{"CPUS": float64(r.cpus), "INSTANCES": 1}
	if r.gpu != "" && r.gpus > 0 {
		a := w.accels[r.gpu]
		metric := a.quotaMetric
		if r.preemptible {
			metric = a.preemptibleMetric
		}
		u[metric] += float64(r.gpus)
		u["GPUS_ALL_REGIONS"] += float64(r.gpus)
	}
	return u
}

// projectMetrics are counted across regions.
func isProjectMetric(m string) bool { return strings.HasSuffix(m, "_ALL_REGIONS") }

func (s *Server) usageIn(region string) usage {
	total := usage{}
	for _, rec := range s.instances {
		if region != "" && rec.region != region {
			continue
		}
		for m, v := range rec.usage(s.world) {
			if isProjectMetric(m) != (region == "") {
				continue
			}
			total[m] += v
		}
	}
	return total
}

// quotaList renders the limits of a region ("" = project) with live usage.
func (s *Server) quotaList(region string) []*computepb.Quota {
	limits := s.world.quotas[region]
	names := make([]string, 0, len(limits))
	for m := range limits {
		names = append(names, m)
	}
	sort.Strings(names)
	used := s.usageIn(region)
	out := make([]*computepb.Quota, 0, len(names))
	for _, m := range names {
		out = append(out, &computepb.Quota{
			Metric: proto.String(m),
			Limit:  proto.Float64(limits[m]),
			Usage:  proto.Float64(used[m]),
		})
	}
	return out
}

// quotaViolation describes the first limit an insert would exceed.
type quotaViolation struct {
	metric string
	limit  float64
	region string // "" for project-wide
}

// checkQuota tests add against the limits. GPU metrics are checked first
// because they are the ones callers act on (skip region vs. stop).
func (s *Server) checkQuota(region string, add usage) *quotaViolation {
	metrics := make([]string, 0, len(add))
	for m := range add {
		metrics = append(metrics, m)
	}
	sort.Slice(metrics, func(i, j int) bool {
		gi, gj := strings.Contains(metrics[i], "GPUS"), strings.Contains(metrics[j], "GPUS")
		if gi != gj {
			return gi
		}
		return metrics[i] < metrics[j]
	})
	for _, m := range metrics {
		scope := region
		if isProjectMetric(m) {
			scope = ""
		}
		limit, ok := s.world.quotas[scope][m]
		if !ok {
			continue
		}
		if s.usageIn(scope)[m]+add[m] > limit {
			return &quotaViolation{metric: m, limit: limit, region: scope}
		}
	}
	return nil
}

// operationError renders the violation as GCE's QUOTA_EXCEEDED operation
// error with QuotaExceededInfo.
func (q *quotaViolation) operationError() *computepb.Errors {
	where := "globally"
	dims := map[string]string(nil)
	limitName := strings.ReplaceAll(q.metric, "_", "-") + "-per-project"
	if q.region != "" {
		where = "in region " + q.region
		dims = map[string]string{"region": q.region}
		limitName += "-region"
	}
	msg := fmt.Sprintf("Quota '%s' exceeded. Limit: %.1f %s.", q.metric, q.limit, where)
	return &computepb.Errors{
		Code:    proto.String("QUOTA_EXCEEDED"),
		Message: proto.String(msg),
		ErrorDetails: []*computepb.ErrorDetails{{
			QuotaInfo: &computepb.QuotaExceededInfo{
				MetricName: proto.String("compute.googleapis.com/" + strings.ToLower(q.metric)),
				LimitName:  proto.String(limitName),
				Limit:      proto.Float64(q.limit),
				Dimensions: dims,
			},
		}},
	}
}
