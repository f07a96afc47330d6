package remediate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Loop timing: Debounce is the quiet time after a file event before a
// reconcile (GKE writes config.toml with a plain `cat >`, in pieces);
// Resync reconciles regardless, catching anything a notification missed.
type Loop struct {
	Debounce time.Duration
	Resync   time.Duration
	// Reconciled, when set, is told about every pass (tests, benchmarks).
	Reconciled func(Result, error)
}

// Run watches the config directories and reconciles until ctx ends.
func (r *Remediator) Run(ctx context.Context, l Loop) error {
	if l.Debounce <= 0 {
		l.Debounce = 100 * time.Millisecond
	}
	if l.Resync <= 0 {
		l.Resync = time.Minute
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("create file watcher: %w", err)
	}
	defer w.Close()
	configDir := filepath.Dir(r.cfg.Target.Config)
	watch := func() {
		// Watch directories, not files: GKE and we both replace the file,
		// and a watch on the old inode would go quiet. kata-deploy's drop-in
		// directory too: its install and removal are news.
		// kata-remote's config.d: a reset or a kata-deploy run that removes
		// or changes the create_container_timeout drop-in is news too.
		dirs := []string{configDir, r.cfg.Target.DropInDir, filepath.Join(r.cfg.KataDir, "containerd", "config.d")}
		if kd := r.kataConfD(); kd != "" {
			dirs = append(dirs, kd)
		}
		for _, d := range dirs {
			if !slices.Contains(w.WatchList(), d) {
				if err := w.Add(d); err != nil && !errors.Is(err, os.ErrNotExist) {
					r.log.Warn("watching directory failed; relying on resync", "dir", d, "err", err.Error())
				}
			}
		}
	}
	if !r.cfg.DryRun {
		if err := os.MkdirAll(r.cfg.Target.DropInDir, 0o755); err != nil {
			r.log.Warn("creating the drop-in directory failed", "dir", r.cfg.Target.DropInDir, "err", err.Error())
		}
	}
	watch()

	debounce := time.NewTimer(0) // first pass right away
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	resync := time.NewTicker(l.Resync)
	defer resync.Stop()
	var backoff time.Duration
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			if r.relevant(ev.Name) {
				debounce.Reset(l.Debounce)
			}
			continue
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			r.log.Warn("file watcher error; relying on resync", "err", err.Error())
			continue
		case <-debounce.C:
		case <-retry.C:
		case <-resync.C:
			watch()
		}
		res, err := r.Reconcile(ctx)
		if errors.Is(err, errMountLost) {
			return err
		}
		if err != nil {
			// Retry with backoff rather than wait for the resync: the
			// usual cause is transient, e.g. the CRI socket is down while
			// GKE restarts containerd after rewriting its config.
			backoff = min(max(2*backoff, time.Second), l.Resync)
			retry.Reset(backoff)
			r.log.Error("reconcile failed", "err", err.Error(), "retry_in", backoff.String())
		} else {
			backoff = 0
		}
		if l.Reconciled != nil {
			l.Reconciled(res, err)
		}
		if res.RetryIn > 0 {
			retry.Reset(res.RetryIn)
		}
	}
}

// relevant filters out temp files and the state file: a config file, or
// any .toml next to it or in a watched drop-in directory.
func (r *Remediator) relevant(name string) bool {
	base := filepath.Base(name)
	if strings.HasPrefix(base, ".") {
		return false
	}
	if name == r.cfg.Target.Config || name == r.cfg.Target.DropInDir {
		return true
	}
	return strings.HasSuffix(base, ".toml")
}

// Serve exposes /metrics, /healthz and /readyz (ready = converged) on addr
// until ctx ends. It returns the bound address once listening.
func (r *Remediator) Serve(ctx context.Context, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s (--listen): %w", addr, err)
	}
	mux := http.NewServeMux()
	// The payload is a few hundred bytes: gzip would only cost memory.
	mux.Handle("/metrics", promhttp.HandlerFor(r.metrics.Registry, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// /readyz is the contract preflight reads through the pod's Ready
	// condition: 200 only when kata-remote is in the running containerd's
	// configuration and (--create-container-timeout > 0) its effective
	// create_container_timeout is at least the flag's; else 503 and why,
	// in one line.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := r.ReadyReason(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	go srv.Serve(ln)
	return ln.Addr().String(), nil
}
