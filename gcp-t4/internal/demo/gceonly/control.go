package main

import (
	"fmt"
	"net/http"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// hostEvents are the events the control endpoint makes happen, by the
// name a request gives (gcefake.HostEvent).
var hostEvents = map[string]gcefake.HostEvent{
	"preemption":       gcefake.Preemption,
	"host-maintenance": gcefake.HostMaintenance,
	"host-error":       gcefake.HostError,
}

// controlHandler is the test-only control endpoint: POST
// /test-only/interrupt?zone=Z&instance=N&event=E makes GCE do E
// (preemption, host-maintenance, host-error) to the running instance N,
// as gcefake.Interrupt does it (a system operation in the zone's
// operation list, the guest's notice, then STOPPING and TERMINATED or
// deleted). 200 when done; 409 with the emulator's words for what GCE
// refuses (no such instance, not running, a standard VM preempted); 400
// for a malformed request.
func controlHandler(fake *gcefake.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/test-only/interrupt", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		q := r.URL.Query()
		zone, name, event := q.Get("zone"), q.Get("instance"), q.Get("event")
		ev, ok := hostEvents[event]
		if zone == "" || name == "" || !ok {
			http.Error(w, fmt.Sprintf("want zone, instance and event (preemption, host-maintenance or host-error); got zone %q, instance %q, event %q", zone, name, event), http.StatusBadRequest)
			return
		}
		if err := fake.Interrupt(zone, name, ev); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		fmt.Fprintf(w, "%s of %s/%s\n", ev, zone, name)
	})
	return mux
}
