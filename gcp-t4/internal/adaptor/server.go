package adaptor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/caa-gcp-t4/gcp-t4/internal/hypervisor"
)

// Where CAA listens and keeps per-sandbox files; the socket must equal
// kata's remote_hypervisor_socket.
const (
	DefaultSocketPath = "/run/peerpod/hypervisor.sock"
	DefaultPodsDir    = "/run/peerpod/pods"
)

// Server serves a Service on a unix socket over ttrpc.
type Server struct {
	svc      *Service
	srv      *ttrpc.Server
	drain    *drain
	path     string
	teardown func() error

	// served is closed when the serve loop returns, with serveErr set.
	served   chan struct{}
	serveErr error

	stopOnce sync.Once
	stopErr  error
	// left are the podVMs live sandboxes still had at Stop.
	left []string
}

// Listen binds socketPath and starts serving svc. A stale socket left by a
// dead adaptor is replaced; a live one, or any other file, is an error.
func Listen(socketPath string, svc *Service) (*Server, error) {
	if err := clearStaleSocket(socketPath); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return nil, fmt.Errorf("creating the directory of socket %s: %w", socketPath, err)
	}
	l, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("listening on %s (check -socket; unix socket paths are limited to 107 bytes): %w", socketPath, err)
	}
	dr := newDrain()
	srv, err := ttrpc.NewServer(ttrpc.WithUnaryServerInterceptor(dr.intercept))
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("creating the ttrpc server: %w", err)
	}
	hypervisor.RegisterHypervisorService(srv, svc)
	s := &Server{svc: svc, srv: srv, drain: dr, path: socketPath, served: make(chan struct{})}
	// Calls run on a context that outlives Stop's, so a StartVM in
	// flight finishes and hands its VM to its sandbox, as in CAA.
	go func() {
		defer close(s.served)
		s.serveErr = srv.Serve(context.Background(), dr.listener(l))
	}()
	return s, nil
}

func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking socket path %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket path %s exists and is not a socket; remove it or choose another -socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("another process serves %s; stop it or choose another -socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

// Left are the podVMs that live sandboxes still had when Stop ran: the
// adaptor leaves them running, as upstream CAA does.
func (s *Server) Left() []string { return s.left }

// SocketPath is the path the server listens on.
func (s *Server) SocketPath() string { return s.path }

// Service is the hypervisor service being served.
func (s *Server) Service() *Service { return s.svc }

// Done is closed when the serve loop has ended, by Stop or by an error.
func (s *Server) Done() <-chan struct{} { return s.served }

// Err is why the serve loop ended; valid once Done is closed.
func (s *Server) Err() error {
	<-s.served
	if errors.Is(s.serveErr, ttrpc.ErrServerClosed) {
		return nil
	}
	return s.serveErr
}

// Stop stops taking calls, waits for calls in flight (until ctx ends),
// leaves the VMs of live sandboxes running, as upstream CAA does, tears
// the provider down (which waits for a create still running) and removes
// the socket. Later calls return the first call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	var errs []error
	// Upstream's order (pkg/adaptor/server.go Start/Shutdown, v0.22.0):
	// the provider is torn down first, which lets a create in flight
	// finish, and the ttrpc server only then. ttrpc takes a connection
	// whose one unary call is running for idle and closes it, which
	// would cancel that create and delete the VM it made.
	s.left = s.svc.Shutdown(ctx)
	if s.teardown != nil {
		if err := s.teardown(); err != nil {
			errs = append(errs, fmt.Errorf("provider teardown: %w", err))
		}
	}
	// Every answer on the wire first: ttrpc's Shutdown may take a
	// connection with a call just answered for idle (drain.go).
	// A ctx that ends first leaves the rest to Shutdown and Close below,
	// as ttrpc's own Shutdown deadline does.
	_ = s.drain.settled(ctx)
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("stopping the ttrpc server: %w", err))
		}
	}
	// The serve loop closes (and unlinks) its listener as it returns,
	// possibly after Shutdown if it had not started yet; wait for it so
	// nothing touches the socket path after Stop.
	select {
	case <-s.served:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for the serve loop to end: %w", ctx.Err()))
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing socket %s: %w", s.path, err))
	}
	return errors.Join(errs...)
}
