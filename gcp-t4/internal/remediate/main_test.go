//go:build linux

package remediate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/restart/systemdtest"
)

// TestMainOnceOverDBus runs `gcp-t4-node remediate --once` as an installer
// would (Main, with the suite's release table), against a real containerd, with the restart going through the
// systemd D-Bus restarter to a stand-in systemd that restarts that
// containerd.
func TestMainOnceOverDBus(t *testing.T) {
	for _, rel := range suite() {
		t.Run(rel.Version, func(t *testing.T) {
			n := newNode(t, rel)
			// The host's containerd, where the unit's ExecStart says it is.
			if err := os.MkdirAll(filepath.Join(n.host, "usr", "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(ctrBinary(t, rel), filepath.Join(n.host, "usr", "bin", "containerd")); err != nil {
				t.Fatal(err)
			}
			n.gkeWrite("gke-v2.toml")
			n.start()
			addr := systemdtest.StartBus(t)
			started, _ := n.StartedAt(context.Background())
			sd := systemdtest.NewSystemd(t, addr, "containerd.service", started, func() (time.Time, error) {
				if err := n.Restart(context.Background()); err != nil {
					return time.Time{}, err
				}
				return n.StartedAt(context.Background())
			})
			var out, errb bytes.Buffer
			args := []string{"--once", "--config", n.target.Config, "--host-root", n.host, "--kata-dir", n.kataDir, "--lock", n.dir + "/lock",
				"--cri-socket", n.socket, "--systemd-bus", addr, "--settle", "0s", "--quiet", "0s", "--listen", ""}
			if code := mainWith(context.Background(), args, &out, &errb, suiteTable()); code != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), "restarted containerd: true") {
				t.Fatalf("stdout %q, want a converged run with a restart", out.String())
			}
			if calls := sd.Calls(); len(calls) != 1 || calls[0] != "containerd.service replace" {
				t.Fatalf("RestartUnit calls %v, want one", calls)
			}
			assertLoaded(t, n, DefaultHandler())
			if !strings.Contains(errb.String(), `"msg":"restarting containerd to load the handler"`) {
				t.Errorf("no JSON log line about the restart:\n%s", errb.String())
			}
			// Converged: a second run neither writes nor restarts.
			out.Reset()
			if code := mainWith(context.Background(), args, &out, &errb, suiteTable()); code != 0 || !strings.Contains(out.String(), "wrote 0 file(s), restarted containerd: false") {
				t.Fatalf("second run: exit %d, %q", code, out.String())
			}
			if len(sd.Calls()) != 1 {
				t.Fatal("second run restarted containerd")
			}
		})
	}
}
