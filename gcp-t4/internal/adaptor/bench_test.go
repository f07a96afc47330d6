package adaptor

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
)

// lifecycle runs CreateVM, StartVM and StopVM for b.N sandboxes.
func lifecycle(b *testing.B, shim *shimclient.Client) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sid := fmt.Sprintf("%016x%048x", i, 0)
		if _, err := shim.CreateVM(ctx, sid, "", gpuPod("bench")); err != nil {
			b.Fatal(err)
		}
		if err := shim.StartVM(ctx, sid, 0); err != nil {
			b.Fatal(err)
		}
		if err := shim.StopVM(ctx, sid); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// BenchmarkSandboxLifecycleProtocol is the adaptor's and ttrpc's own cost
// per pod: three calls, each on a fresh connection as kata makes them, to a
// provider that does nothing.
func BenchmarkSandboxLifecycleProtocol(b *testing.B) {
	sock := filepath.Join(shortDir(b), "h.sock")
	srv, err := Listen(sock, NewService(&recordingProvider{}, shortDir(b), "v", quietLogger()))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop(context.Background())
	lifecycle(b, shimclient.New(sock, 0))
}

// BenchmarkSandboxLifecycleOnFake is one pod end to end on the GCE fake
// without its operation latency or the provider's write pacing.
func BenchmarkSandboxLifecycleOnFake(b *testing.B) {
	e := startAdaptor(b, "-mutations-per-second", "0")
	lifecycle(b, e.shim)
	if n := len(e.fake.Instances()); n != 0 {
		b.Fatalf("%d VMs left", n)
	}
}
