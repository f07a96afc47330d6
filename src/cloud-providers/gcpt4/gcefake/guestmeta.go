// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The guest's side of an interruption: what a VM's own metadata server
// (169.254.169.254, metadata.google.internal) tells the guest before GCE
// stops it. The keys and their values follow
// compute/docs/metadata/getting-live-migration-notice (instance/
// maintenance-event: NONE until about 60 s before a maintenance event, then
// MIGRATE_ON_HOST_MAINTENANCE or TERMINATE_ON_HOST_MAINTENANCE; filled in
// for VMs that migrate and for every VM with a GPU) and
// compute/docs/instances/create-use-spot (instance/preempted: FALSE, TRUE
// from the preemption notice, the ACPI soft off that leaves the guest about
// 30 s before the hard off). The request rules follow
// compute/docs/metadata/querying-metadata: the header "Metadata-Flavor:
// Google" is required and X-Forwarded-For refused (403), answers carry
// "Metadata-Flavor: Google" and an ETag that changes with the value, and
// wait_for_change=true hangs until the value differs from last_etag (or
// from the value at the time of the request when no last_etag is given),
// at most timeout_sec seconds.

// Guest-visible values.
const (
	maintenanceNone      = "NONE"
	maintenanceMigrate   = "MIGRATE_ON_HOST_MAINTENANCE"
	maintenanceTerminate = "TERMINATE_ON_HOST_MAINTENANCE"
)

const guestMetadataPrefix = "/computeMetadata/v1/instance/"

// guestState is what the instance's metadata server says about an
// interruption; the zero value is a VM with nothing coming.
type guestState struct {
	maintenanceEvent string // "" is NONE
	preempted        bool
}

func (g guestState) value(key string) (string, bool) {
	switch key {
	case "maintenance-event":
		if g.maintenanceEvent == "" {
			return maintenanceNone, true
		}
		return g.maintenanceEvent, true
	case "preempted":
		if g.preempted {
			return "TRUE", true
		}
		return "FALSE", true
	}
	return "", false
}

// Notice gives the guest of a running instance GCE's advance notice of ev,
// as its metadata server shows it, and leaves the instance running:
// Interrupt then does the stop. A preemption sets instance/preempted to
// TRUE (only Spot and preemptible VMs); host maintenance sets
// instance/maintenance-event to TERMINATE_ON_HOST_MAINTENANCE, or
// MIGRATE_ON_HOST_MAINTENANCE for a VM that live migrates. A host error
// comes without notice, so it is refused here.
func (s *Server) Notice(zone, instance string, ev HostEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, err := s.runningLocked(zone, instance, fmt.Sprintf("notice of %s for", ev), "GCE gives notice only to running VMs")
	if err != nil {
		return err
	}
	switch ev {
	case Preemption:
		if !ir.preemptible {
			return fmt.Errorf("gcefake: notice of preemption for %s/%s: a %s VM is never preempted", zone, instance, ir.inst.GetScheduling().GetProvisioningModel())
		}
	case HostMaintenance:
	case HostError:
		return fmt.Errorf("gcefake: a host error comes without notice (%s/%s)", zone, instance)
	default:
		return fmt.Errorf("gcefake: unknown host event %d", ev)
	}
	s.giveNotice(ir, ev)
	return nil
}

// giveNotice sets the guest-visible value for ev and wakes the guest's
// waits; s.mu must be held.
func (s *Server) giveNotice(ir *instanceRecord, ev HostEvent) {
	switch ev {
	case Preemption:
		ir.guest.preempted = true
	case HostMaintenance:
		if ir.inst.GetScheduling().GetOnHostMaintenance() == "TERMINATE" {
			ir.guest.maintenanceEvent = maintenanceTerminate
		} else {
			ir.guest.maintenanceEvent = maintenanceMigrate
		}
	}
	s.changed()
}

// guestBooted is a fresh boot's metadata: nothing coming.
func (s *Server) guestBooted(ir *instanceRecord) {
	ir.guest = guestState{}
	s.changed()
}

// GuestMetadata is the metadata server the guest of one instance reaches:
// instance/maintenance-event, instance/preempted and instance/attributes/
// NAME (the instance's metadata items), with GCE's request rules and
// wait_for_change. An instance that does not exist, or no longer does, has
// no guest to ask: the handler answers 503, and a hanging request that sees
// its instance go ends so.
func (s *Server) GuestMetadata(zone, instance string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "Google")
		if r.Header.Get("Metadata-Flavor") != "Google" || r.Header.Get("X-Forwarded-For") != "" {
			http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet {
			http.Error(w, "", http.StatusMethodNotAllowed)
			return
		}
		key, ok := strings.CutPrefix(r.URL.Path, guestMetadataPrefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		wait := q.Get("wait_for_change") == "true"
		var timeout time.Duration
		if v := q.Get("timeout_sec"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				http.Error(w, "Invalid timeout_sec", http.StatusBadRequest)
				return
			}
			timeout = time.Duration(n) * time.Second
		}
		val, etag, status := s.guestWait(r, zone+"/"+instance, key, wait, q.Get("last_etag"), timeout)
		if status != http.StatusOK {
			http.Error(w, http.StatusText(status), status)
			return
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/text")
		_, _ = w.Write([]byte(val))
	})
}

// guestWait answers one metadata request: at once, or for wait_for_change
// when the value's ETag differs from last (the value at the start when last
// is empty), the request ends, the timeout passes (wall time, like every
// long-poll here), or the Server closes, whichever is first.
func (s *Server) guestWait(r *http.Request, key, path string, wait bool, last string, timeout time.Duration) (string, string, int) {
	var deadline <-chan time.Time
	if wait && timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	first := true
	for {
		s.mu.Lock()
		s.settle()
		val, status := s.guestValue(key, path)
		ch := s.notify
		s.mu.Unlock()
		if status != http.StatusOK {
			return "", "", status
		}
		etag := guestETag(val)
		if first && last == "" {
			last = etag
		}
		if !wait || etag != last {
			return val, etag, http.StatusOK
		}
		first = false
		select {
		case <-ch:
		case <-deadline:
			return val, etag, http.StatusOK
		case <-r.Context().Done():
			return val, etag, http.StatusOK
		case <-s.closing:
			return val, etag, http.StatusOK
		}
	}
}

// guestValue is one key of an instance's guest metadata; s.mu must be held.
func (s *Server) guestValue(key, path string) (string, int) {
	ir := s.instances[key]
	if ir == nil || ir.inst.GetStatus() == "TERMINATED" {
		return "", http.StatusServiceUnavailable
	}
	if name, ok := strings.CutPrefix(path, "attributes/"); ok {
		for _, it := range ir.inst.GetMetadata().GetItems() {
			if it.GetKey() == name {
				return it.GetValue(), http.StatusOK
			}
		}
		return "", http.StatusNotFound
	}
	if v, ok := ir.guest.value(path); ok {
		return v, http.StatusOK
	}
	return "", http.StatusNotFound
}

// guestETag is a value's ETag: GCE's changes whenever the value does,
// which a hash of the value gives.
func guestETag(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:8])
}
