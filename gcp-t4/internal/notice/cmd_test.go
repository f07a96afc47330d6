package notice

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"google.golang.org/protobuf/proto"
)

// The binary as systemd runs it: the socket arrives as fd 3 with
// LISTEN_FDS and LISTEN_PID (sd_listen_fds(3)); a notice on the emulator's
// guest metadata reaches a client of that socket and the console line is
// printed on standard output.
func TestBinaryServesTheSocketSystemdPasses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "podvm-notice")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/podvm-notice")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fake := gcefake.New()
	defer fake.Close()
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String("gpu"), MachineType: proto.String("n1-standard-4"),
		Scheduling: &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)}})
	md := httptest.NewServer(fake.GuestMetadata(zone, "gpu"))
	defer md.Close()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // the child holds the duplicate

	// LISTEN_PID must be the child's own pid: the shell sets it to $$ and
	// execs, keeping the pid.
	cmd := exec.CommandContext(ctx, "sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" --metadata "$1"`, bin, md.URL)
	cmd.ExtraFiles = []*os.File{lf}
	cmd.Env = append(os.Environ(), "LISTEN_FDS=", "LISTEN_PID=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()

	got := make(chan Notice, 1)
	go func() { got <- readNotice(t, ctx, "http://"+addr+Path+"?wait=true") }()
	if err := fake.Notice(zone, "gpu", gcefake.HostMaintenance); err != nil {
		t.Fatal(err)
	}
	if n := <-got; !n.Drain || n.Event != Maintenance || n.Source != "maintenance-event=TERMINATE_ON_HOST_MAINTENANCE" {
		t.Fatalf("through the passed socket: %+v (stderr: %s)", n, stderr.String())
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no console line: %v (stderr: %s)", err, stderr.String())
	}
	if !strings.HasPrefix(line, "caa-gcp-t4: notice: maintenance (maintenance-event=TERMINATE_ON_HOST_MAINTENANCE): GCE stops this VM in about ") {
		t.Fatalf("console line %q", line)
	}
}

// Without a socket from systemd and without --listen it says what to do;
// flags it does not know and stray arguments are usage errors.
func TestMainRefusals(t *testing.T) {
	t.Setenv("LISTEN_FDS", "")
	t.Setenv("LISTEN_PID", "")
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 1, "start it through caa-gcp-t4-notice.socket, or give --listen 127.0.0.1:8007"},
		{[]string{"--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-h"}, 0, "usage: podvm-notice"},
	} {
		var out, errb bytes.Buffer
		// -h is the usage, on stdout.
		if code := Main(context.Background(), tc.args, &out, &errb, log); code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
