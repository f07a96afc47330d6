package gpuinit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fake is a podVM root with sysfs/procfs/dev and fake tools whose scripts
// append their arguments to a log, so tests can assert what ran.
type fake struct {
	root, bin, log string
}

func newFake(t testing.TB) *fake {
	t.Helper()
	f := &fake{root: t.TempDir(), bin: t.TempDir()}
	f.log = filepath.Join(f.bin, "calls.log")
	return f
}

func (f *fake) pciDevice(t testing.TB, addr, vendor, class string) {
	t.Helper()
	d := filepath.Join(f.root, "sys/bus/pci/devices", addr)
	mustWrite(t, filepath.Join(d, "vendor"), vendor+"\n")
	mustWrite(t, filepath.Join(d, "class"), class+"\n")
}

func mustWrite(t testing.TB, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tool writes an executable shell script; ROOT and LOG are set for it.
func (f *fake) tool(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(f.bin, name)
	script := "#!/bin/sh\nROOT='" + f.root + "'\nLOG='" + f.log + "'\necho \"" + name + " $*\" >> \"$LOG\"\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fake) calls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(f.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

const (
	goodModprobe = `case "$1" in
nvidia) mkdir -p "$ROOT/proc/driver/nvidia"
  echo "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.216.03  Release Build  (dvs-builder@U16)" > "$ROOT/proc/driver/nvidia/version";;
esac`
	goodCTK = `case "$1" in
system) mkdir -p "$ROOT/dev"; : > "$ROOT/dev/nvidiactl"; : > "$ROOT/dev/nvidia-uvm";;
cdi) for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done
  # One line, as CDI's writer emits JSON (nvidia-ctk --format=json).
  cat > "$out" <<'SPEC'
{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},{"name":"GPU-5d0e2f1a-3b5c-4b1e-9f1a-000000000000","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},{"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}],"containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl"}]}}
SPEC
;;
esac`
	goodSMI = `i=0; for d in "$ROOT"/sys/bus/pci/devices/*; do
  if grep -q 0x10de "$d/vendor" && grep -q '^0x03' "$d/class"; then
    echo "GPU $i: Tesla T4 (UUID: GPU-5d0e2f1a-3b5c-4b1e-9f1a-00000000000$i)"; : > "$ROOT/dev/nvidia$i"; i=$((i+1))
  fi
done`
)

func (f *fake) config(t testing.TB, modprobe, ctk, smi string) Config {
	t.Helper()
	return Config{
		Root:         f.root,
		Timeout:      5 * time.Second,
		PollInterval: 10 * time.Millisecond,
		Modprobe:     f.tool(t, "modprobe", modprobe),
		NvidiaCTK:    f.tool(t, "nvidia-ctk", ctk),
		NvidiaSMI:    f.tool(t, "nvidia-smi", smi),
		CDIHookPath:  "/usr/bin/nvidia-cdi-hook",
	}
}

func cdiDirEntries(t *testing.T, f *fake) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(f.root, "var/run/cdi"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func runDirEntries(t *testing.T, f *fake) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(f.root, "var/run"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestRunReady(t *testing.T) {
	f := newFake(t)
	f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200") // T4: 3D controller
	f.pciDevice(t, "0000:00:05.0", "0x10de", "0x040300") // NVIDIA audio function: not a GPU
	f.pciDevice(t, "0000:00:03.0", "0x1af4", "0x020000") // virtio-net
	r, err := Run(context.Background(), f.config(t, goodModprobe, goodCTK, goodSMI))
	if err != nil {
		t.Fatalf("Run: %v (report %+v)", err, r)
	}
	if r.State != StateReady || r.GPUs != 1 || !slices.Equal(r.PCI, []string{"0000:00:04.0"}) {
		t.Fatalf("report = %+v, want ready with 1 GPU at 0000:00:04.0", r)
	}
	if r.Driver != "535.216.03" {
		t.Errorf("driver = %q, want 535.216.03 from /proc/driver/nvidia/version", r.Driver)
	}
	wantDev := []string{"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-5d0e2f1a-3b5c-4b1e-9f1a-000000000000", "nvidia.com/gpu=all"}
	if !slices.Equal(r.Devices, wantDev) {
		t.Errorf("devices = %v, want %v", r.Devices, wantDev)
	}
	if r.CDI != DefaultCDIOutput {
		t.Errorf("cdi = %q, want %q", r.CDI, DefaultCDIOutput)
	}
	spec, err := os.ReadFile(filepath.Join(f.root, DefaultCDIOutput))
	if err != nil || !bytes.Contains(spec, []byte(`"kind":"nvidia.com/gpu"`)) {
		t.Fatalf("CDI spec at %s: err %v, content %q", DefaultCDIOutput, err, spec)
	}
	if got := cdiDirEntries(t, f); !slices.Equal(got, []string{"nvidia.json"}) {
		t.Errorf("/var/run/cdi holds %v, want only nvidia.json (no temporary files)", got)
	}
	calls := f.calls(t)
	want := []string{"modprobe nvidia", "modprobe nvidia_uvm", "nvidia-ctk system create-device-nodes --control-devices", "nvidia-smi -L"}
	if len(calls) != 5 || !slices.Equal(calls[:4], want) {
		t.Fatalf("calls = %q, want %q then cdi generate", calls, want)
	}
	gen := calls[4]
	for _, w := range []string{"nvidia-ctk cdi generate", "--format=json", "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook", "--output=" + filepath.Join(f.root, "var/run") + "/.caa-gcp-t4-cdi-"} {
		if !strings.Contains(gen, w) {
			t.Errorf("cdi generate call %q lacks %q", gen, w)
		}
	}
	if strings.Contains(gen, "--output="+filepath.Join(f.root, "var/run/cdi")) {
		t.Errorf("cdi generate writes inside the CDI directory (%q): a CDI reader could see it half-written", gen)
	}
	if e := runDirEntries(t, f); !slices.Equal(e, []string{"cdi"}) {
		t.Errorf("/var/run holds %v after success, want only cdi (temporary directory removed)", e)
	}
}

func TestRunNoGPU(t *testing.T) {
	for name, setup := range map[string]func(*testing.T, *fake){
		"other devices only": func(t *testing.T, f *fake) {
			f.pciDevice(t, "0000:00:03.0", "0x1af4", "0x020000")
			f.pciDevice(t, "0000:00:05.0", "0x10de", "0x040300")
		},
		"no PCI bus in sysfs": func(*testing.T, *fake) {},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			setup(t, f)
			r, err := Run(context.Background(), f.config(t, goodModprobe, goodCTK, goodSMI))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.State != StateNoGPU || r.GPUs != 0 || !strings.Contains(r.Reason, "0x10de") {
				t.Fatalf("report = %+v, want no-gpu with a reason naming vendor 0x10de", r)
			}
			if c := f.calls(t); c != nil {
				t.Errorf("tools ran without a GPU: %q", c)
			}
			if e := cdiDirEntries(t, f); e != nil {
				t.Errorf("CDI directory written without a GPU: %v", e)
			}
		})
	}
}

func TestRunModuleLoadFailure(t *testing.T) {
	f := newFake(t)
	f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
	cfg := f.config(t, `[ "$1" = nvidia ] && { echo "modprobe: FATAL: Module nvidia-current not found in directory /lib/modules/6.1.0-37-cloud-amd64" >&2; exit 1; }`, goodCTK, goodSMI)
	r, err := Run(context.Background(), cfg)
	if err == nil {
		t.Fatalf("Run succeeded with a failing modprobe: %+v", r)
	}
	if r.State != StateFailed || r.Step != "modprobe" || r.GPUs != 1 {
		t.Fatalf("report = %+v, want failed at step modprobe with 1 GPU", r)
	}
	for _, w := range []string{"nvidia", "Module nvidia-current not found", "DKMS"} {
		if !strings.Contains(r.Reason, w) {
			t.Errorf("reason %q lacks %q", r.Reason, w)
		}
	}
	if c := f.calls(t); !slices.Equal(c, []string{"modprobe nvidia"}) {
		t.Errorf("calls = %q, want the sequence to stop after modprobe nvidia", c)
	}
	if e := cdiDirEntries(t, f); e != nil {
		t.Errorf("CDI directory written after a failure: %v", e)
	}
}

func TestRunDeviceNodeTimeout(t *testing.T) {
	f := newFake(t)
	f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
	// nvidia-smi lists the GPU but /dev/nvidia0 never appears.
	cfg := f.config(t, goodModprobe, goodCTK, `echo "GPU 0: Tesla T4 (UUID: GPU-x)"`)
	// Long enough that the fake tools before the wait finish inside it on
	// a loaded machine (make test boots a podVM beside the Go tests): at
	// 300 ms the bound once fired in an earlier step.
	cfg.Timeout = 3 * time.Second
	r, err := Run(context.Background(), cfg)
	if err == nil {
		t.Fatalf("Run succeeded without /dev/nvidia0: %+v", r)
	}
	if r.State != StateFailed || r.Step != "device-wait" {
		t.Fatalf("report = %+v, want failed at device-wait", r)
	}
	if !strings.Contains(r.Reason, "/dev/nvidia0") || strings.Contains(r.Reason, "/dev/nvidiactl") || !strings.Contains(r.Reason, "3s") {
		t.Errorf("reason %q should name only the missing /dev/nvidia0 and the 3s timeout", r.Reason)
	}
	if r.ElapsedMS < 3000 {
		t.Errorf("elapsed %d ms: gave up before the 3s timeout", r.ElapsedMS)
	}
	if e := cdiDirEntries(t, f); e != nil {
		t.Errorf("CDI directory written after a timeout: %v", e)
	}
}

func TestRunHungToolTimesOut(t *testing.T) {
	f := newFake(t)
	f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
	cfg := f.config(t, goodModprobe, `[ "$1" = system ] && exec sleep 30`, goodSMI)
	// As above: the steps before the hung one must fit inside it under load.
	cfg.Timeout = 3 * time.Second
	done := make(chan struct{})
	var r Report
	var err error
	go func() { r, err = Run(context.Background(), cfg); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its timeout: a hung tool blocks boot")
	}
	if err == nil || r.Step != "device-nodes" || !strings.Contains(r.Reason, "did not finish within the 3s timeout") {
		t.Fatalf("report = %+v, err %v; want failed at device-nodes naming the timeout", r, err)
	}
}

func TestRunCDIGenerationFailure(t *testing.T) {
	for name, ctk := range map[string]string{
		"nvidia-ctk fails": `case "$1" in system) mkdir -p "$ROOT/dev"; : > "$ROOT/dev/nvidiactl"; : > "$ROOT/dev/nvidia-uvm";;
cdi) for a in "$@"; do case "$a" in --output=*) echo partial > "${a#--output=}";; esac; done; echo "failed to initialize NVML: Driver/library version mismatch" >&2; exit 1;; esac`,
		"nvidia-ctk writes an empty spec": `case "$1" in system) mkdir -p "$ROOT/dev"; : > "$ROOT/dev/nvidiactl"; : > "$ROOT/dev/nvidia-uvm";; esac`,
		"spec without devices": `case "$1" in system) mkdir -p "$ROOT/dev"; : > "$ROOT/dev/nvidiactl"; : > "$ROOT/dev/nvidia-uvm";;
cdi) for a in "$@"; do case "$a" in --output=*) printf '{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[]}' > "${a#--output=}";; esac; done;; esac`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
			r, err := Run(context.Background(), f.config(t, goodModprobe, ctk, goodSMI))
			if err == nil {
				t.Fatalf("Run succeeded: %+v", r)
			}
			if r.State != StateFailed || r.Step != "cdi" || r.Driver != "535.216.03" {
				t.Fatalf("report = %+v, want failed at cdi with the driver version known", r)
			}
			if e := cdiDirEntries(t, f); len(e) != 0 {
				t.Errorf("/var/run/cdi holds %v after a failed generation, want nothing (no partial spec)", e)
			}
		})
	}
}

