// Package systemdtest runs a real dbus-daemon with a stand-in for systemd's
// Manager and Unit objects on it, for tests of the D-Bus restarter on
// machines whose PID 1 is not systemd. Test-only: nothing else imports it.
package systemdtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// StartBus starts a private dbus-daemon and returns its address.
func StartBus(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skip("dbus-daemon not installed; `make containerd` installs it as root")
		}
		t.Fatal("dbus-daemon not installed: run `make containerd` (apt-get install dbus-daemon)")
	}
	dir, err := os.MkdirTemp("", "bus")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "bus")
	conf := filepath.Join(dir, "bus.conf")
	err = os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config-file", conf, "--nofork", "--nopidfile")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The socket file appears at bind, before the daemon listens: wait
	// until a connection is accepted.
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return "unix:path=" + sock
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("dbus-daemon did not listen: %s", out.String())
	return ""
}

// Systemd answers RestartUnit like systemd does: a job path in the reply,
// then the JobRemoved signal, and the unit's ActiveState and
// ActiveEnterTimestamp properties.
type Systemd struct {
	conn  *godbus.Conn
	props *prop.Properties

	mu     sync.Mutex
	calls  []string
	jobID  uint32
	action func() (time.Time, error) // restarts; returns the new start time
}

type manager struct{ s *Systemd }

func (m manager) RestartUnit(name, mode string) (godbus.ObjectPath, *godbus.Error) {
	s := m.s
	s.mu.Lock()
	s.calls = append(s.calls, name+" "+mode)
	s.jobID++
	id, action := s.jobID, s.action
	s.mu.Unlock()
	job := godbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	go func() {
		result := "done"
		started, err := action()
		if err == nil {
			s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveEnterTimestamp", uint64(started.UnixMicro()))
			s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "active")
		} else {
			result = "failed"
			s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "failed")
		}
		s.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", id, job, name, result)
	}()
	return job, nil
}

func (m manager) Subscribe() *godbus.Error { return nil }

// execStart is one entry of a Service's ExecStart property, signature
// (sasbttttuii) as systemd's D-Bus API documents it
// (org.freedesktop.systemd1(5), Service ExecStart).
type execStart struct {
	Path               string
	Argv               []string
	IgnoreFailure      bool
	StartRT, StartMono uint64
	ExitRT, ExitMono   uint64
	PID                uint32
	Code, Status       int32
}

// NewSystemd owns org.freedesktop.systemd1 on the bus at addr for one unit
// that started at started; action runs on every RestartUnit. The unit's
// ExecStart runs /usr/bin/containerd.
func NewSystemd(t testing.TB, addr, unit string, started time.Time, action func() (time.Time, error)) *Systemd {
	t.Helper()
	conn, err := godbus.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Hello(); err != nil {
		t.Fatal(err)
	}
	s := &Systemd{conn: conn, action: action}
	if err := conn.Export(manager{s}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	s.props, err = prop.Export(conn, godbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sd.PathBusEscape(unit)), prop.Map{
		"org.freedesktop.systemd1.Unit": {
			"ActiveState":          {Value: "active", Emit: prop.EmitFalse},
			"ActiveEnterTimestamp": {Value: uint64(started.UnixMicro()), Emit: prop.EmitFalse},
		},
		"org.freedesktop.systemd1.Service": {
			"ExecStart": {Value: []execStart{{Path: "/usr/bin/containerd", Argv: []string{"/usr/bin/containerd"}}}, Emit: prop.EmitFalse},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName("org.freedesktop.systemd1", godbus.NameFlagDoNotQueue); err != nil || reply != godbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.systemd1: %v %v", reply, err)
	}
	return s
}

// Calls lists the RestartUnit calls as "unit mode".
func (s *Systemd) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}
