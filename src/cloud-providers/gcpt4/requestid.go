package gcpt4

import (
	"github.com/google/uuid"
)

// requestNamespace scopes the provider's request IDs; any fixed UUID works,
// it only has to never change between releases.
var requestNamespace = uuid.MustParse("4b0c3a52-6a55-4c0e-9d0f-8f1e2b7c9a11")

// requestID is deterministic in everything that identifies one create (or
// delete) so that a retried call after a lost response is recognized by GCE
// as the same request and never makes a second VM.
func requestID(op, project, zone, name, sandboxID string) string {
	return uuid.NewSHA1(requestNamespace, []byte(op+"\x00"+project+"\x00"+zone+"\x00"+name+"\x00"+sandboxID)).String()
}
