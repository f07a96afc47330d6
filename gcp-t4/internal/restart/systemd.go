package restart

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// Systemd restarts a unit through PID 1's private D-Bus socket
// (/run/systemd/private, mounted from the host): no hostPID, no privileged
// container, and never a signal to containerd (SIGHUP kills it).
type Systemd struct {
	Unit    string        // containerd.service
	Timeout time.Duration // bound on every call and on the restart job
	// BusAddress reaches systemd through a message bus (with Hello)
	// instead of its private socket; tests point it at their own bus.
	BusAddress string
}

func (s Systemd) conn(ctx context.Context) (*sd.Conn, error) {
	var c *sd.Conn
	var err error
	if s.BusAddress == "" {
		c, err = sd.NewSystemdConnectionContext(ctx)
	} else {
		c, err = sd.NewConnection(func() (*godbus.Conn, error) {
			conn, err := godbus.Dial(s.BusAddress, godbus.WithContext(ctx))
			if err != nil {
				return nil, err
			}
			if err := conn.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
				conn.Close()
				return nil, err
			}
			if err := conn.Hello(); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		})
	}
	if err != nil {
		where := "/run/systemd/private (mount it from the host as a Socket hostPath; the pod must run as uid 0)"
		if s.BusAddress != "" {
			where = s.BusAddress
		}
		return nil, fmt.Errorf("connect to systemd on %s: %w", where, err)
	}
	return c, nil
}

func (s Systemd) timeout() time.Duration {
	if s.Timeout <= 0 {
		return 2 * time.Minute
	}
	return s.Timeout
}

func activeEnter(ctx context.Context, c *sd.Conn, unit string) (time.Time, error) {
	p, err := c.GetUnitPropertyContext(ctx, unit, "ActiveEnterTimestamp")
	if err != nil {
		return time.Time{}, fmt.Errorf("read ActiveEnterTimestamp of %s: %w", unit, err)
	}
	us, ok := p.Value.Value().(uint64)
	if !ok {
		return time.Time{}, fmt.Errorf("ActiveEnterTimestamp of %s: unexpected type %T", unit, p.Value.Value())
	}
	return time.UnixMicro(int64(us)), nil
}

func activeState(ctx context.Context, c *sd.Conn, unit string) (string, error) {
	p, err := c.GetUnitPropertyContext(ctx, unit, "ActiveState")
	if err != nil {
		return "", fmt.Errorf("read ActiveState of %s: %w", unit, err)
	}
	st, _ := p.Value.Value().(string)
	return st, nil
}

// StartedAt reads the unit's ActiveEnterTimestamp.
func (s Systemd) StartedAt(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer c.Close()
	return activeEnter(ctx, c, s.Unit)
}

// ExecPath is the executable of the unit's first ExecStart command: the
// containerd binary the node runs (a host path).
func (s Systemd) ExecPath(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	p, err := c.GetServicePropertyContext(ctx, s.Unit, "ExecStart")
	if err != nil {
		return "", fmt.Errorf("read ExecStart of %s: %w", s.Unit, err)
	}
	// a(sasbttttuii): path, argv, ignore-failure, timestamps, pid, status.
	cmds, ok := p.Value.Value().([][]any)
	if !ok || len(cmds) == 0 || len(cmds[0]) == 0 {
		return "", fmt.Errorf("ExecStart of %s: unexpected value %v", s.Unit, p.Value)
	}
	path, ok := cmds[0][0].(string)
	if !ok || path == "" {
		return "", fmt.Errorf("ExecStart of %s: no executable in %v", s.Unit, p.Value)
	}
	return path, nil
}

// Restart queues RestartUnit(unit, "replace") and waits until the job ends
// and the unit is active with a newer ActiveEnterTimestamp. JobRemoved can
// be missed (systemd sends it on the private socket only to subscribers,
// and a reply may be lost while systemd re-executes), so the unit's state
// is also polled.
func (s Systemd) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.Subscribe() // best effort; polling covers a missing signal
	before, err := activeEnter(ctx, c, s.Unit)
	if err != nil {
		return err
	}
	done := make(chan string, 1)
	if _, err := c.RestartUnitContext(ctx, s.Unit, "replace", done); err != nil {
		return fmt.Errorf("restart %s: %w", s.Unit, err)
	}
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case res := <-done:
			if res != "done" {
				return fmt.Errorf("restart job of %s ended %q; see journalctl -u %s on the node", s.Unit, res, s.Unit)
			}
			st, err := activeState(ctx, c, s.Unit)
			if err != nil {
				return err
			}
			if st != "active" {
				return fmt.Errorf("%s is %q after its restart job finished", s.Unit, st)
			}
			return nil
		case <-poll.C:
			st, err1 := activeState(ctx, c, s.Unit)
			at, err2 := activeEnter(ctx, c, s.Unit)
			if err1 == nil && err2 == nil && st == "active" && at.After(before) {
				return nil
			}
			if err1 == nil && st == "failed" {
				return fmt.Errorf("%s failed while restarting; see journalctl -u %s on the node", s.Unit, s.Unit)
			}
		case <-ctx.Done():
			return fmt.Errorf("restart of %s did not finish: %w", s.Unit, ctx.Err())
		}
	}
}

// Active reports whether the unit is active now (ActiveState "active" or
// "reloading"). ActiveEnterTimestamp alone cannot say it: a unit that
// failed keeps the time it last entered the active state.
func (s Systemd) Active(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	st, err := activeState(ctx, c, s.Unit)
	if err != nil {
		return false, err
	}
	return st == "active" || st == "reloading", nil
}
