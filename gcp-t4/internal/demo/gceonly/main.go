// Command gceonly serves the embedded GCE emulator seeded as the demo's
// project (demo.SeedProject), with no podVM, no adaptor and no API server
// of its own, until SIGTERM or Ctrl-C. It is test/node's GCE for the kata
// stage (docs/node-harness.md): a real cloud-api-adaptor on the harness's
// node creates its podVMs here. It prints one line, "GCE emulator: URL
// (project P)", once the endpoint answers.
//
// With -test-control ADDR (a loopback address only) it also serves, on a
// listener of its own, the test-only control endpoint (control.go) through
// which the harness makes GCE's own events happen to an instance (a Spot
// preemption, host maintenance, a host error: gcefake's Interrupt), and
// prints "GCE emulator test control: URL". Nothing shipped runs gceonly:
// it is a test main under internal/demo.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

func main() {
	fs := flag.NewFlagSet("gceonly", flag.ContinueOnError)
	control := fs.String("test-control", "", "also serve the test-only control endpoint (GCE's own events on an instance) on this loopback address, e.g. 127.0.0.1:0")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gceonly [-test-control 127.0.0.1:0] (serves until SIGTERM)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() > 0 {
		if err == nil {
			fs.Usage()
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fake := gcefake.New()
	defer fake.Close()
	if err := demo.SeedProject(fake); err != nil {
		fmt.Fprintf(os.Stderr, "gceonly: %v\n", err)
		os.Exit(1)
	}
	if *control != "" {
		l, err := listenLoopback(*control)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gceonly: -test-control: %v\n", err)
			os.Exit(2)
		}
		srv := &http.Server{Handler: controlHandler(fake)}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
		fmt.Printf("GCE emulator test control: http://%s\n", l.Addr())
	}
	fmt.Printf("GCE emulator: %s (project %s)\n", fake.URL(), fake.Project())
	<-ctx.Done()
}

// listenLoopback listens on addr, which must be a loopback IP and a port:
// the control endpoint has no authentication, so nothing but this machine
// may reach it.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%q: the test control endpoint listens on a loopback IP only (127.0.0.1:0)", addr)
	}
	return net.Listen("tcp", addr)
}
