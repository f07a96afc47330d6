// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// apiError is a synchronous GCE error. It is rendered in GCE's legacy JSON
// shape, because that is what makes googleapi.CheckResponse fill
// googleapi.Error.Code and Errors[0].Reason in the real client.
type apiError struct {
	code    int
	reason  string
	message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("googleapi: Error %d: %s, %s", e.code, e.message, e.reason)
}

func apiErr(code int, reason, msg string) *apiError {
	return &apiError{code: code, reason: reason, message: msg}
}

func notFoundf(format string, args ...any) *apiError {
	return apiErr(http.StatusNotFound, "notFound", fmt.Sprintf(format, args...))
}

func invalidf(format string, args ...any) *apiError {
	return apiErr(http.StatusBadRequest, "invalid", fmt.Sprintf(format, args...))
}

// invalidField produces GCE's usual "Invalid value for field" wording, which
// names the JSON path so callers can tell which part of a request was wrong.
func invalidField(path, value, why string) *apiError {
	return invalidf("Invalid value for field '%s': '%s'. %s", path, value, why)
}

func resourceNotFound(path string) *apiError {
	return notFoundf("The resource '%s' was not found", path)
}

func errorCode(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	return http.StatusInternalServerError
}

type wireErrorItem struct {
	Message string `json:"message"`
	Domain  string `json:"domain"`
	Reason  string `json:"reason"`
}

type wireError struct {
	Error struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Errors  []wireErrorItem `json:"errors"`
	} `json:"error"`
}

func errorBody(err error) []byte {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = apiErr(http.StatusInternalServerError, "backendError", fmt.Sprintf("Internal error in fake: %v", err))
	}
	domain := "global"
	if ae.reason == "rateLimitExceeded" || ae.reason == "quotaExceeded" {
		domain = "usageLimits"
	}
	var we wireError
	we.Error.Code = ae.code
	we.Error.Message = ae.message
	we.Error.Errors = []wireErrorItem{{Message: ae.message, Domain: domain, Reason: ae.reason}}
	b, mErr := json.Marshal(we)
	if mErr != nil {
		// A struct of strings and ints cannot fail to marshal; keep a
		// well-formed body anyway so the client still sees an error.
		return []byte(`{"error":{"code":500,"message":"fake: marshalling error body failed"}}`)
	}
	return b
}
