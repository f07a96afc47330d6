// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package podevent

import (
	"strings"
	"time"
)

// Interruption is what GCE's operation history says ended a podVM:
// compute/docs/instances/create-use-spot finds a preemption there
// (operation type compute.instances.preempted), and
// compute/docs/instances/host-maintenance-overview the host events; a
// user's stop or delete is there too, under the user who made it.
type Interruption struct {
	// Cause is one of the Cause… values.
	Cause string
	// Operation is the operation's type, "" when none was found.
	Operation string
	// By is the operation's user: the principal that stopped or deleted
	// it, or "system" for GCE's own events.
	By string
	// At is when the operation was inserted; zero when none was found.
	At time.Time
}

// Text says in words what ended a podVM, for its pod's Event and the
// reaper's report.
func (in Interruption) Text() string {
	at := ""
	if !in.At.IsZero() {
		at = " at " + in.At.UTC().Format(time.RFC3339)
	}
	switch in.Cause {
	case CausePreempted:
		return "GCE preempted it" + at + " (Spot capacity reclaimed; " + in.Operation + ")"
	case CauseHostMaintenance:
		return "host maintenance stopped it" + at + " (a GPU VM cannot live-migrate; " + in.Operation + ")"
	case CauseHostError:
		return "its host failed" + at + " (" + in.Operation + ")"
	case CauseGuestShutdown:
		return "its guest powered it off" + at + " (" + in.Operation + ")"
	case CauseStopped:
		return principalKind(in.By) + " stopped it" + at + " (instances.stop; GCE's operation log names who)"
	case CauseDeleted:
		return principalKind(in.By) + " deleted it" + at + " (instances.delete; GCE's operation log names who)"
	}
	return "GCE's operations on it name no cause (GCE keeps them for a limited time, and reading them needs compute.zoneOperations.list)"
}

// principalKind names the kind of principal an operation ran as, never
// the principal: the text goes into an Event in the pod's namespace, which
// its tenant reads, and an account's email is the project's to tell.
func principalKind(by string) string {
	switch {
	case by == "":
		return "someone"
	case by == "system":
		return "GCE"
	case strings.HasSuffix(by, ".gserviceaccount.com"):
		return "a service account"
	case strings.Contains(by, "@"):
		return "a user"
	}
	return "a principal"
}
