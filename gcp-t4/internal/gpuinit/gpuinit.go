// Package gpuinit brings a podVM's NVIDIA GPUs up at boot, before the kata
// agent starts: it finds the GPUs on the PCI bus, loads the kernel modules,
// waits for the device nodes, writes the CDI spec the agent waits for, and
// reports the outcome as one machine-readable line on the serial console,
// because a podVM has no other channel an operator can read without network.
//
// Every path is resolved under Config.Root and every tool is a configurable
// path, so the whole sequence runs in tests against a fake sysfs/procfs tree
// and fake tools.
package gpuinit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// LinePrefix starts the readiness line so that a serial-console reader can
// find it among kernel and systemd output.
const LinePrefix = "CAA-GCP-T4-GPU "

// The states a report can carry.
const (
	StateReady  = "ready"
	StateNoGPU  = "no-gpu"
	StateFailed = "failed"
)

const nvidiaVendor = "0x10de"

// Config is what Run needs; zero values of optional fields take defaults.
type Config struct {
	// Root is the filesystem root that sys/, proc/, dev/ and CDIOutput are
	// resolved under: "/" on a podVM, a temporary tree in tests.
	Root string
	// CDIOutput is the CDI spec path inside Root. kata-agent reads specs
	// from /var/run/cdi.
	CDIOutput string
	// Timeout bounds the whole sequence. kata-agent gives up on CDI specs
	// after 100 s, so the default leaves it a wide margin.
	Timeout time.Duration
	// PollInterval is how often device nodes are checked while waiting.
	PollInterval time.Duration
	// Modules are loaded in order with Modprobe.
	Modules []string
	// Tool paths. NvidiaSMI may be empty to skip the GPU listing check.
	Modprobe  string
	NvidiaCTK string
	NvidiaSMI string
	// CDIHookPath is the nvidia-cdi-hook the generated spec points at.
	CDIHookPath string
	Logger      *slog.Logger
	// now is injectable so that reported durations are testable.
	now func() time.Time
}

// Defaults for a podVM built from podvm/.
const (
	DefaultCDIOutput    = "/var/run/cdi/nvidia.json"
	DefaultTimeout      = 60 * time.Second
	DefaultPollInterval = 100 * time.Millisecond
)

// DefaultModules are the modules containers need: the core driver and UVM
// (CUDA's unified memory). Debian names the files nvidia-current*; the
// image's modprobe.d aliases map these names to them.
var DefaultModules = []string{"nvidia", "nvidia_uvm"}

