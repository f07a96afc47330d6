package gpuinit

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRunNoGPU is the cost a CPU-only podVM pays at boot: one sysfs scan.
func BenchmarkRunNoGPU(b *testing.B) {
	cfg := Config{Root: b.TempDir(), Modprobe: "/bin/false", NvidiaCTK: "/bin/false"}
	for b.Loop() {
		if r, err := Run(context.Background(), cfg); err != nil || r.State != StateNoGPU {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

// BenchmarkRunReadyFakeTools is the sequence's own overhead around the tools
// (five fake tool runs, the device wait and the atomic CDI write).
func BenchmarkRunReadyFakeTools(b *testing.B) {
	f := newFake(b)
	f.pciDevice(b, "0000:00:04.0", "0x10de", "0x030200")
	cfg := f.config(b, goodModprobe, goodCTK, goodSMI)
	cfg.PollInterval = time.Millisecond
	for b.Loop() {
		if r, err := Run(context.Background(), cfg); err != nil || r.State != StateReady {
			b.Fatalf("%+v %v", r, err)
		}
	}
}
