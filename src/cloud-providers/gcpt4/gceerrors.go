// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
)

// failureKind is what the provider does about a GCE error.
type failureKind int

const (
	// failFatal: give up and report.
	failFatal failureKind = iota
	// failStockout: the zone has no capacity now; try the next zone.
	failStockout
	// failQuota: a regional or global quota is exhausted; other zones of
	// the region would fail the same way.
	failQuota
	// failTransient: retry the same call (same requestId, so it is safe).
	failTransient
	// failExists: the instance name is taken.
	failExists
	// failNotFound: the resource does not exist.
	failNotFound
)

// stockoutCodes are the operation error codes GCE uses when a zone cannot
// supply the shape right now.
var stockoutCodes = map[string]bool{
	"ZONE_RESOURCE_POOL_EXHAUSTED":              true,
	"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": true,
	"RESOURCE_POOL_EXHAUSTED":                   true,
}

// rateLimitReasons are the legacy error reasons of GCE's per-project and
// per-user rate limits; both come with 403 and clear within the minute
// (compute/docs/api-rate-limits: "403 rateLimitExceeded"; the user limit
// answers "userRateLimitExceeded", cloud.google.com/apis/docs/capping-api-usage),
// so they are retried like a 429, not reported as a permission problem.
var rateLimitReasons = map[string]bool{
	"rateLimitExceeded":     true,
	"userRateLimitExceeded": true,
}

// gceError is a classified GCE failure with what a user needs to act on it.
type gceError struct {
	kind    failureKind
	code    string
	message string
	// zonesAvailable is GCE's hint of zones that have the shape now.
	zonesAvailable []string
	// quotaMetric is the exhausted quota, e.g. NVIDIA_T4_GPUS.
	quotaMetric string
	err         error
}

func (e *gceError) Error() string {
	if e.code != "" {
		return e.code + ": " + e.message
	}
	return e.message
}

func (e *gceError) Unwrap() error { return e.err }

// classifyCall classifies an error returned synchronously by a client call.
// The REST client wraps *googleapi.Error; its Errors[].Reason carries the
// legacy reason that apierror's Reason() leaves empty for Compute.
func classifyCall(err error) *gceError {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		// Transport failures and deadlines: retrying with the same
		// requestId cannot create a second VM.
		return &gceError{kind: failTransient, message: err.Error(), err: err}
	}
	reason := ""
	if len(ge.Errors) > 0 {
		reason = ge.Errors[0].Reason
	}
	out := &gceError{code: reason, message: ge.Message, err: err}
	switch {
	case ge.Code == http.StatusConflict || reason == "alreadyExists":
		out.kind = failExists
	case ge.Code == http.StatusNotFound:
		out.kind = failNotFound
	case reason == "quotaExceeded" || strings.Contains(ge.Message, "QUOTA_EXCEEDED"):
		out.kind = failQuota
		out.quotaMetric = quotaMetricFromMessage(ge.Message)
	case stockoutCodes[reason] || strings.Contains(ge.Message, "ZONE_RESOURCE_POOL_EXHAUSTED"):
		out.kind = failStockout
	case ge.Code == http.StatusTooManyRequests || rateLimitReasons[reason] || ge.Code >= 500:
		out.kind = failTransient
	default:
		out.kind = failFatal
	}
	return out
}

// classifyOperation reads a finished operation's error. It must be checked
// even when Wait returned nil: GCE can finish an operation with an error and
// no HTTP status, which the client reports as success.
func classifyOperation(op *computepb.Operation) *gceError {
	oe := op.GetError()
	if oe == nil || len(oe.GetErrors()) == 0 {
		return nil
	}
	first := oe.GetErrors()[0]
	var msgs []string
	for _, e := range oe.GetErrors() {
		msgs = append(msgs, e.GetMessage())
	}
	out := &gceError{code: first.GetCode(), message: strings.Join(msgs, "; "), kind: failFatal}
	for _, d := range first.GetErrorDetails() {
		if md := d.GetErrorInfo().GetMetadatas(); md != nil {
			if z := md["zonesAvailable"]; z != "" {
				out.zonesAvailable = strings.Split(z, ",")
			}
		}
		if q := d.GetQuotaInfo(); q != nil && out.quotaMetric == "" {
			out.quotaMetric = q.GetLimitName()
			if m := q.GetMetricName(); m != "" {
				out.quotaMetric = strings.ToUpper(m[strings.LastIndex(m, "/")+1:])
			}
		}
	}
	switch {
	case stockoutCodes[out.code]:
		out.kind = failStockout
	case out.code == "QUOTA_EXCEEDED":
		out.kind = failQuota
		if out.quotaMetric == "" {
			out.quotaMetric = quotaMetricFromMessage(out.message)
		}
	case out.code == "RESOURCE_NOT_FOUND":
		out.kind = failNotFound
	}
	return out
}

// quotaMetricFromMessage extracts NAME from GCE's "Quota 'NAME' exceeded".
func quotaMetricFromMessage(msg string) string {
	_, rest, ok := strings.Cut(msg, "Quota '")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "'")
	return name
}

// quotaAdvice is the fix a platform engineer can act on.
func quotaAdvice(metric, region string, spot bool) string {
	switch {
	case metric == "GPUS_ALL_REGIONS":
		return "request an increase of the project-wide GPUS_ALL_REGIONS quota (it is 0 on new projects)"
	case strings.HasPrefix(metric, "NVIDIA_") && !spot:
		return fmt.Sprintf("request more %s quota in %s, or set GCP_PROVISIONING_MODEL=SPOT (or provisioningModel: SPOT in the profile) to use PREEMPTIBLE_%s", metric, region, metric)
	case metric != "":
		return fmt.Sprintf("request more %s quota in %s", metric, region)
	}
	return fmt.Sprintf("check the project's quotas in %s", region)
}
