// Package notice turns GCE's advance notice that it is about to stop a VM,
// which only the VM's own metadata server gives, into something the pod's
// containers can act on. A GPU VM cannot live migrate, so host maintenance
// stops it (the metadata key instance/maintenance-event changes about 60 s
// before: compute/docs/metadata/getting-live-migration-notice), and a Spot
// VM gets about 30 s between the preemption notice (instance/preempted
// turns TRUE) and the hard off (compute/docs/instances/create-use-spot).
// Inside a peer pod the containers cannot ask that metadata server: their
// network namespace routes through the tunnel to the worker node, where
// 169.254.169.254 is the node's. So the podVM watches it (Watcher) and
// serves what it saw (Handler) on a socket systemd opens inside the pod's
// network namespace, as guest-components' api-server-rest does for CDH.
package notice

import (
	"context"
	"sync"
	"time"
)

// Event is what is coming, as a workload reads it.
type Event string

// Events, most urgent first.
const (
	// Preemption: instance/preempted is TRUE; the hard off follows in
	// about PreemptionLead.
	Preemption Event = "preemption"
	// Maintenance: instance/maintenance-event is TERMINATE_ON_HOST_MAINTENANCE
	// (or a value this package does not know, taken as the same: stopping
	// is the safe reading); GCE stops the VM in about MaintenanceLead.
	Maintenance Event = "maintenance"
	// Migration: MIGRATE_ON_HOST_MAINTENANCE; the VM keeps running on
	// another host (never a VM with a GPU), so nothing to drain.
	Migration Event = "migration"
	// None: nothing coming.
	None Event = "none"
)

// GCE's documented lead times between the notice and the stop.
const (
	PreemptionLead  = 30 * time.Second
	MaintenanceLead = 60 * time.Second
)

// The metadata keys watched, and their quiet values.
const (
	KeyPreempted   = "preempted"
	KeyMaintenance = "maintenance-event"
)

// Notice is the answer a workload reads.
type Notice struct {
	Event Event `json:"event"`
	// Drain says whether the VM is going away: true for Preemption and
	// Maintenance.
	Drain bool `json:"drain"`
	// Source is the metadata value behind Event, e.g. "preempted=TRUE".
	Source string `json:"source,omitempty"`
	// NoticedAt is when the podVM first saw the notice; Deadline when GCE's
	// documented lead runs out (the hard off, give or take), and
	// RemainingSeconds the whole seconds left until then at the time of
	// the answer (0 once passed).
	NoticedAt        *time.Time `json:"noticedAt,omitempty"`
	Deadline         *time.Time `json:"deadline,omitempty"`
	RemainingSeconds int        `json:"remainingSeconds"`
}

// State holds the last values seen and when a notice was first seen. It is
// safe for concurrent use.
type State struct {
	now func() time.Time

	mu        sync.Mutex
	values    map[string]string
	event     Event
	noticedAt time.Time
	changed   chan struct{}
}

// NewState returns a State with nothing coming; now is its clock.
func NewState(now func() time.Time) *State {
	return &State{now: now, values: map[string]string{}, event: None, changed: make(chan struct{})}
}

// classify reads the two values into one event.
func classify(values map[string]string) (Event, string) {
	if values[KeyPreempted] == "TRUE" {
		return Preemption, KeyPreempted + "=TRUE"
	}
	switch v := values[KeyMaintenance]; v {
	case "", "NONE":
		return None, ""
	case "MIGRATE_ON_HOST_MAINTENANCE":
		return Migration, KeyMaintenance + "=" + v
	default:
		return Maintenance, KeyMaintenance + "=" + v
	}
}

func lead(e Event) time.Duration {
	switch e {
	case Preemption:
		return PreemptionLead
	case Maintenance:
		return MaintenanceLead
	}
	return 0
}

// Set records a value read from the metadata server and reports the
// notice after it, and whether the event changed.
func (s *State) Set(key, value string) (Notice, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[key] = value
	ev, _ := classify(s.values)
	if ev == s.event {
		return s.noticeLocked(), false
	}
	// A notice's clock starts when the podVM first sees it; a preemption
	// that follows a maintenance notice restarts it, since its lead is
	// shorter and its own.
	if ev == None || ev == Migration {
		s.noticedAt = time.Time{}
	} else {
		s.noticedAt = s.now()
	}
	s.event = ev
	close(s.changed)
	s.changed = make(chan struct{})
	return s.noticeLocked(), true
}

// Current is the notice now.
func (s *State) Current() Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noticeLocked()
}

func (s *State) noticeLocked() Notice {
	ev, src := classify(s.values)
	n := Notice{Event: ev, Source: src, Drain: ev == Preemption || ev == Maintenance}
	if n.Drain && !s.noticedAt.IsZero() {
		at, dl := s.noticedAt, s.noticedAt.Add(lead(ev))
		n.NoticedAt, n.Deadline = &at, &dl
		if left := dl.Sub(s.now()); left > 0 {
			n.RemainingSeconds = int(left / time.Second)
		}
	}
	return n
}

// WaitDrain returns the notice once it says to drain, or the current one
// when ctx ends first.
func (s *State) WaitDrain(ctx context.Context) Notice {
	for {
		s.mu.Lock()
		n, ch := s.noticeLocked(), s.changed
		s.mu.Unlock()
		if n.Drain {
			return n
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s.Current()
		}
	}
}
