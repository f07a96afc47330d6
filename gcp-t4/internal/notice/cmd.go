package notice

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
)

// ListenAddr is where the podVM's unit opens the socket, inside the pod's
// network namespace: next to api-server-rest's 127.0.0.1:8006.
const ListenAddr = "127.0.0.1:8007"

// Main is podvm-notice: flags, the socket (systemd's, or --listen), the
// watcher and the server, until ctx ends. It returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("podvm-notice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	metadata := fs.String("metadata", "http://169.254.169.254", "the VM's metadata server")
	listen := fs.String("listen", "", "address to listen on instead of the socket systemd passes (tests, a manual run)")
	console := fs.String("console", "-", "where to print a line when a notice arrives: a file, - for standard output (the unit sends it to the console), \"\" for none")
	maxWait := fs.Duration("max-wait", 5*time.Minute, "longest a ?wait=true request hangs")
	about := "Runs in the podVM: follows GCE's preemption and host maintenance notices on the VM's metadata\n" +
		"server and serves them to the pod's containers at http://" + ListenAddr + Path + "\n" +
		"(systemd opens that socket in the pod's network namespace). docs/podvm-build-guide.md"
	if code, ok := stdflags.Parse(fs, args, about, stdout, stderr); !ok {
		return code
	}
	l, err := listener(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "podvm-notice: %v\n", err)
		return 1
	}
	st := NewState(time.Now)
	const hang = 5 * time.Minute
	w := &Watcher{
		// The server answers a hanging GET within timeout_sec; a connection
		// that outlives it by far is dead, and a watcher stuck on it would
		// miss the notice, so the client gives up and the watcher retries.
		Base: *metadata, Client: &http.Client{Timeout: hang + 30*time.Second}, State: st, Log: log,
		Hang: hang, Retry: time.Second,
		OnChange: func(n Notice) {
			log.Info("notice", "event", n.Event, "source", n.Source, "remainingSeconds", n.RemainingSeconds)
			if err := consoleLine(*console, stdout, n); err != nil {
				log.Warn("the console line was not written", "console", *console, "error", err)
			}
		},
	}
	srv := &http.Server{Handler: Handler(st, *maxWait), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { w.Run(wctx); close(watched) }()
	select {
	case <-ctx.Done():
	case err = <-done:
	}
	cancel()
	<-watched
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = srv.Shutdown(sctx)
	scancel()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "podvm-notice: serving: %v\n", err)
		return 1
	}
	return 0
}

// listener is --listen's, or the one socket systemd passed (sd_listen_fds:
// LISTEN_PID is this process, LISTEN_FDS counts from fd 3).
func listener(addr string) (net.Listener, error) {
	if addr != "" {
		return net.Listen("tcp", addr)
	}
	pid, _ := strconv.Atoi(os.Getenv("LISTEN_PID"))
	n, _ := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if pid != os.Getpid() || n < 1 {
		return nil, errors.New("no socket from systemd (LISTEN_FDS) and no --listen: start it through caa-gcp-t4-notice.socket, or give --listen 127.0.0.1:8007")
	}
	f := os.NewFile(3, "caa-gcp-t4-notice.socket")
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("the socket systemd passed: %w", err)
	}
	return l, nil
}

// consoleLine puts the notice on the serial console, with the podVM's
// other lines, where an operator reads them (gcloud compute instances
// get-serial-port-output). The provider reads that console only while a
// podVM boots, so this line is for people; the pod's containers read the
// endpoint.
func consoleLine(path string, stdout io.Writer, n Notice) error {
	var f io.Writer = stdout
	switch path {
	case "":
		return nil
	case "-":
	default:
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer file.Close()
		f = file
	}
	var err error
	if n.Drain {
		_, err = fmt.Fprintf(f, "caa-gcp-t4: notice: %s (%s): GCE stops this VM in about %d s; containers read it at http://%s%s\n", n.Event, n.Source, n.RemainingSeconds, ListenAddr, Path)
	} else {
		_, err = fmt.Fprintf(f, "caa-gcp-t4: notice: %s\n", n.Event)
	}
	return err
}
