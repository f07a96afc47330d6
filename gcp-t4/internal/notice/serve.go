package notice

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Path is where Handler answers.
const Path = "/v1/notice"

// Handler serves the notice to the pod's containers: GET /v1/notice
// answers at once; GET /v1/notice?wait=true hangs until the notice says to
// drain, the client goes, or maxWait passes (then it answers the current,
// quiet notice and the client asks again). Read-only, and the answer is
// nothing the containers could not learn from their own VM's metadata
// server if they could reach it, so it needs no credentials.
func Handler(st *State, maxWait time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		var n Notice
		switch r.URL.Query().Get("wait") {
		case "", "false":
			n = st.Current()
		case "true":
			ctx, cancel := context.WithTimeout(r.Context(), maxWait)
			n = st.WaitDrain(ctx)
			cancel()
		default:
			http.Error(w, "wait: want true or false", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(n)
	})
	return mux
}