// Report is the readiness line's JSON body.
type Report struct {
	State     string   `json:"state"`
	GPUs      int      `json:"gpus"`
	PCI       []string `json:"pci,omitempty"`
	Driver    string   `json:"driver,omitempty"`
	CDI       string   `json:"cdi,omitempty"`
	Devices   []string `json:"devices,omitempty"`
	Step      string   `json:"step,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	ElapsedMS int64    `json:"elapsed_ms"`
}

// Line renders the report as the one line printed to the console.
func (r Report) Line() string {
	b, err := json.Marshal(r)
	if err != nil {
		// Report holds only strings and ints; Marshal cannot fail.
		panic(err)
	}
	return LinePrefix + string(b)
}

// ParseLine reads a readiness line back (tests, the boot test harness).
func ParseLine(line string) (Report, error) {
	i := strings.Index(line, LinePrefix)
	if i < 0 {
		return Report{}, fmt.Errorf("no %q prefix in line", strings.TrimSpace(LinePrefix))
	}
	var r Report
	if err := json.Unmarshal([]byte(strings.TrimSpace(line[i+len(LinePrefix):])), &r); err != nil {
		return Report{}, fmt.Errorf("parse readiness line JSON: %w", err)
	}
	return r, nil
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Root == "" {
		return out, errors.New("gpuinit: Root is empty: set it to / on a podVM")
	}
	if out.CDIOutput == "" {
		out.CDIOutput = DefaultCDIOutput
	}
	if !filepath.IsAbs(out.CDIOutput) {
		return out, fmt.Errorf("gpuinit: CDIOutput %q must be an absolute path inside Root, e.g. %s", out.CDIOutput, DefaultCDIOutput)
	}
	if ext := filepath.Ext(out.CDIOutput); ext != ".yaml" && ext != ".json" {
		return out, fmt.Errorf("gpuinit: CDIOutput %q must end in .yaml or .json: CDI consumers read only those", out.CDIOutput)
	}
	if out.Timeout <= 0 {
		out.Timeout = DefaultTimeout
	}
	if out.PollInterval <= 0 {
		out.PollInterval = DefaultPollInterval
	}
	if len(out.Modules) == 0 {
		out.Modules = DefaultModules
	}
	if out.Modprobe == "" {
		return out, errors.New("gpuinit: Modprobe path is empty: pass the modprobe binary, e.g. /usr/sbin/modprobe")
	}
	if out.NvidiaCTK == "" {
		return out, errors.New("gpuinit: NvidiaCTK path is empty: pass the nvidia-ctk binary, e.g. /usr/bin/nvidia-ctk")
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.now == nil {
		out.now = time.Now
	}
	return out, nil
}

// Run performs the sequence and returns its report; it never returns
// without one. The report's State is StateFailed when err is not nil.
// The caller prints the report (Print) so that exactly one line is emitted.
func Run(ctx context.Context, cfg Config) (Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return Report{State: StateFailed, Step: "config", Reason: err.Error()}, err
	}
	start := c.now()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	r, err := c.run(ctx)
	r.ElapsedMS = c.now().Sub(start).Milliseconds()
	return r, err
}

type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func fail(r Report, step string, err error) (Report, error) {
	r.State = StateFailed
	r.Step = step
	r.Reason = err.Error()
	return r, &stepError{step: step, err: err}
}

func (c Config) run(ctx context.Context) (Report, error) {
	var r Report
	pci, err := c.nvidiaPCIDevices()
	if err != nil {
		return fail(r, "pci-scan", err)
	}
	if len(pci) == 0 {
		r.State = StateNoGPU
		r.Reason = "no NVIDIA display controller (PCI vendor " + nvidiaVendor + ", class 0x03xx) under /sys/bus/pci/devices; modules not loaded, no CDI spec written"
		return r, nil
	}
	r.GPUs = len(pci)
	r.PCI = pci
	c.Logger.InfoContext(ctx, "NVIDIA GPUs found", "pci", pci)

	for _, m := range c.Modules {
		if _, err := c.tool(ctx, c.Modprobe, m); err != nil {
			return fail(r, "modprobe", fmt.Errorf("load kernel module %s: %w (is the DKMS module built for this kernel? check /lib/modules/$(uname -r)/updates/dkms)", m, err))
		}
	}
	r.Driver = c.driverVersion()

	// The driver creates no /dev nodes itself: nvidia-ctk makes the control
	// nodes, and nvidia-smi (through nvidia-modprobe) the per-GPU ones.
	if _, err := c.tool(ctx, c.NvidiaCTK, "system", "create-device-nodes", "--control-devices"); err != nil {
		return fail(r, "device-nodes", fmt.Errorf("create control device nodes: %w", err))
	}
	if c.NvidiaSMI != "" {
		out, err := c.tool(ctx, c.NvidiaSMI, "-L")
		if err != nil {
			return fail(r, "nvidia-smi", fmt.Errorf("list GPUs: %w", err))
		}
		if n := countSMIGPUs(out); n != len(pci) {
			return fail(r, "nvidia-smi", fmt.Errorf("nvidia-smi -L lists %d GPUs but the PCI bus has %d NVIDIA display controllers (%s)", n, len(pci), strings.Join(pci, ",")))
		}
	}
	nodes := []string{"/dev/nvidiactl", "/dev/nvidia-uvm"}
	for i := range pci {
		nodes = append(nodes, fmt.Sprintf("/dev/nvidia%d", i))
	}
	if err := c.waitForNodes(ctx, nodes); err != nil {
		return fail(r, "device-wait", err)
	}

	devices, err := c.writeCDI(ctx)
	if err != nil {
		return fail(r, "cdi", err)
	}
	r.State = StateReady
	r.CDI = c.CDIOutput
	r.Devices = devices
	return r, nil
}

func (c Config) path(p string) string { return filepath.Join(c.Root, p) }

// nvidiaPCIDevices lists NVIDIA display/3D controllers. The vendor alone
// is not enough: consumer boards carry an NVIDIA audio function too.
func (c Config) nvidiaPCIDevices() ([]string, error) {
	dir := c.path("/sys/bus/pci/devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		vendor, err := readTrim(filepath.Join(dir, e.Name(), "vendor"))
		if err != nil || !strings.EqualFold(vendor, nvidiaVendor) {
			continue
		}
		class, err := readTrim(filepath.Join(dir, e.Name(), "class"))
		if err != nil {
			return nil, fmt.Errorf("NVIDIA PCI device %s has no readable class: %w", e.Name(), err)
		}
		if strings.HasPrefix(strings.ToLower(class), "0x03") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func readTrim(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

var driverVersionRE = regexp.MustCompile(`\b(\d+\.\d+(?:\.\d+)?)\b`)

// driverVersion reads the loaded driver's version from procfs, or sysfs
// (Debian's module is nvidia-current, hence two names); "" if unknown.
func (c Config) driverVersion() string {
	if s, err := readTrim(c.path("/proc/driver/nvidia/version")); err == nil {
		first, _, _ := strings.Cut(s, "\n")
		if _, after, ok := strings.Cut(first, "Kernel Module"); ok {
			if m := driverVersionRE.FindString(after); m != "" {
				return m
			}
		}
	}
	for _, name := range []string{"nvidia", "nvidia_current"} {
		if s, err := readTrim(c.path("/sys/module/" + name + "/version")); err == nil && s != "" {
			return s
		}
	}
	return ""
}

func countSMIGPUs(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "GPU ") {
			n++
		}
	}
	return n
}

func (c Config) waitForNodes(ctx context.Context, nodes []string) error {
	t := time.NewTicker(c.PollInterval)
	defer t.Stop()
	for {
		var missing []string
		for _, n := range nodes {
			if _, err := os.Stat(c.path(n)); err != nil {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("device nodes %s did not appear within the %s timeout (driver loaded but GPU not initialised? see dmesg for NVRM errors)", strings.Join(missing, ", "), c.Timeout)
		case <-t.C:
		}
	}
}

// writeCDI generates the spec in a private temporary directory next to the
// CDI directory (same filesystem), decodes and checks it, and renames it
// into place, so a CDI consumer scanning the directory never sees a
// half-written, stray or unusable spec. A temporary file inside the CDI
// directory would not do: nvidia-ctk appends a format suffix to an --output
// name without one, which makes any temporary name a spec the agent reads.
//
// nvidia-ctk is always asked for JSON, whatever the target's extension: CDI
// consumers read .json and .yaml specs (the CDI specification; kata-agent's
// cdi crate takes both suffixes), JSON is YAML too, and so the standard
// library decodes exactly the bytes that land in the CDI directory.
func (c Config) writeCDI(ctx context.Context) ([]string, error) {
	target := c.path(c.CDIOutput)
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create CDI directory %s: %w", dir, err)
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(dir), ".caa-gcp-t4-cdi-")
	if err != nil {
		return nil, fmt.Errorf("create temporary directory next to %s: %w", dir, err)
	}
	defer os.RemoveAll(tmpDir)
	tmpName := filepath.Join(tmpDir, "spec.json")

	args := []string{"cdi", "generate", "--output=" + tmpName, "--format=json"}
	if c.CDIHookPath != "" {
		args = append(args, "--nvidia-cdi-hook-path="+c.CDIHookPath)
	}
	if _, err := c.tool(ctx, c.NvidiaCTK, args...); err != nil {
		return nil, fmt.Errorf("generate CDI spec: %w", err)
	}
	spec, err := os.ReadFile(tmpName)
	if err != nil {
		return nil, fmt.Errorf("read generated CDI spec (nvidia-ctk wrote no %s): %w", filepath.Base(tmpName), err)
	}
	devices, err := cdiDevices(spec)
	if err != nil {
		return nil, fmt.Errorf("generated CDI spec is unusable: %w", err)
	}
	f, err := os.OpenFile(tmpName, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen CDI spec for sync: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return nil, fmt.Errorf("chmod CDI spec: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("sync CDI spec: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close CDI spec: %w", err)
	}
	if err := os.Rename(tmpName, target); err != nil {
		return nil, fmt.Errorf("move CDI spec into place at %s (is the CDI directory a separate mount?): %w", target, err)
	}
	return devices, nil
}

// cdiSpec is the part of a CDI spec (tags.cncf.io/container-device-interface
// specs-go, config.go: Spec and Device) that the readiness check reads. The
// top level and each device are decoded strictly, so a misspelt or foreign
// key is an error rather than a silently missing device; the edits are left
// to the consumer, which applies them.
type cdiSpec struct {
	Version        string            `json:"cdiVersion"`
	Kind           string            `json:"kind"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Devices        []cdiDevice       `json:"devices"`
	ContainerEdits json.RawMessage   `json:"containerEdits,omitempty"`
}

