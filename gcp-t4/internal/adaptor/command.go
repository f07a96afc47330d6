package adaptor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
)

// stopTimeout bounds the wait for calls in flight at shutdown: a create
// runs at most the provider's LongestCall (the DaemonSet's termination
// grace covers it).
const stopTimeout = gcpt4.LongestCall

// adaptorFlags are `gcp-t4 adaptor`'s settings.
type adaptorFlags struct {
	socket, podsDir, kubeconfigPath string
	pf                              *providerflags.Flags
}

// newFlagSet is `gcp-t4 adaptor`'s flag set: its own flags, then the
// provider's, which default to the same env vars as in CAA.
func newFlagSet() (*flag.FlagSet, *adaptorFlags) {
	fs := flag.NewFlagSet("gcp-t4 adaptor", flag.ContinueOnError)
	reg := provider.NewFlagRegistrar(fs)
	a := &adaptorFlags{}
	reg.StringWithEnv(&a.socket, "socket", DefaultSocketPath, "REMOTE_HYPERVISOR_ENDPOINT", "Unix socket to serve the kata remote-hypervisor protocol on (kata's remote_hypervisor_socket)")
	reg.StringWithEnv(&a.podsDir, "pods-dir", DefaultPodsDir, "PODS_DIR", "Directory for per-sandbox files; each sandbox's agent socket path is under it")
	fs.StringVar(&a.kubeconfigPath, "kubeconfig", "", "kubeconfig for recording PeerPods as CAA does; in a pod the service account is used; without either none are recorded")
	a.pf = providerflags.Register(fs)
	fs.Usage = providerflags.Help{
		Synopsis: "gcp-t4 adaptor [flags]",
		About: []string{"Serves the kata remote-hypervisor protocol (ttrpc) on a unix socket in front of the gcp-t4 " +
			"provider, as CAA does, for testing without CAA: each sandbox the shim starts gets a podVM, deleted when it " +
			"stops. It runs until SIGTERM and leaves the live sandboxes' podVMs running, as CAA does."},
	}.Usage(fs)
	return fs, a
}

// CheckFlags parses args as `gcp-t4 adaptor` flags and nothing else,
// without starting anything: the demo takes them and checks them before
// it starts its emulator, so a mistyped flag is misuse, not a failed run.
func CheckFlags(args []string) error {
	fs, _ := newFlagSet()
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: all settings are flags", fs.Arg(0))
	}
	return nil
}

// Start parses `gcp-t4 adaptor` flags, builds and verifies the gcp-t4
// provider as CAA does, and serves it on the socket.
func Start(args []string, version string, stderr io.Writer, logger *slog.Logger) (*Server, error) {
	fs, a := newFlagSet()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: all settings are flags (see -h)", fs.Args())
	}
	return a.start(version, logger)
}

func (a *adaptorFlags) start(version string, logger *slog.Logger) (*Server, error) {
	socket, podsDir, kubeconfigPath, pf := a.socket, a.podsDir, a.kubeconfigPath, a.pf
	prov, err := pf.Provider(context.Background(), logger)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", gcpt4.ProviderName, err)
	}
	if err := prov.ConfigVerifier(); err != nil {
		_ = prov.Teardown()
		return nil, fmt.Errorf("provider %s config verifier: %w", gcpt4.ProviderName, err)
	}
	svc := NewService(prov, podsDir, version, logger)
	if rec, err := recorder(kubeconfigPath); err != nil {
		_ = prov.Teardown()
		return nil, err
	} else if rec != nil {
		svc.WithRecorder(rec)
	}
	srv, err := Listen(socket, svc)
	if err != nil {
		_ = prov.Teardown()
		return nil, err
	}
	srv.teardown = prov.Teardown
	return srv, nil
}

// Run is `gcp-t4 adaptor`: serve until ctx ends (SIGTERM), finish the
// calls in flight and leave the live sandboxes' VMs running, as upstream
// CAA does.
// -h prints its help on stdout; misuse returns a cli.ExitStatus, reported.
func Run(ctx context.Context, args []string, version string, stdout, stderr io.Writer, logger *slog.Logger) error {
	fs, a := newFlagSet()
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		if code == 0 {
			return nil
		}
		return cli.ExitStatus(code)
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return cli.ExitStatus(code)
	}
	srv, err := a.start(version, logger)
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
	err = srv.Stop(stopCtx)
	if left := srv.Left(); len(left) > 0 {
		fmt.Fprintf(stdout, "stopped; %d podVM(s) of live sandboxes left running, as upstream CAA leaves them: %v\n", len(left), left)
	}
	return errors.Join(serveErr, err)
}

// recorder is the PeerPod recorder for the API the flags or the pod give,
// nil when there is none.
func recorder(path string) (Recorder, error) {
	if path == "" && !kubeconfig.InCluster() {
		return nil, nil
	}
	c, err := caaconfig.Connect(path, "", "gcp-t4-adaptor")
	if err != nil {
		return nil, err
	}
	return PeerPods{Pods: c.Kube, PeerPods: peerpod.Client{Dynamic: c.Dynamic, CloudProvider: gcpt4.ProviderName}}, nil
}
