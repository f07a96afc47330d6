package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	godbus "github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// ContainerdUnit is the unit the systemd stand-in serves: containerd's, as
// on a GKE node.
const ContainerdUnit = "containerd.service"

// systemdStandIn answers what the remediation sidecar asks of systemd over
// D-Bus (gcp-t4/internal/restart/systemd.go): RestartUnit of containerd's
// unit, its ActiveState, ActiveEnterTimestamp and ExecStart. This machine's
// PID 1 is not systemd, so a private dbus-daemon carries it, and the
// restart is the harness's own restart of this node's containerd.
type systemdStandIn struct {
	n     *Node
	addr  string
	conn  *godbus.Conn
	props *prop.Properties

	mu    sync.Mutex
	calls []string
	jobID uint32
}

// execStart is one entry of a Service's ExecStart property,
// (sasbttttuii) as org.freedesktop.systemd1(5) documents it.
type execStart struct {
	Path               string
	Argv               []string
	IgnoreFailure      bool
	StartRT, StartMono uint64
	ExitRT, ExitMono   uint64
	PID                uint32
	Code, Status       int32
}

type systemdManager struct{ s *systemdStandIn }

// RestartUnit queues the restart as systemd does: the job's path at once,
// JobRemoved when it ends.
func (m systemdManager) RestartUnit(name, mode string) (godbus.ObjectPath, *godbus.Error) {
	s := m.s
	s.mu.Lock()
	s.calls = append(s.calls, time.Now().Format("15:04:05.000")+" RestartUnit "+name+" "+mode)
	s.jobID++
	id := s.jobID
	s.mu.Unlock()
	job := godbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	if name != ContainerdUnit {
		return "", godbus.MakeFailedError(fmt.Errorf("unit %s not loaded (the stand-in serves %s)", name, ContainerdUnit))
	}
	go func() {
		result := "done"
		s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "activating")
		if err := s.n.RestartContainerd(context.Background(), nil); err != nil {
			result = "failed"
			s.n.logger.Error("systemd stand-in: restart of containerd failed", "err", err)
		}
		s.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", id, job, name, result)
	}()
	return job, nil
}

func (systemdManager) Subscribe() *godbus.Error { return nil }

// unitPath is the object path of a unit, its name escaped as systemd
// escapes bus paths (each byte outside [A-Za-z0-9] as _xx).
func unitPath(unit string) godbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(unit); i++ {
		c := unit[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return godbus.ObjectPath("/org/freedesktop/systemd1/unit/" + b.String())
}

// ServeSystemd starts a private dbus-daemon (a process of the node, ended
// by Stop) with a stand-in for systemd's Manager and containerd's unit on
// it, and returns the bus's address for the sidecar's --systemd-bus.
func (n *Node) ServeSystemd(ctx context.Context) (string, error) {
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return "", errors.New("node: dbus-daemon is not installed (apt-get install dbus-daemon): the systemd stand-in needs a bus")
	}
	sock := n.path("dbus/bus")
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	conf := n.path("dbus/bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`), 0o600); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	d, err := n.start("dbus-daemon", os.Environ(), bin, "--config-file", conf, "--nofork", "--nopidfile")
	if err != nil {
		return "", err
	}
	if err := waitFor(ctx, 30*time.Second, "dbus-daemon's socket", func() (bool, error) {
		if err := d.exited(); err != nil {
			return false, err
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	}); err != nil {
		return "", err
	}
	addr := "unix:path=" + sock
	conn, err := godbus.Dial(addr)
	if err != nil {
		return "", fmt.Errorf("node: systemd stand-in: %w", err)
	}
	if err := conn.Auth(nil); err != nil {
		conn.Close()
		return "", fmt.Errorf("node: systemd stand-in: %w", err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return "", fmt.Errorf("node: systemd stand-in: %w", err)
	}
	s := &systemdStandIn{n: n, addr: addr, conn: conn}
	if err := conn.Export(systemdManager{s}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		conn.Close()
		return "", fmt.Errorf("node: systemd stand-in: %w", err)
	}
	n.mu.Lock()
	started := n.containerdStarted
	n.mu.Unlock()
	s.props, err = prop.Export(conn, unitPath(ContainerdUnit), prop.Map{
		"org.freedesktop.systemd1.Unit": {
			"ActiveState":          {Value: "active", Emit: prop.EmitFalse},
			"ActiveEnterTimestamp": {Value: uint64(started.UnixMicro()), Emit: prop.EmitFalse},
		},
		"org.freedesktop.systemd1.Service": {
			"ExecStart": {Value: []execStart{{Path: n.bin.Containerd, Argv: []string{n.bin.Containerd, "--config", n.ContainerdConfig()}}}, Emit: prop.EmitFalse},
		},
	})
	if err != nil {
		conn.Close()
		return "", fmt.Errorf("node: systemd stand-in: %w", err)
	}
	if reply, err := conn.RequestName("org.freedesktop.systemd1", godbus.NameFlagDoNotQueue); err != nil || reply != godbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return "", fmt.Errorf("node: systemd stand-in: own org.freedesktop.systemd1: %v %v", reply, err)
	}
	n.mu.Lock()
	n.systemd = s
	n.mu.Unlock()
	return addr, nil
}

// SystemdCalls lists the RestartUnit calls the stand-in answered, with
// their times.
func (n *Node) SystemdCalls() []string {
	n.mu.Lock()
	s := n.systemd
	n.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// RestartContainerd stops containerd (SIGTERM; its shims and their
// containers go on, as under systemd's KillMode=process), writes config
// to its configuration file when given (GKE's bootstrap rewriting it),
// and starts it again, as `systemctl restart containerd` would; the
// systemd stand-in's unit reflects it. kubelet reconnects by itself.
func (n *Node) RestartContainerd(ctx context.Context, config []byte) error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return errors.New("node: stopped")
	}
	var old *proc
	for _, p := range n.procs {
		if p.name == "containerd" {
			old = p
		}
	}
	s := n.systemd
	n.mu.Unlock()
	if old != nil {
		old.stop(20 * time.Second)
	}
	if config != nil {
		if err := os.WriteFile(n.ContainerdConfig(), config, 0o600); err != nil {
			return fmt.Errorf("node: containerd config: %w", err)
		}
	}
	err := n.runContainerd(ctx, 3*time.Minute)
	if s != nil {
		if err != nil {
			s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "failed")
		} else {
			n.mu.Lock()
			started := n.containerdStarted
			n.mu.Unlock()
			s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveEnterTimestamp", uint64(started.UnixMicro()))
			s.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "active")
		}
	}
	return err
}
