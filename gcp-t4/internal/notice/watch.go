package notice

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Watcher follows the two metadata keys with the metadata server's hanging
// GET (wait_for_change with last_etag: compute/docs/metadata/
// querying-metadata), so a change reaches State within one round trip
// rather than a polling interval.
type Watcher struct {
	// Base is the metadata server, e.g. http://169.254.169.254.
	Base   string
	Client *http.Client
	State  *State
	Log    *slog.Logger
	// OnChange, if set, is called with each new notice (the console line).
	OnChange func(Notice)
	// Hang is the timeout_sec asked for each hanging GET.
	Hang time.Duration
	// Retry is the first pause after a failed request; it doubles up to
	// ten times Retry.
	Retry time.Duration
}

// Run watches both keys until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	var mu sync.Mutex // OnChange is called one at a time
	for _, key := range []string{KeyPreempted, KeyMaintenance} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watch(ctx, key, &mu)
		}()
	}
	wg.Wait()
}

func (w *Watcher) watch(ctx context.Context, key string, mu *sync.Mutex) {
	etag, failing := "", false
	pause := w.Retry
	for ctx.Err() == nil {
		val, next, err := w.get(ctx, key, etag)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				w.Log.Warn("reading the metadata server failed; retrying", "key", key, "error", err)
				failing = true
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, 10*w.Retry)
			continue
		}
		if failing {
			w.Log.Info("reading the metadata server again", "key", key)
			failing = false
		}
		pause = w.Retry
		etag = next
		mu.Lock()
		n, changed := w.State.Set(key, val)
		if changed && w.OnChange != nil {
			w.OnChange(n)
		}
		mu.Unlock()
	}
}

// get reads key: at once when etag is empty, else the hanging GET.
func (w *Watcher) get(ctx context.Context, key, etag string) (string, string, error) {
	u := strings.TrimSuffix(w.Base, "/") + "/computeMetadata/v1/instance/" + key
	if etag != "" {
		q := url.Values{"wait_for_change": {"true"}, "last_etag": {etag}, "timeout_sec": {fmt.Sprint(int(w.Hang / time.Second))}}
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := w.Client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", key, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("GET %s: %s", key, resp.Status)
	}
	next := resp.Header.Get("ETag")
	if next == "" {
		return "", "", fmt.Errorf("GET %s: no ETag in the answer", key)
	}
	return strings.TrimSpace(string(b)), next, nil
}
