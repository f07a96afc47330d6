package gpuinit

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, &stdout, &stderr, slog.New(slog.DiscardHandler))
	return code, stdout.String(), stderr.String()
}

func TestMainPrintsOneLineToStdoutAndConsole(t *testing.T) {
	for name, tc := range map[string]struct {
		gpu      bool
		modprobe string
		code     int
		state    string
	}{
		"ready":  {true, goodModprobe, 0, StateReady},
		"no-gpu": {false, goodModprobe, 0, StateNoGPU},
		"failed": {true, `echo "FATAL: Module nvidia not found" >&2; exit 1`, 1, StateFailed},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			if tc.gpu {
				f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
			}
			console := filepath.Join(t.TempDir(), "console")
			if err := os.WriteFile(console, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runMain(t,
				"--root", f.root, "--timeout", "5s", "--poll-interval", "10ms",
				"--modprobe", f.tool(t, "modprobe", tc.modprobe),
				"--nvidia-ctk", f.tool(t, "nvidia-ctk", goodCTK),
				"--nvidia-smi", f.tool(t, "nvidia-smi", goodSMI),
				"--console", console)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("stdout has %d lines, want exactly one readiness line: %q", len(lines), stdout)
			}
			r, err := ParseLine(lines[0])
			if err != nil || r.State != tc.state || (tc.state != StateReady && r.Reason == "") {
				t.Fatalf("line %q → %+v, %v; want state %s with a reason unless ready", lines[0], r, err, tc.state)
			}
			con, _ := os.ReadFile(console)
			if string(con) != stdout {
				t.Errorf("console got %q, want the same line as stdout %q", con, stdout)
			}
		})
	}
}

func TestMainBadFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":  {"--gpu", "1"},
		"positional":    {"extra"},
		"empty modules": {"--modules", " , "},
		"bad timeout":   {"--timeout", "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			if code, _, stderr := runMain(t, args...); code != 2 || stderr == "" {
				t.Fatalf("exit %d, stderr %q; want 2 with a message", code, stderr)
			}
		})
	}
}

func TestMainBadConfigStillPrintsLine(t *testing.T) {
	code, stdout, _ := runMain(t, "--root", t.TempDir(), "--cdi-output", "relative.yaml", "--console", "")
	r, err := ParseLine(stdout)
	if code != 1 || err != nil || r.State != StateFailed || !strings.Contains(r.Reason, "absolute") {
		t.Fatalf("exit %d, line %q (%+v, %v); want 1 and a failed line naming the bad --cdi-output", code, stdout, r, err)
	}
}