type cdiDevice struct {
	Name           string            `json:"name"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	ContainerEdits json.RawMessage   `json:"containerEdits"`
}

// The name rules of the CDI specification (SPEC.md "Kind" and "Devices";
// pkg/parser in the CDI Go module): kind is vendor/class, vendor a domain-like
// name, class and device names start alphanumeric.
var (
	cdiVendorRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	cdiClassRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	cdiDeviceRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$`)
	cdiVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
)

// CAA v0.22.0 asks for this device on every GPU pod (pkg/adaptor/proxy
// service.go adds the annotation cdi.k8s.io/peer-pods: nvidia.com/gpu=all).
const caaRequestedDevice = "nvidia.com/gpu=all"

// cdiDevices decodes a JSON CDI spec and returns its fully-qualified device
// names (nvidia.com/gpu=0, …=all), checking what CAA's request and the CDI
// name rules need.
func cdiDevices(spec []byte) ([]string, error) {
	if len(bytes.TrimSpace(spec)) == 0 {
		return nil, errors.New("empty spec")
	}
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.DisallowUnknownFields()
	var s cdiSpec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode JSON CDI spec (nvidia-ctk --format=json): %w", err)
	}
	if dec.More() {
		return nil, errors.New("data after the JSON CDI spec")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON CDI spec")
	}
	if !cdiVersionRE.MatchString(s.Version) {
		return nil, fmt.Errorf("cdiVersion %q is not a version like 0.5.0", s.Version)
	}
	vendor, class, ok := strings.Cut(s.Kind, "/")
	if s.Kind == "" {
		return nil, errors.New("no kind")
	}
	if !ok || !cdiVendorRE.MatchString(vendor) || !cdiClassRE.MatchString(class) {
		return nil, fmt.Errorf("kind %q is not vendor/class", s.Kind)
	}
	if len(s.Devices) == 0 {
		return nil, fmt.Errorf("kind %s lists no devices", s.Kind)
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(s.Devices))
	for i, d := range s.Devices {
		if !cdiDeviceRE.MatchString(d.Name) {
			return nil, fmt.Errorf("devices[%d]: name %q is not a CDI device name", i, d.Name)
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("devices[%d]: device %q listed twice", i, d.Name)
		}
		seen[d.Name] = true
		out = append(out, s.Kind+"="+d.Name)
	}
	if !slices.Contains(out, caaRequestedDevice) {
		return nil, fmt.Errorf("no device %s, which CAA requests for every GPU pod (devices: %s)", caaRequestedDevice, strings.Join(out, ", "))
	}
	return out, nil
}

// tool runs one external program under the sequence's deadline and returns
// its stdout; a failure carries the program's stderr.
func (c Config) tool(ctx context.Context, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	c.Logger.DebugContext(ctx, "ran tool", "path", path, "args", args, "err", err)
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s %s did not finish within the %s timeout", filepath.Base(path), strings.Join(args, " "), c.Timeout)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		if msg == "" {
			return "", fmt.Errorf("%s %s: %w", filepath.Base(path), strings.Join(args, " "), err)
		}
		return "", fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// Print writes the readiness line to w and, if set, the console. It is one
// write per destination so the line is not interleaved with other output.
func Print(r Report, w io.Writer, console io.Writer) error {
	line := r.Line() + "\n"
	var errs []error
	if w != nil {
		if _, err := io.WriteString(w, line); err != nil {
			errs = append(errs, fmt.Errorf("write readiness line: %w", err))
		}
	}
	if console != nil {
		if _, err := io.WriteString(console, line); err != nil {
			errs = append(errs, fmt.Errorf("write readiness line to console: %w", err))
		}
	}
	return errors.Join(errs...)
}
