package shimclient

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/caa-gcp-t4/gcp-t4/internal/hypervisor"
)

func TestAnnotationsAreKatas(t *testing.T) {
	got := Sandbox{Name: "p", Namespace: "ns", VCPUs: 3, MemoryMiB: 12288}.Annotations()
	want := map[string]string{
		"io.kubernetes.cri.sandbox-name":                        "p",
		"io.kubernetes.cri.sandbox-namespace":                   "ns",
		"io.katacontainers.config.hypervisor.machine_type":      "",
		"io.katacontainers.config.hypervisor.image":             "",
		"io.katacontainers.config.hypervisor.default_vcpus":     "3",
		"io.katacontainers.config.hypervisor.default_memory":    "12288",
		"io.katacontainers.config.hypervisor.cc_init_data":      "",
		"io.katacontainers.config.hypervisor.default_gpus":      "0",
		"io.katacontainers.config.hypervisor.default_gpu_model": "",
	}
	if len(got) != len(want) {
		t.Errorf("%d annotations, want kata's %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %q (present %v), want %q", k, g, ok, v)
		}
	}
}

// fakeService records deadlines and answers CreateVM with socket.
type fakeService struct {
	mu        sync.Mutex
	socket    string
	deadlines map[string]time.Duration
}

func (f *fakeService) note(ctx context.Context, method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		f.deadlines[method] = time.Until(d)
	}
}

func (f *fakeService) CreateVM(ctx context.Context, _ *hypervisor.CreateVMRequest) (*hypervisor.CreateVMResponse, error) {
	f.note(ctx, "CreateVM")
	return &hypervisor.CreateVMResponse{AgentSocketPath: f.socket}, nil
}

func (f *fakeService) StartVM(ctx context.Context, _ *hypervisor.StartVMRequest) (*hypervisor.StartVMResponse, error) {
	f.note(ctx, "StartVM")
	return &hypervisor.StartVMResponse{}, nil
}

func (f *fakeService) StopVM(ctx context.Context, _ *hypervisor.StopVMRequest) (*hypervisor.StopVMResponse, error) {
	f.note(ctx, "StopVM")
	return &hypervisor.StopVMResponse{}, nil
}

func (f *fakeService) Version(context.Context, *hypervisor.VersionRequest) (*hypervisor.VersionResponse, error) {
	return &hypervisor.VersionResponse{Version: "x"}, nil
}

func serve(t *testing.T, svc hypervisor.HypervisorService) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "shim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	hypervisor.RegisterHypervisorService(srv, svc)
	go srv.Serve(context.Background(), l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestEmptyAgentSocketIsAnError(t *testing.T) {
	sock := serve(t, &fakeService{deadlines: map[string]time.Duration{}})
	_, err := New(sock, 0).CreateVM(context.Background(), "sb", "", Sandbox{Name: "p", Namespace: "ns"})
	if err == nil || !strings.Contains(err.Error(), "no agent socket path") {
		t.Fatalf("want kata's refusal of an empty agent socket path, got %v", err)
	}
}

// TestTimeoutsAreKatas checks the deadlines the service sees: StartVM is
// never given less than remote_hypervisor_timeout, StopVM gets exactly
// that. Only lower bounds are checked, far from the values, so a slow
// machine cannot fail it.
func TestTimeoutsAreKatas(t *testing.T) {
	svc := &fakeService{socket: "/run/peerpod/pods/sb/agent.ttrpc", deadlines: map[string]time.Duration{}}
	c := New(serve(t, svc), 0)
	ctx := context.Background()
	if _, err := c.CreateVM(ctx, "sb", "", Sandbox{Name: "p", Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	if err := c.StartVM(ctx, "sb", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.StopVM(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, m := range []string{"CreateVM", "StartVM", "StopVM"} {
		if d := svc.deadlines[m]; d < DefaultTimeout-time.Minute {
			t.Errorf("%s deadline %s away, want about %s (remote_hypervisor_timeout)", m, d, DefaultTimeout)
		}
	}
}

func TestNoAdaptorNamesTheSocket(t *testing.T) {
	err := New("/nonexistent/hypervisor.sock", 0).StopVM(context.Background(), "sb")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/hypervisor.sock") {
		t.Errorf("want an error naming the socket, got %v", err)
	}
}