func TestRunGPUCountMismatch(t *testing.T) {
	f := newFake(t)
	f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
	f.pciDevice(t, "0000:00:05.0", "0x10de", "0x030200")
	r, err := Run(context.Background(), f.config(t, goodModprobe, goodCTK, `echo "GPU 0: Tesla T4 (UUID: GPU-x)"; echo "No devices were found for 0000:00:05.0" >&2`))
	if err == nil || r.Step != "nvidia-smi" || !strings.Contains(r.Reason, "lists 1 GPUs but the PCI bus has 2") {
		t.Fatalf("report = %+v, err %v; want a count mismatch at nvidia-smi", r, err)
	}
}

func TestConfigErrors(t *testing.T) {
	base := Config{Root: "/", Modprobe: "/sbin/modprobe", NvidiaCTK: "/usr/bin/nvidia-ctk"}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"empty root":      {func(c *Config) { c.Root = "" }, "Root"},
		"relative output": {func(c *Config) { c.CDIOutput = "var/run/cdi/nvidia.yaml" }, "absolute"},
		"wrong extension": {func(c *Config) { c.CDIOutput = "/var/run/cdi/nvidia.spec" }, ".yaml or .json"},
		"no modprobe":     {func(c *Config) { c.Modprobe = "" }, "Modprobe"},
		"no nvidia-ctk":   {func(c *Config) { c.NvidiaCTK = "" }, "NvidiaCTK"},
	} {
		t.Run(name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			r, err := Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tc.want) || r.State != StateFailed || r.Step != "config" {
				t.Fatalf("Run = %+v, %v; want a config failure naming %q", r, err, tc.want)
			}
		})
	}
}

