package restart

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/restart/systemdtest"
)

// The systemd restarter against a real dbus-daemon with a stand-in for
// systemd on it (this machine's PID 1 is not systemd).

func TestSystemdRestart(t *testing.T) {
	addr := systemdtest.StartBus(t)
	started := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	f := systemdtest.NewSystemd(t, addr, "containerd.service", started, func() (time.Time, error) {
		time.Sleep(50 * time.Millisecond)
		return time.Now(), nil
	})
	s := Systemd{Unit: "containerd.service", BusAddress: addr, Timeout: 20 * time.Second}
	ctx := context.Background()
	got, err := s.StartedAt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(started) {
		t.Fatalf("StartedAt = %v, want %v", got, started)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if calls := strings.Join(f.Calls(), ","); calls != "containerd.service replace" {
		t.Fatalf("RestartUnit calls %q, want one (containerd.service, replace)", calls)
	}
	after, err := s.StartedAt(ctx)
	if err != nil || !after.After(started) {
		t.Fatalf("StartedAt after restart = %v (%v), want later than %v", after, err, started)
	}
}

func TestSystemdRestartFailure(t *testing.T) {
	addr := systemdtest.StartBus(t)
	systemdtest.NewSystemd(t, addr, "containerd.service", time.Now().Add(-time.Hour), func() (time.Time, error) {
		return time.Time{}, errors.New("exit status 1")
	})
	s := Systemd{Unit: "containerd.service", BusAddress: addr, Timeout: 20 * time.Second}
	if up, err := s.Active(context.Background()); err != nil || !up {
		t.Fatalf("Active before the restart = %v (%v), want true", up, err)
	}
	err := s.Restart(context.Background())
	if err == nil || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("Restart with a failing job: err = %v, want the failure", err)
	}
	// A failed unit keeps its ActiveEnterTimestamp; Active tells.
	if _, err := s.StartedAt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if up, err := s.Active(context.Background()); err != nil || up {
		t.Fatalf("Active after the failed restart = %v (%v), want false", up, err)
	}
}

func TestSystemdUnreachable(t *testing.T) {
	s := Systemd{Unit: "containerd.service", BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "none"), Timeout: 5 * time.Second}
	if _, err := s.StartedAt(context.Background()); err == nil || !strings.Contains(err.Error(), "connect to systemd") {
		t.Fatalf("err = %v, want a connect error", err)
	}
}
