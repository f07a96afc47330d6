package gpuinit

import (
	"os"
	"reflect"
	"testing"
)

// TestDevicesOfARealSpec parses the spec nvidia-ctk v1.19.1 generated
// through `gpu-init` on a real GPU machine (NVIDIA H200, open kernel
// module 580.159.04; only the cdi-hook path was normalized). The device
// list is what the readiness line reports and what kata's CDI lookup of
// nvidia.com/gpu=all needs.
func TestDevicesOfARealSpec(t *testing.T) {
	spec, err := os.ReadFile("testdata/h200-580.159.04-nvidia.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := cdiDevices(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-2625665b-9554-1498-9048-fc03bb70641a", "nvidia.com/gpu=all"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("devices = %v, want %v", got, want)
	}
}