func TestElapsedUsesInjectedClock(t *testing.T) {
	f := newFake(t)
	cfg := f.config(t, goodModprobe, goodCTK, goodSMI)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := 0
	cfg.now = func() time.Time { calls++; return t0.Add(time.Duration(calls-1) * 1500 * time.Millisecond) }
	r, _ := Run(context.Background(), cfg)
	if r.ElapsedMS != 1500 {
		t.Fatalf("elapsed_ms = %d, want 1500 from the injected clock", r.ElapsedMS)
	}
}

func TestLineRoundTrip(t *testing.T) {
	in := Report{State: StateNoGPU, Reason: "no NVIDIA display controller", ElapsedMS: 3}
	line := in.Line()
	if !strings.HasPrefix(line, "CAA-GCP-T4-GPU {\"state\":\"no-gpu\",\"gpus\":0,") || strings.Contains(line, "\n") {
		t.Fatalf("line = %q", line)
	}
	out, err := ParseLine("[   12.3] noise " + line + "\r")
	if err != nil || out.State != in.State || out.Reason != in.Reason {
		t.Fatalf("ParseLine = %+v, %v", out, err)
	}
	if _, err := ParseLine("CAA-GCP-T4-GPU {broken"); err == nil {
		t.Fatal("ParseLine accepted broken JSON")
	}
}

