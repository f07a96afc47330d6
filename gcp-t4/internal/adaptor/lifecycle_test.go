package adaptor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caa-gcp-t4/gcp-t4/internal/hypervisor"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

const (
	sid0 = "5f1c0a6e9b2d4c7fa1e3b5d7c9f0e2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1d3e5"
	sid1 = "a9e7c5b3d1f0e2c4a6b8d0f1e3c5a7b9d1f3e5c7a9b1d3f5e7c9a1b3d5f7e9c1"
)

// testClusterID stands for the kube-system namespace UID gcp-t4 install
// puts in GCP_CLUSTER_ID.
const testClusterID = "3f1c9d2e-6b7a-4e21-9c55-0a1b2c3d4e5f"

var t4Pod = shimclient.Sandbox{Namespace: "llm", VCPUs: 3, MemoryMiB: 12288, GPUs: 1}

func gpuPod(name string) shimclient.Sandbox {
	p := t4Pod
	p.Name = name
	return p
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// shortDir keeps socket paths under the 108-byte sun_path limit, which
// t.TempDir's test-named paths can exceed.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "adaptor")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type testEnv struct {
	fake    *gcefake.Server
	srv     *Server
	shim    *shimclient.Client
	podsDir string
}

// startAdaptor runs `gcp-t4 adaptor` as a user would, with the provider
// pointed at a GCE fake, and a shim client on its socket. The adaptor is
// stopped at the end of the test unless the test stopped it.
func startAdaptor(t testing.TB, extra ...string) *testEnv {
	t.Helper()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	return startAdaptorOn(t, fake, quietLogger(), extra...)
}

