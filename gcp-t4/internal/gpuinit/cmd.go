package gpuinit

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
)

// Main is the `gpu-init` subcommand. Exit status: 0 when the GPUs are
// ready or there is no GPU (CPU-only podVMs boot the same image), 1 when a
// GPU is present but could not be brought up, 2 for bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("gpu-init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := Config{Logger: logger}
	var modules, console string
	fs.StringVar(&cfg.Root, "root", "/", "filesystem root holding sys/, proc/, dev/ and the CDI output")
	fs.StringVar(&cfg.CDIOutput, "cdi-output", DefaultCDIOutput, "CDI spec path inside --root (.json or .yaml; the content is JSON either way)")
	fs.DurationVar(&cfg.Timeout, "timeout", DefaultTimeout, "bound on the whole sequence; keep it under kata-agent's 100s CDI wait")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", DefaultPollInterval, "how often to look for device nodes")
	fs.StringVar(&modules, "modules", strings.Join(DefaultModules, ","), "kernel modules to load, comma-separated")
	fs.StringVar(&cfg.Modprobe, "modprobe", "/usr/sbin/modprobe", "modprobe binary")
	fs.StringVar(&cfg.NvidiaCTK, "nvidia-ctk", "/usr/bin/nvidia-ctk", "nvidia-ctk binary")
	fs.StringVar(&cfg.NvidiaSMI, "nvidia-smi", "/usr/bin/nvidia-smi", "nvidia-smi binary; empty skips the GPU count check")
	fs.StringVar(&cfg.CDIHookPath, "nvidia-cdi-hook", "/usr/bin/nvidia-cdi-hook", "nvidia-cdi-hook path written into the spec; empty lets nvidia-ctk choose")
	fs.StringVar(&console, "console", "/dev/console", "also write the readiness line here (the serial console on a podVM); empty disables")
	const about = "Runs in the podVM before the agent: loads the NVIDIA driver's modules, waits for the GPUs' device\n" +
		"nodes, writes the CDI spec kata-agent reads and prints the readiness line, on the serial console too.\n" +
		"Exits 0 when the GPUs are ready or there is none (CPU-only podVMs boot the same image), 1 when a GPU\n" +
		"is present but could not be brought up. docs/podvm-build-guide.md"
	if code, ok := stdflags.Parse(fs, args, about, stdout, stderr); !ok {
		return code
	}
	for _, m := range strings.Split(modules, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Modules = append(cfg.Modules, m)
		}
	}
	if len(cfg.Modules) == 0 {
		fmt.Fprintln(stderr, "gpu-init: --modules is empty: name at least nvidia")
		return 2
	}

	r, runErr := Run(ctx, cfg)
	var con io.Writer
	if console != "" {
		f, err := os.OpenFile(console, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			logger.WarnContext(ctx, "console not writable; readiness line goes to stdout only", "console", console, "err", err)
		} else {
			defer f.Close()
			con = f
		}
	}
	if err := Print(r, stdout, con); err != nil {
		fmt.Fprintf(stderr, "gpu-init: %v\n", err)
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "gpu-init: %v\n", runErr)
		return 1
	}
	return 0
}
