package gpuinit

import (
	"os"
	"reflect"
	"testing"
)

// TestDevicesOfARealSpec decodes a real spec in the JSON form gpu-init asks
// nvidia-ctk for. The YAML beside it is what nvidia-ctk v1.19.1 generated
// through an earlier `gpu-init` on a real GPU machine (NVIDIA H200, open
// kernel module 580.159.04; only the cdi-hook path was normalized); the
// JSON is that spec written out again by nvidia-ctk's own CDI writer, one
// line, as `nvidia-ctk cdi generate --format=json` writes it:
//
//	nvidia-ctk cdi transform root --from /none --to /none \
//	  --input h200-580.159.04-nvidia.yaml --output h200-580.159.04-nvidia.json
//
// The device list is what the readiness line reports and what kata's CDI
// lookup of nvidia.com/gpu=all needs.
func TestDevicesOfARealSpec(t *testing.T) {
	spec, err := os.ReadFile("testdata/h200-580.159.04-nvidia.json")
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
