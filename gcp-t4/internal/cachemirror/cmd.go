package cachemirror

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
)

// Defaults of the podVM's unit (caa-gcp-t4-cache-mirror.service): the
// cache disk is mounted at Dir, and the mirror listens on Listen in the
// VM's own network namespace, where confidential-data-hub (image-rs) runs;
// the pod's containers, in their own namespace, cannot reach it.
const (
	Dir    = "/run/caa-gcp-t4/cache"
	Listen = "127.0.0.1:5000"
)

// ConsolePrefix starts the one line the mirror prints on the serial
// console: what it serves, or why it serves nothing.
const ConsolePrefix = "CAA-GCP-T4-CACHE "

// ExitUnusable is the exit code for a disk that holds no usable layout, or
// an address it cannot listen on: the unit does not restart on it
// (RestartPreventExitStatus=), since another try would meet the same.
const ExitUnusable = 3

// Main is podvm-cache-mirror: it opens the layout, listens, prints the
// console line, tells systemd it is ready, and serves until ctx ends.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("podvm-cache-mirror", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", Dir, "the OCI image layout (the cache disk's mount point)")
	listen := fs.String("listen", Listen, "address to serve the registry API on")
	const about = "Runs in the podVM: serves the cache disk's OCI image layout, read-only, as a registry mirror for\n" +
		"image-rs (docs/cache.md). It checks no layer's digest; image-rs does. It follows no symbolic link."
	if code, ok := stdflags.Parse(fs, args, about, stdout, stderr); !ok {
		return code
	}
	m, err := Open(*dir, log)
	if err != nil {
		// image-rs falls back to each image's own registry; the line says
		// why the start-up will be at network speed.
		consoleLine(stdout, map[string]any{"state": "unusable", "dir": *dir, "reason": err.Error(), "fallback": "images come from their registries"})
		fmt.Fprintf(stderr, "podvm-cache-mirror: %v\n", err)
		return ExitUnusable
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		consoleLine(stdout, map[string]any{"state": "unusable", "dir": *dir, "reason": err.Error(), "fallback": "images come from their registries"})
		fmt.Fprintf(stderr, "podvm-cache-mirror: -listen %s: %v\n", *listen, err)
		// Something else holds the address; a restart every 2 s would only
		// repeat the console line.
		return ExitUnusable
	}
	defer m.Close()
	m.TellPulls(ctx, stdout)
	repos := m.Repositories()
	sort.Strings(repos)
	consoleLine(stdout, map[string]any{"state": "serving", "dir": *dir, "listen": l.Addr().String(), "images": m.Images(), "repositories": repos})
	log.Info("serving the cache", "dir", *dir, "listen", l.Addr().String(), "images", m.Images())
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	notifyReady(log)
	select {
	case <-ctx.Done():
	case err = <-done:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "podvm-cache-mirror: serving: %v\n", err)
		return 1
	}
	return 0
}

func consoleLine(w io.Writer, v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "%s%s\n", ConsolePrefix, b)
}

// notifyReady is sd_notify("READY=1") for a Type=notify unit: the units
// ordered after the mirror start once it listens. Written here rather than
// taken from a library because the podVM's binaries link the standard
// library only (cmd/deps_test.go).
func notifyReady(log *slog.Logger) {
	p := os.Getenv("NOTIFY_SOCKET")
	if p == "" {
		return
	}
	if p[0] == '@' {
		p = "\x00" + p[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		log.Warn("systemd was not told the mirror is ready", "error", err)
		return
	}
	defer c.Close()
	if _, err := c.Write([]byte("READY=1")); err != nil {
		log.Warn("systemd was not told the mirror is ready", "error", err)
	}
}