// startAdaptorOn is startAdaptor on a given fake, logging to logger.
func startAdaptorOn(t testing.TB, fake *gcefake.Server, logger *slog.Logger, extra ...string) *testEnv {
	t.Helper()
	dir := shortDir(t)
	sock := filepath.Join(dir, "hypervisor.sock")
	pods := filepath.Join(dir, "pods")
	args := append([]string{
		"-socket", sock,
		"-pods-dir", pods,
		"-gcp-endpoint", fake.URL(),
		"-gcp-project-id", fake.Project(),
		"-zone", "us-central1-a",
		"-image-name", "podvm-t4",
		"-network", "global/networks/default",
		"-subnetwork", "default",
		"-cluster-id", testClusterID,
	}, extra...)
	var stderr bytes.Buffer
	srv, err := Start(args, "v-test", &stderr, logger)
	if err != nil {
		t.Fatalf("Start: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return &testEnv{fake: fake, srv: srv, shim: shimclient.New(sock, 0), podsDir: pods}
}

func (e *testEnv) create(t *testing.T, sid string, sb shimclient.Sandbox) string {
	t.Helper()
	sock, err := e.shim.CreateVM(context.Background(), sid, "/var/run/netns/cni-"+sid[:8], sb)
	if err != nil {
		t.Fatalf("CreateVM %s: %v", sid[:8], err)
	}
	return sock
}

func (e *testEnv) start(t *testing.T, sid string) {
	t.Helper()
	if err := e.shim.StartVM(context.Background(), sid, 0); err != nil {
		t.Fatalf("StartVM %s: %v", sid[:8], err)
	}
}

// vmOf finds the podVM of a sandbox by the full ID in its metadata.
func vmOf(fake *gcefake.Server, sid string) *computepb.Instance {
	for _, vm := range fake.Instances() {
		for _, it := range vm.GetMetadata().GetItems() {
			if it.GetKey() == gcpt4.SandboxMetadata && it.GetValue() == sid {
				return vm
			}
		}
	}
	return nil
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s error, got none", code)
	}
	if got := status.Code(err); got != code {
		t.Errorf("code %s, want %s: %v", got, code, err)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Errorf("error %q does not mention %q", err, contains)
	}
}

func TestTwoGPUSandboxesEndToEnd(t *testing.T) {
	e := startAdaptor(t)
	ctx := context.Background()
	if v, err := e.shim.Version(ctx); err != nil || v != "v-test" {
		t.Fatalf("Version: %q, %v", v, err)
	}
	for i, sid := range []string{sid0, sid1} {
		sock := e.create(t, sid, gpuPod([]string{"mistral-tp-0", "mistral-tp-1"}[i]))
		if want := filepath.Join(e.podsDir, sid, AgentSocketName); sock != want {
			t.Errorf("agent socket %q, want %q", sock, want)
		}
		if fi, err := os.Stat(filepath.Dir(sock)); err != nil || !fi.IsDir() {
			t.Errorf("sandbox directory for the agent socket missing: %v", err)
		}
	}
	if n := len(e.fake.Instances()); n != 0 {
		t.Fatalf("CreateVM must boot nothing; %d VMs exist", n)
	}
	e.start(t, sid0)
	e.start(t, sid1)

	for i, sid := range []string{sid0, sid1} {
		pod := []string{"mistral-tp-0", "mistral-tp-1"}[i]
		vm := vmOf(e.fake, sid)
		if vm == nil {
			t.Fatalf("no VM for sandbox %s", sid[:8])
		}
		if want := "podvm-" + pod + "-" + sid[:8]; vm.GetName() != want {
			t.Errorf("VM name %q, want %q (from the sandbox-name annotation and the sandbox ID)", vm.GetName(), want)
		}
		acc := vm.GetGuestAccelerators()
		if len(acc) != 1 || acc[0].GetAcceleratorCount() != 1 || !strings.HasSuffix(acc[0].GetAcceleratorType(), "/nvidia-tesla-t4") {
			t.Errorf("%s: accelerators %v, want 1 x nvidia-tesla-t4", pod, acc)
		}
		if !strings.HasSuffix(vm.GetMachineType(), "/n1-standard-4") {
			t.Errorf("%s: machine type %s, want n1-standard-4 for 1 GPU, 3 vCPUs, 12 GiB", pod, vm.GetMachineType())
		}
		if vm.GetLabels()[gcpt4.PodLabel] != pod {
			t.Errorf("%s: pod label %q", pod, vm.GetLabels()[gcpt4.PodLabel])
		}
		// The cloud-config carries the pod's identity to the podVM.
		for _, it := range vm.GetMetadata().GetItems() {
			if it.GetKey() != gcpt4.UserDataMetadata {
				continue
			}
			ud, _ := base64.StdEncoding.DecodeString(it.GetValue())
			if !strings.Contains(string(ud), apfConfigPath) || !strings.Contains(string(ud), `pod-namespace`) || !strings.Contains(string(ud), pod) {
				t.Errorf("%s: user data lacks %s with the pod's name and namespace:\n%s", pod, apfConfigPath, ud)
			}
		}
	}
	// A repeated StartVM must not make a second VM.
	e.start(t, sid0)
	if n := e.fake.CountCalls("instances.insert"); n != 2 {
		t.Errorf("%d inserts, want 2", n)
	}

	for _, sid := range []string{sid0, sid1} {
		if err := e.shim.StopVM(ctx, sid); err != nil {
			t.Fatalf("StopVM %s: %v", sid[:8], err)
		}
		if _, err := os.Stat(filepath.Join(e.podsDir, sid)); !os.IsNotExist(err) {
			t.Errorf("sandbox directory of %s left behind: %v", sid[:8], err)
		}
	}
	if left := e.fake.Instances(); len(left) != 0 {
		t.Errorf("%d VMs left after StopVM", len(left))
	}
	if ids := e.srv.Service().Sandboxes(); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
}

func TestCPUOnlySandboxGetsNoGPU(t *testing.T) {
	e := startAdaptor(t)
	e.create(t, sid0, shimclient.Sandbox{Name: "web", Namespace: "default", VCPUs: 2, MemoryMiB: 2048})
	e.start(t, sid0)
	vm := vmOf(e.fake, sid0)
	if vm == nil || len(vm.GetGuestAccelerators()) != 0 {
		t.Fatalf(`default_gpus "0" must give a VM without accelerators, got %v`, vm)
	}
}

func TestStopVMOfUnknownSandbox(t *testing.T) {
	e := startAdaptor(t)
	wantCode(t, e.shim.StopVM(context.Background(), "0000000000000000"), codes.NotFound, "does not exist")
	wantCode(t, e.shim.StartVM(context.Background(), "0000000000000000", 0), codes.NotFound, "CreateVM it first")
	if n := e.fake.CountCalls("instances.delete") + e.fake.CountCalls("instances.insert"); n != 0 {
		t.Errorf("%d GCE mutations for an unknown sandbox", n)
	}
}

func TestDuplicateCreateVM(t *testing.T) {
	e := startAdaptor(t)
	ctx := context.Background()
	e.create(t, sid0, gpuPod("mistral-tp-0"))
	_, err := e.shim.CreateVM(ctx, sid0, "", gpuPod("impostor"))
	wantCode(t, err, codes.AlreadyExists, "already exists")
	// The first registration stands: its pod name names the VM.
	e.start(t, sid0)
	if vm := vmOf(e.fake, sid0); vm == nil || !strings.Contains(vm.GetName(), "mistral-tp-0") {
		t.Fatalf("want the first CreateVM's VM, got %v", vm)
	}
	if n := len(e.fake.Instances()); n != 1 {
		t.Errorf("%d VMs, want 1", n)
	}
	// Once stopped, the ID can be created again.
	if err := e.shim.StopVM(ctx, sid0); err != nil {
		t.Fatal(err)
	}
	e.create(t, sid0, gpuPod("mistral-tp-0"))
}

// TestShutdownLeavesLiveSandboxesVMs asserts upstream CAA's behaviour at
// SIGTERM (server.Shutdown in pkg/adaptor/server.go, v0.22.0, tears the
// provider down and deletes nothing; run against CAA built with -tags
// gcp_t4: the VM stayed RUNNING): live sandboxes' VMs keep running for
// the reaper, nothing is deleted, and no new sandbox is taken.
func TestShutdownLeavesLiveSandboxesVMs(t *testing.T) {
	e := startAdaptor(t)
	e.create(t, sid0, gpuPod("mistral-tp-0"))
	e.create(t, sid1, gpuPod("mistral-tp-1"))
	e.start(t, sid0)
	e.start(t, sid1)
	e.create(t, "c0ffee00c0ffee00", gpuPod("never-started"))
	if n := len(e.fake.Instances()); n != 2 {
		t.Fatalf("%d VMs before shutdown, want 2", n)
	}
	if err := e.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if left := e.fake.Instances(); len(left) != 2 {
		t.Errorf("%d VMs left after shutdown, want both live sandboxes' 2", len(left))
	}
	if n := e.fake.CountCalls("instances.delete"); n != 0 {
		t.Errorf("%d deletes at shutdown, want none", n)
	}
	if got := e.srv.Left(); len(got) != 2 || got[0] != gcpt4.InstanceID("us-central1-a", vmOf(e.fake, sid0).GetName()) {
		t.Errorf("Left() = %v, want the two VMs in sandbox order", got)
	}
	if _, err := os.Stat(e.srv.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := e.shim.CreateVM(context.Background(), sid0, "", gpuPod("late")); err == nil {
		t.Error("CreateVM after shutdown succeeded")
	}
}

// TestShutdownFinishesACreateInFlight: a StartVM running at SIGTERM ends
// with its VM created and handed to the sandbox (upstream finishes it too),
// and the VM is left for the reaper, not cut off half-made.
func TestShutdownFinishesACreateInFlight(t *testing.T) {
	e := startAdaptor(t)
	e.fake.SetOperationLatency(300 * time.Millisecond)
	e.create(t, sid0, gpuPod("mistral-tp-0"))
	started := make(chan error, 1)
	go func() { started <- e.shim.StartVM(context.Background(), sid0, 0) }()
	if err := e.fake.AwaitCalls(t.Context(), "instances.insert", 1); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := <-started; err != nil {
		t.Fatalf("StartVM in flight at shutdown: %v", err)
	}
	vm := vmOf(e.fake, sid0)
	if vm == nil || vm.GetStatus() != "RUNNING" || e.fake.CountCalls("instances.delete") != 0 {
		t.Fatalf("want the in-flight create finished and its VM left running, got %v, %d deletes", vm.GetStatus(), e.fake.CountCalls("instances.delete"))
	}
}

func TestBadAnnotationsCreateNoVM(t *testing.T) {
	e := startAdaptor(t)
	ctx := context.Background()
	bad := map[string]shimclient.Sandbox{
		"1111111111111111": {Namespace: "llm", GPUs: 1},                                 // no pod name
		"2222222222222222": {Name: "p", GPUs: 1},                                        // no namespace
		"3333333333333333": {Name: "p", Namespace: "llm", MachineType: "t4-1", GPUs: 9}, // valid annotations, unsatisfiable
	}
	wantErr := map[string]string{
		"1111111111111111": annotations.SandboxName,
		"2222222222222222": annotations.SandboxNamespace,
	}
	for sid, sb := range bad {
		_, err := e.shim.CreateVM(ctx, sid, "", sb)
		if want, isBad := wantErr[sid]; isBad {
			wantCode(t, err, codes.InvalidArgument, want)
			wantCode(t, e.shim.StartVM(ctx, sid, 0), codes.NotFound, "does not exist")
			continue
		}
		if err != nil {
			t.Fatalf("CreateVM %s: %v", sid, err)
		}
		// The provider refuses the shape at StartVM; nothing is made.
		if err := e.shim.StartVM(ctx, sid, 0); err == nil || !strings.Contains(err.Error(), "GPU") {
			t.Errorf("StartVM of a 9-GPU t4-1 pod: want the provider's GPU error, got %v", err)
		}
		if err := e.shim.StopVM(ctx, sid); err != nil {
			t.Errorf("StopVM after a failed start: %v", err)
		}
	}
	// Malformed numbers, sent as raw annotations (kata only sends decimals).
	for _, raw := range []map[string]string{
		{annotations.SandboxName: "p", annotations.SandboxNamespace: "llm", annotations.GPUs: "one"},
		{annotations.SandboxName: "p", annotations.SandboxNamespace: "llm", annotations.Memory: "-12288"},
		{annotations.SandboxName: "p", annotations.SandboxNamespace: "llm", annotations.VCPUs: "0.5"},
	} {
		_, err := e.srv.Service().CreateVM(ctx, createReq("4444444444444444", raw))
		wantCode(t, err, codes.InvalidArgument, "annotation io.katacontainers.config.hypervisor.")
	}
	for _, sid := range []string{"", "../../etc", ".hidden", strings.Repeat("a", 129)} {
		_, err := e.srv.Service().CreateVM(ctx, createReq(sid, kataAnnotations()))
		wantCode(t, err, codes.InvalidArgument, "sandbox id")
	}
	if ids := e.srv.Service().Sandboxes(); len(ids) != 0 {
		t.Errorf("sandboxes registered from bad requests: %v", ids)
	}
	if n := e.fake.CountCalls("instances.insert"); n != 0 || len(e.fake.Instances()) != 0 {
		t.Errorf("%d inserts, %d VMs from bad requests; want none", n, len(e.fake.Instances()))
	}
}

func TestFailedDeleteKeepsSandboxForRetry(t *testing.T) {
	e := startAdaptor(t)
	ctx := context.Background()
	e.create(t, sid0, gpuPod("mistral-tp-0"))
	e.start(t, sid0)
	e.fake.FailNext("DELETE", "instances.delete", 400, 1)
	if err := e.shim.StopVM(ctx, sid0); err == nil || !strings.Contains(err.Error(), "kept for a retry") {
		t.Fatalf("StopVM with a failing delete: want an error, got %v", err)
	}
	if ids := e.srv.Service().Sandboxes(); len(ids) != 1 {
		t.Fatalf("sandbox forgotten after a failed delete: %v", ids)
	}
	if err := e.shim.StopVM(ctx, sid0); err != nil {
		t.Fatalf("retried StopVM: %v", err)
	}
	if left := e.fake.Instances(); len(left) != 0 {
		t.Errorf("%d VMs left", len(left))
	}
}

func TestStaleSocketIsReplacedLiveOneRefused(t *testing.T) {
	e := startAdaptor(t)
	// A second adaptor on a live socket must not steal it.
	if _, err := Listen(e.srv.SocketPath(), NewService(nil, e.podsDir, "", quietLogger())); err == nil || !strings.Contains(err.Error(), "another process serves") {
		t.Errorf("Listen on a live socket: %v", err)
	}
	notSocket := filepath.Join(shortDir(t), "file")
	if err := os.WriteFile(notSocket, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(notSocket, NewService(nil, e.podsDir, "", quietLogger())); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file: %v", err)
	}
	// After a crash the socket file stays; a new adaptor takes it over.
	sock := e.srv.SocketPath()
	if err := e.srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	leaveStaleSocket(t, sock)
	srv2, err := Listen(sock, NewService(nil, e.podsDir, "again", quietLogger()))
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer srv2.Stop(context.Background())
	if v, err := shimclient.New(sock, 0).Version(context.Background()); err != nil || v != "again" {
		t.Errorf("Version from the new adaptor: %q, %v", v, err)
	}
}

// recordingProvider keeps CreateInstance's arguments.
type recordingProvider struct {
	mu      sync.Mutex
	pod     string
	sandbox string
	spec    provider.InstanceTypeSpec
	config  string
	deleted []string
}

func (p *recordingProvider) CreateInstance(_ context.Context, podName, sandboxID string, cc cloudinit.CloudConfigGenerator, spec provider.InstanceTypeSpec) (*provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cfg, err := cc.Generate()
	if err != nil {
		return nil, err
	}
	p.pod, p.sandbox, p.spec, p.config = podName, sandboxID, spec, cfg
	return &provider.Instance{ID: "vm-" + sandboxID[:8], Name: "vm", IPs: []netip.Addr{netip.MustParseAddr("10.128.0.9")}}, nil
}

func (p *recordingProvider) DeleteInstance(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deleted = append(p.deleted, id)
	return nil
}

func (p *recordingProvider) Teardown() error       { return nil }
func (p *recordingProvider) ConfigVerifier() error { return nil }

func TestStartVMCallsProviderLikeCAA(t *testing.T) {
	prov := &recordingProvider{}
	sock := filepath.Join(shortDir(t), "h.sock")
	srv, err := Listen(sock, NewService(prov, shortDir(t), "v", quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	shim := shimclient.New(sock, 0)
	ctx := context.Background()
	sb := shimclient.Sandbox{Name: "k8s_mistral-tp-0_llm_uid_0", Namespace: "llm", MachineType: "t4-2", Image: "podvm-t4-v2", VCPUs: 8, MemoryMiB: 30720, GPUs: 2, GPUModel: "nvidia-tesla-t4"}
	if _, err := shim.CreateVM(ctx, sid0, "/var/run/netns/x", sb); err != nil {
		t.Fatal(err)
	}
	if err := shim.StartVM(ctx, sid0, 0); err != nil {
		t.Fatal(err)
	}
	want := provider.InstanceTypeSpec{InstanceType: "t4-2", Image: "podvm-t4-v2", VCPUs: 8, Memory: 30720, GPUs: 2}
	if prov.pod != "mistral-tp-0" || prov.sandbox != sid0 || prov.spec.InstanceType != want.InstanceType || prov.spec.Image != want.Image ||
		prov.spec.VCPUs != want.VCPUs || prov.spec.Memory != want.Memory || prov.spec.GPUs != want.GPUs {
		t.Errorf("CreateInstance(%q, %q, %+v), want (mistral-tp-0, %s, %+v)", prov.pod, prov.sandbox, prov.spec, sid0, want)
	}
	if !strings.Contains(prov.config, apfConfigPath) {
		t.Errorf("cloud-config lacks %s:\n%s", apfConfigPath, prov.config)
	}
	apf, _ := json.Marshal(apfConfig{PodName: "mistral-tp-0", PodNamespace: "llm"})
	if !strings.Contains(prov.config, string(apf)) && !strings.Contains(prov.config, strings.ReplaceAll(string(apf), `"`, `\"`)) {
		t.Errorf("cloud-config lacks the pod identity %s:\n%s", apf, prov.config)
	}
	if err := shim.StopVM(ctx, sid0); err != nil {
		t.Fatal(err)
	}
	if len(prov.deleted) != 1 || prov.deleted[0] != "vm-"+sid0[:8] {
		t.Errorf("deleted %v, want the started VM", prov.deleted)
	}
}

// leaveStaleSocket leaves a socket file nobody listens on, as a crashed
// adaptor does.
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left: %v", err)
	}
}

func createReq(sid string, annotations map[string]string) *hypervisor.CreateVMRequest {
	return &hypervisor.CreateVMRequest{Id: sid, Annotations: annotations}
}

// TestStopVMDuringStartVMLeavesNoVM: a StopVM that arrives while StartVM
// is creating the VM waits for it and deletes the VM; one that arrives
// after StartVM returned deletes it too. Each order is made, not raced: the
// fake's clock holds the insert's operation RUNNING until the test advances
// it, and the test advances it only once the adaptor says StopVM is
// waiting.
func TestStopVMDuringStartVMLeavesNoVM(t *testing.T) {
	t.Run("stop while the create is in flight", func(t *testing.T) {
		clk := gcefake.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
		fake := gcefake.New(gcefake.WithClock(clk.Now))
		t.Cleanup(fake.Close)
		fake.SetOperationLatency(time.Minute)
		waiting := make(chan struct{}, 1)
		e := startAdaptorOn(t, fake, slog.New(&signalHandler{msg: "StopVM waits for the sandbox's StartVM in flight", ch: waiting}))
		ctx := t.Context()
		e.create(t, sid0, gpuPod("mistral-tp-0"))
		started := make(chan error, 1)
		go func() { started <- e.shim.StartVM(ctx, sid0, 0) }()
		// The insert is sent and its operation is RUNNING: StartVM holds
		// the sandbox until the clock moves.
		if err := fake.AwaitCalls(ctx, "instances.insert", 1); err != nil {
			t.Fatal(err)
		}
		if err := fake.AwaitLongPolls(ctx, 1); err != nil {
			t.Fatal(err)
		}
		// Later operations (the delete's) complete at once; the insert's
		// keeps the completion time it was given.
		fake.SetOperationLatency(0)
		stopped := make(chan error, 1)
		go func() { stopped <- e.shim.StopVM(ctx, sid0) }()
		select {
		case <-waiting:
		case err := <-stopped:
			t.Fatalf("StopVM returned (%v) while the create was in flight; it must wait for it", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		clk.Advance(time.Minute)
		if err := <-started; err != nil {
			t.Fatalf("StartVM: %v", err)
		}
		if err := <-stopped; err != nil {
			t.Fatalf("StopVM: %v", err)
		}
		if n := fake.CountCalls("instances.delete"); n != 1 {
			t.Errorf("%d deletes, want 1: StopVM must delete the VM the create made", n)
		}
		if left := fake.Instances(); len(left) != 0 {
			t.Errorf("%d VMs survived StopVM during StartVM", len(left))
		}
		if ids := e.srv.Service().Sandboxes(); len(ids) != 0 {
			t.Errorf("sandboxes left: %v", ids)
		}
	})
	t.Run("stop after start returned", func(t *testing.T) {
		e := startAdaptor(t)
		ctx := t.Context()
		e.create(t, sid0, gpuPod("mistral-tp-0"))
		e.start(t, sid0)
		if err := e.shim.StopVM(ctx, sid0); err != nil {
			t.Fatalf("StopVM: %v", err)
		}
		if left := e.fake.Instances(); len(left) != 0 {
			t.Errorf("%d VMs survived StopVM", len(left))
		}
		if err := e.shim.StartVM(ctx, sid0, 0); status.Code(err) != codes.NotFound {
			t.Errorf("StartVM after StopVM: %v, want NotFound", err)
		}
	})
}

// signalHandler is a slog.Handler that discards records and signals ch
// (without blocking) on each record whose message is msg.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// memRecorder records PeerPods in memory; failOwn makes Own fail.
type memRecorder struct {
	mu       sync.Mutex
	owned    map[string]string // record -> instance
	released []string
	failOwn  bool
}

func (r *memRecorder) Own(_ context.Context, ns, pod, instanceID string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failOwn {
		return "", status.Error(codes.Unavailable, "API server down")
	}
	name := ns + "/" + pod + "-resource-x"
	r.owned[name] = instanceID
	return pod + "-resource-x", nil
}

func (r *memRecorder) Release(_ context.Context, ns, record string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = append(r.released, ns+"/"+record)
	return nil
}

// TestPeerPodsRecordedAsCAADoes: a PeerPod after each create returned,
// released after the delete succeeded; a failing API only logs, as in
// CAA, and the pod still starts.
func TestPeerPodsRecordedAsCAADoes(t *testing.T) {
	e := startAdaptor(t)
	rec := &memRecorder{owned: map[string]string{}}
	e.srv.Service().WithRecorder(rec)
	ctx := context.Background()
	e.create(t, sid0, gpuPod("mistral-tp-0"))
	e.start(t, sid0)
	id := gcpt4.InstanceID("us-central1-a", vmOf(e.fake, sid0).GetName())
	if got := rec.owned["llm/mistral-tp-0-resource-x"]; got != id {
		t.Fatalf("PeerPods %v, want llm/mistral-tp-0 owning %s", rec.owned, id)
	}
	if err := e.shim.StopVM(ctx, sid0); err != nil {
		t.Fatal(err)
	}
	if len(rec.released) != 1 || rec.released[0] != "llm/mistral-tp-0-resource-x" {
		t.Fatalf("released %v after the delete", rec.released)
	}
	rec.failOwn = true
	e.create(t, sid1, gpuPod("mistral-tp-1"))
	e.start(t, sid1)
	if vmOf(e.fake, sid1) == nil {
		t.Fatal("no VM when the PeerPod could not be recorded")
	}
}
