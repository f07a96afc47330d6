package adaptor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"

	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
)

// stopTimeout bounds the VM deletes at shutdown; GCE deletes take tens of
// seconds each, and they run one after the other.
const stopTimeout = 5 * time.Minute

// Start parses `gcp-t4 adaptor` flags (its own, then the provider's, which
// default to the same env vars as in CAA), builds and verifies the gcp-t4
// provider as CAA does, and serves it on the socket.
func Start(args []string, version string, stderr io.Writer, logger *slog.Logger) (*Server, error) {
	fs := flag.NewFlagSet("gcp-t4 adaptor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	reg := provider.NewFlagRegistrar(fs)
	var socket, podsDir string
	reg.StringWithEnv(&socket, "socket", DefaultSocketPath, "REMOTE_HYPERVISOR_ENDPOINT", "Unix socket to serve the kata remote-hypervisor protocol on (kata's remote_hypervisor_socket)")
	reg.StringWithEnv(&podsDir, "pods-dir", DefaultPodsDir, "PODS_DIR", "Directory for per-sandbox files; each sandbox's agent socket path is under it")
	pf := providerflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: all settings are flags (see -h)", fs.Args())
	}
	prov, err := pf.Provider(context.Background(), logger)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", gcpt4.ProviderName, err)
	}
	if err := prov.ConfigVerifier(); err != nil {
		_ = prov.Teardown()
		return nil, fmt.Errorf("provider %s config verifier: %w", gcpt4.ProviderName, err)
	}
	srv, err := Listen(socket, NewService(prov, podsDir, version, logger))
	if err != nil {
		_ = prov.Teardown()
		return nil, err
	}
	srv.teardown = prov.Teardown
	return srv, nil
}

// Run is `gcp-t4 adaptor`: serve until ctx ends, then delete every live
// sandbox's VM.
func Run(ctx context.Context, args []string, version string, stdout, stderr io.Writer, logger *slog.Logger) error {
	srv, err := Start(args, version, stderr, logger)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "serving the kata remote-hypervisor protocol for provider %s on %s\n", gcpt4.ProviderName, srv.SocketPath())
	var serveErr error
	select {
	case <-ctx.Done():
	case <-srv.Done():
		if err := srv.Err(); err != nil {
			serveErr = fmt.Errorf("serving %s stopped: %w", srv.SocketPath(), err)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	return errors.Join(serveErr, srv.Stop(stopCtx))
}
