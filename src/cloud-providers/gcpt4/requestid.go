// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"github.com/google/uuid"
)

// requestNamespace scopes the provider's request IDs; any fixed UUID works,
// it only has to never change between releases.
var requestNamespace = uuid.MustParse("4b0c3a52-6a55-4c0e-9d0f-8f1e2b7c9a11")

// requestID is deterministic in everything that identifies one insert
// attempt, so that a retry after a lost response is recognized by GCE as
// the same request and never makes a second VM. GCE ignores a request whose
// ID it has seen and answers with the first one's operation (InsertInstanceRequest.requestId
// in the discovery document), whatever the body: so every attempt that
// sends another body gets another ID. The model is part of it (the
// standard insert after a failed Spot one is a new request), and so is the
// shape (the next-cheapest shape after a stockout is a new request).
func requestID(project, zone, model, shape, name, sandboxID string) string {
	return uuid.NewSHA1(requestNamespace, []byte(project+"\x00"+zone+"\x00"+model+"\x00"+shape+"\x00"+name+"\x00"+sandboxID)).String()
}