// TestCDIDevicesRefusesWhatAConsumerCouldNotUse: each spec is one a CDI
// consumer would reject or that would leave CAA's nvidia.com/gpu=all
// unresolved; the error names what is wrong.
func TestCDIDevicesRefusesWhatAConsumerCouldNotUse(t *testing.T) {
	dev := `{"name":"all","containerEdits":{}}`
	for name, tc := range map[string]struct{ spec, want string }{
		"YAML, not JSON":     {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n", "decode JSON CDI spec"},
		"unknown top key":    {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","device":[` + dev + `]}`, `unknown field "device"`},
		"unknown device key": {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"nam":"all"}]}`, `unknown field "nam"`},
		"two documents":      {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[` + dev + `]}{}`, "data after the JSON CDI spec"},
		"truncated":          {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[` + dev, "decode JSON CDI spec"},
		"no kind":            {`{"cdiVersion":"0.5.0","devices":[` + dev + `]}`, "no kind"},
		"kind without class": {`{"cdiVersion":"0.5.0","kind":"nvidia.com","devices":[` + dev + `]}`, "not vendor/class"},
		"bad version":        {`{"cdiVersion":"five","kind":"nvidia.com/gpu","devices":[` + dev + `]}`, "cdiVersion"},
		"bad device name":    {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"-0"},` + dev + `]}`, `name "-0"`},
		"duplicate device":   {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[` + dev + `,` + dev + `]}`, "listed twice"},
		"no all device":      {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0"}]}`, "nvidia.com/gpu=all, which CAA requests"},
		"empty device list":  {`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[]}`, "lists no devices"},
		"whitespace only":    {" \n", "empty spec"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := cdiDevices([]byte(tc.spec))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("cdiDevices = %v, %v; want an error containing %q", got, err, tc.want)
			}
		})
	}
}

// TestRunWritesJSONUnderAYAMLName: a .yaml target still gets the JSON that
// was decoded (JSON is YAML; CDI consumers read both suffixes).
func TestRunWritesJSONUnderAYAMLName(t *testing.T) {
	f := newFake(t)
	f.pciDevice(t, "0000:00:04.0", "0x10de", "0x030200")
	cfg := f.config(t, goodModprobe, goodCTK, goodSMI)
	cfg.CDIOutput = "/var/run/cdi/nvidia.yaml"
	if r, err := Run(context.Background(), cfg); err != nil || r.CDI != cfg.CDIOutput {
		t.Fatalf("Run = %+v, %v", r, err)
	}
	spec, err := os.ReadFile(filepath.Join(f.root, cfg.CDIOutput))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cdiDevices(spec); err != nil {
		t.Fatalf("the file written is not the decoded JSON spec: %v", err)
	}
	if got := cdiDirEntries(t, f); !slices.Equal(got, []string{"nvidia.yaml"}) {
		t.Errorf("/var/run/cdi holds %v, want only nvidia.yaml", got)
	}
}
