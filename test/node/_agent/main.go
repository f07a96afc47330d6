// Command agent stands in for the podVM's kata-agent in the node harness's
// kata stage (docs/node-harness.md, "The podVM"). It serves kata's agent
// protocol (the ttrpc services grpc.AgentService and grpc.Health of
// src/runtime/virtcontainers/pkg/agent/protocols/grpc at kata cf82bb35,
// kata 4.0.0, the commit CAA v0.22.0 pins) on a unix socket, where the
// real agent-protocol-forwarder (CAA v0.22.0) relays what kata's shim
// sends through CAA.
//
// It imports kata's protocol package, which the module proxy does not
// serve, so it is no package of test/node (the leading underscore keeps it
// out of ./...): test/node/kata-build.sh builds it in a scratch module
// with kata's src/runtime from the KATA checkout.
//
// What it does, per call (everything else answers Unimplemented, logged,
// so that a run shows what the shim asked for that it lacks):
//   - Check/Version: serving. GetGuestDetails: no memory hotplug.
//   - CreateSandbox, DestroySandbox: the sandbox's record; DestroySandbox
//     ends every process and the OOM watch.
//   - CreateContainer: the sandbox ("pause") container at once, as the
//     pinned agent does from the pause bundle in its image; any other
//     container after the modelled in-guest image pull (pull.go).
//   - StartContainer, ExecProcess: a process that prints its arguments on
//     stdout, as the harness's sleeper image does, then waits for a
//     signal (an exec'd process exits at once: 0, or N for the arguments
//     `<entrypoint> exit N`); WaitProcess,
//     ReadStdout/ReadStderr, SignalProcess and CloseStdin act on it.
//   - CopyFile: written in this process's /run (the harness gives it a
//     private tmpfs there, as the guest's own /run), the agent's rule
//     that the path be absolute and below /run kept.
//   - RemoveContainer, StatsContainer (zeros), UpdateContainer,
//     UpdateInterface/UpdateRoutes/AddARPNeighbors, SetPolicy,
//     SetGuestDateTime, OnlineCPUMem and the like: accepted.
//
// Nothing runs in a container: there is no image in this "guest", no
// runc and no cgroup. The pod's network is the forwarder's (real).
//
//	agent [-listen /run/kata-containers/agent.sock] [-pull-duration D] [-image NAME=DIGEST]…
//	      [-store DIGEST,…] [-pull-failures N] [-- forwarder args…]
//
// With a command after "--", it starts that command once its socket
// listens (the podVM starts the forwarder after kata-agent's socket
// exists) and stops it on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"
	"github.com/kata-containers/kata-containers/src/runtime/virtcontainers/pkg/agent/protocols"
	pb "github.com/kata-containers/kata-containers/src/runtime/virtcontainers/pkg/agent/protocols/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

var logger = log.New(os.Stderr, "[stand-in kata-agent] ", log.LstdFlags|log.Lmicroseconds|log.Lmsgprefix)

func main() {
	listen := flag.String("listen", "/run/kata-containers/agent.sock", "unix socket to serve the agent protocol on (the forwarder's -kata-agent-socket)")
	pull := flag.Duration("pull-duration", 0, "modelled time of an in-guest image pull, per image not yet pulled in this podVM")
	images := imageFlag{}
	flag.Var(images, "image", "NAME=sha256:DIGEST: an image reference's config digest in the modelled registry (repeatable); others get a digest of their name")
	var store digestsFlag
	flag.Var(&store, "store", "config digests in the pre-unpacked store (image_db at start), comma-separated")
	failures := flag.Int("pull-failures", 0, "how many pulls fail halfway (the registry connection drops) before one succeeds")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *listen, newPuller(*pull, images, store, *failures), flag.Args()); err != nil {
		logger.Printf("exit: %v", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen string, pull *puller, then []string) error {
	if err := os.MkdirAll(filepath.Dir(listen), 0o755); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	l, err := net.Listen("unix", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		return fmt.Errorf("ttrpc server: %w", err)
	}
	a := newAgent(ctx, pull)
	pb.RegisterAgentServiceService(srv, a)
	pb.RegisterHealthService(srv, a)
	logger.Printf("listening on %s (modelled pull: %s per image, %d in the pre-unpacked store, %d failing first)", listen, pull.duration, len(pull.stored), pull.failures)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	var child *exec.Cmd
	childDone := make(chan error, 1)
	if len(then) > 0 {
		child = exec.Command(then[0], then[1:]...)
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		// Killed with the stand-in, so a harness that kills the "podVM"
		// outright leaves no forwarder behind.
		child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := child.Start(); err != nil {
			return fmt.Errorf("start %s: %w", then[0], err)
		}
		logger.Printf("started %s (pid %d)", strings.Join(then, " "), child.Process.Pid)
		go func() { childDone <- child.Wait() }()
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case err := <-childDone:
		// The podVM's forwarder restarts on failure; here its exit ends
		// the "podVM", so the harness sees it rather than a silent VM.
		return fmt.Errorf("%s exited: %v", then[0], err)
	}
	if child != nil {
		_ = child.Process.Signal(syscall.SIGTERM)
		select {
		case <-childDone:
		case <-time.After(10 * time.Second):
			_ = child.Process.Kill()
			<-childDone
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

// agent is the podVM's state as the stand-in keeps it.
type agent struct {
	life context.Context // the agent's own life: the pull ends with it, not with a request
	pull *puller

	mu         sync.Mutex
	sandbox    string
	containers map[string]*container
	destroyed  chan struct{} // closed by DestroySandbox: ends GetOOMEvent
}

type container struct {
	id      string
	sandbox bool
	args    []string
	procs   map[string]*process // by exec id; "" is the container's init
	created time.Time
	started bool
}

// process is a modelled process: its output, then a wait for a signal.
type process struct {
	mu sync.Mutex
	// echo: the process is `cat` (an interactive exec): what is written to
	// its stdin comes back on its stdout, and it exits 0 when stdin closes.
	echo   bool
	out    []byte
	wake   chan struct{} // closed and replaced when out grows or the process exits
	exited chan struct{}
	status int32
	once   sync.Once
}

func newProcess(out string) *process {
	return &process{out: []byte(out), wake: make(chan struct{}), exited: make(chan struct{})}
}

func (p *process) exit(status int32) {
	p.once.Do(func() {
		p.mu.Lock()
		p.status = status
		close(p.exited)
		close(p.wake)
		p.wake = make(chan struct{})
		p.mu.Unlock()
	})
}

// write appends stdin's data to an echoing process's output.
func (p *process) write(data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = append(p.out, data...)
	close(p.wake)
	p.wake = make(chan struct{})
}

// read returns up to n bytes of output, waiting for some; after the
// process exited and its output is read, an error, which ends the shim's
// copy of the stream as the agent's EOF does.
func (p *process) read(ctx context.Context, n int) ([]byte, error) {
	for {
		p.mu.Lock()
		if len(p.out) > 0 {
			k := min(n, len(p.out))
			data := p.out[:k:k]
			p.out = p.out[k:]
			p.mu.Unlock()
			return data, nil
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-p.exited:
			return nil, status.Error(codes.Unavailable, "EOF")
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func newAgent(life context.Context, pull *puller) *agent {
	return &agent{life: life, pull: pull,
		containers: map[string]*container{}, destroyed: make(chan struct{})}
}

func (a *agent) proc(cid, eid string) (*process, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.containers[cid]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", cid)
	}
	if eid == cid {
		eid = ""
	}
	p, ok := c.procs[eid]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "process %q of container %s not found", eid, cid)
	}
	return p, nil
}

var empty = &emptypb.Empty{}

func (a *agent) Check(context.Context, *pb.CheckRequest) (*pb.HealthCheckResponse, error) {
	return &pb.HealthCheckResponse{Status: pb.HealthCheckResponse_SERVING}, nil
}

func (a *agent) Version(context.Context, *pb.CheckRequest) (*pb.VersionCheckResponse, error) {
	return &pb.VersionCheckResponse{GrpcVersion: "stand-in", AgentVersion: "4.0.0-stand-in"}, nil
}

func (a *agent) CreateSandbox(_ context.Context, r *pb.CreateSandboxRequest) (*emptypb.Empty, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sandbox != "" {
		return nil, status.Errorf(codes.AlreadyExists, "sandbox %s exists", a.sandbox)
	}
	a.sandbox = r.SandboxId
	logger.Printf("CreateSandbox %s (hostname %q)", r.SandboxId, r.Hostname)
	return empty, nil
}

func (a *agent) DestroySandbox(context.Context, *pb.DestroySandboxRequest) (*emptypb.Empty, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	logger.Printf("DestroySandbox %s (%d containers)", a.sandbox, len(a.containers))
	for _, c := range a.containers {
		for _, p := range c.procs {
			p.exit(137)
		}
	}
	a.containers = map[string]*container{}
	select {
	case <-a.destroyed:
	default:
		close(a.destroyed)
	}
	return empty, nil
}

// CreateContainer creates the container after the modelled pull of its
// image (pull.go). The request's context is not watched once the pull is
// under way: kata-agent's handler runs to its end whether or not the shim
// still waits for the answer, so a container whose create the shim gave
// up on is still made here, and left, as the pinned agent leaves it.
func (a *agent) CreateContainer(ctx context.Context, r *pb.CreateContainerRequest) (*emptypb.Empty, error) {
	start := time.Now()
	ann := map[string]string{}
	var args []string
	if r.OCI != nil {
		ann = r.OCI.Annotations
		if r.OCI.Process != nil {
			args = r.OCI.Process.Args
		}
	}
	isSandbox := ann["io.kubernetes.cri.container-type"] == "sandbox"
	image := ann["io.kubernetes.cri.image-name"]
	for _, s := range r.Storages {
		if s.Driver == "image_guest_pull" && s.Source != "" {
			image = s.Source
		}
	}
	logger.Printf("CreateContainer %s (sandbox container: %t, image %q, %d storages)", r.ContainerId, isSandbox, image, len(r.Storages))
	if !isSandbox {
		if image == "" {
			return nil, status.Errorf(codes.InvalidArgument, "container %s: no image named in its annotations or storages", r.ContainerId)
		}
		if err := a.pull.pull(a.life, ctx, r.ContainerId, image); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.containers[r.ContainerId]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "container %s exists", r.ContainerId)
	}
	a.containers[r.ContainerId] = &container{id: r.ContainerId, sandbox: isSandbox, args: args,
		procs: map[string]*process{}, created: time.Now()}
	gaveUp := ""
	if ctx.Err() != nil {
		gaveUp = fmt.Sprintf("; the caller gave up before (%v): the container stays, orphaned unless started", ctx.Err())
	}
	logger.Printf("CreateContainer %s done in %s%s", r.ContainerId, time.Since(start).Round(time.Millisecond), gaveUp)
	return empty, ctx.Err()
}

func (a *agent) StartContainer(_ context.Context, r *pb.StartContainerRequest) (*emptypb.Empty, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.containers[r.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", r.ContainerId)
	}
	if c.started {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s already started", r.ContainerId)
	}
	c.started = true
	out := ""
	if !c.sandbox {
		// The sleeper image's entrypoint prints its arguments.
		out = strings.Join(c.args[min(1, len(c.args)):], " ") + "\n"
	}
	c.procs[""] = newProcess(out)
	logger.Printf("StartContainer %s (%q)", r.ContainerId, c.args)
	return empty, nil
}

func (a *agent) ExecProcess(_ context.Context, r *pb.ExecProcessRequest) (*emptypb.Empty, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.containers[r.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", r.ContainerId)
	}
	var args []string
	if r.Process != nil {
		args = r.Process.Args
	}
	if len(args) == 2 && args[1] == "cat" {
		// An interactive exec: stdin back on stdout until it closes.
		p := newProcess("")
		p.echo = true
		c.procs[r.ExecId] = p
		logger.Printf("ExecProcess %s/%s (%q): echoes its stdin, exits 0 when it closes", r.ContainerId, r.ExecId, args)
		return empty, nil
	}
	p := newProcess(strings.Join(args, " ") + "\n")
	code := execStatus(args)
	p.exit(code)
	c.procs[r.ExecId] = p
	logger.Printf("ExecProcess %s/%s (%q): prints its arguments, exits %d", r.ContainerId, r.ExecId, args, code)
	return empty, nil
}

// execStatus is an exec'd process's exit status: 0, or N when its
// arguments after the entrypoint are `exit N` (so a test can see a
// status come back through the chain).
func execStatus(args []string) int32 {
	if len(args) == 3 && args[1] == "exit" {
		if n, err := strconv.ParseInt(args[2], 10, 32); err == nil && n >= 0 && n < 256 {
			return int32(n)
		}
	}
	return 0
}

func (a *agent) SignalProcess(_ context.Context, r *pb.SignalProcessRequest) (*emptypb.Empty, error) {
	logger.Printf("SignalProcess %s/%q signal %d", r.ContainerId, r.ExecId, r.Signal)
	if r.Signal == 0 {
		_, err := a.proc(r.ContainerId, r.ExecId)
		return empty, err
	}
	a.mu.Lock()
	c, ok := a.containers[r.ContainerId]
	a.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", r.ContainerId)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for eid, p := range c.procs {
		if r.ExecId == "" || r.ExecId == eid || (eid == "" && r.ExecId == r.ContainerId) {
			p.exit(128 + int32(r.Signal))
		}
	}
	return empty, nil
}

func (a *agent) WaitProcess(ctx context.Context, r *pb.WaitProcessRequest) (*pb.WaitProcessResponse, error) {
	p, err := a.proc(r.ContainerId, r.ExecId)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.exited:
		p.mu.Lock()
		defer p.mu.Unlock()
		logger.Printf("WaitProcess %s/%q: exited %d", r.ContainerId, r.ExecId, p.status)
		return &pb.WaitProcessResponse{Status: p.status}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *agent) ReadStdout(ctx context.Context, r *pb.ReadStreamRequest) (*pb.ReadStreamResponse, error) {
	p, err := a.proc(r.ContainerId, r.ExecId)
	if err != nil {
		return nil, err
	}
	data, err := p.read(ctx, int(max(r.Len, 1)))
	if err != nil {
		return nil, err
	}
	return &pb.ReadStreamResponse{Data: data}, nil
}

// ReadStderr: the modelled processes write nothing there; it ends when
// the process does.
func (a *agent) ReadStderr(ctx context.Context, r *pb.ReadStreamRequest) (*pb.ReadStreamResponse, error) {
	p, err := a.proc(r.ContainerId, r.ExecId)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.exited:
		return nil, status.Error(codes.Unavailable, "EOF")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *agent) WriteStdin(_ context.Context, r *pb.WriteStreamRequest) (*pb.WriteStreamResponse, error) {
	p, err := a.proc(r.ContainerId, r.ExecId)
	if err != nil {
		return nil, err
	}
	if p.echo {
		p.write(r.Data)
		logger.Printf("WriteStdin %s/%s: %d bytes", r.ContainerId, r.ExecId, len(r.Data))
	}
	return &pb.WriteStreamResponse{Len: uint32(len(r.Data))}, nil
}

func (a *agent) CloseStdin(_ context.Context, r *pb.CloseStdinRequest) (*emptypb.Empty, error) {
	p, err := a.proc(r.ContainerId, r.ExecId)
	if err != nil {
		return nil, err
	}
	if p.echo {
		logger.Printf("CloseStdin %s/%s: exits 0", r.ContainerId, r.ExecId)
		p.exit(0)
	}
	return empty, nil
}

func (a *agent) TtyWinResize(context.Context, *pb.TtyWinResizeRequest) (*emptypb.Empty, error) {
	return empty, nil
}

func (a *agent) RemoveContainer(_ context.Context, r *pb.RemoveContainerRequest) (*emptypb.Empty, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.containers[r.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", r.ContainerId)
	}
	for _, p := range c.procs {
		p.exit(137)
	}
	delete(a.containers, r.ContainerId)
	logger.Printf("RemoveContainer %s", r.ContainerId)
	return empty, nil
}

func (a *agent) StatsContainer(context.Context, *pb.StatsContainerRequest) (*pb.StatsContainerResponse, error) {
	return &pb.StatsContainerResponse{CgroupStats: &pb.CgroupStats{
		CpuStats:     &pb.CpuStats{CpuUsage: &pb.CpuUsage{}, ThrottlingData: &pb.ThrottlingData{}},
		MemoryStats:  &pb.MemoryStats{Usage: &pb.MemoryData{}, SwapUsage: &pb.MemoryData{}, KernelUsage: &pb.MemoryData{}},
		PidsStats:    &pb.PidsStats{},
		BlkioStats:   &pb.BlkioStats{},
		HugetlbStats: map[string]*pb.HugetlbStats{},
	}}, nil
}

// CopyFile writes the shim's files (hostname, hosts, resolv.conf, …) in
// this process's /run, as the agent does in the guest's.
func (a *agent) CopyFile(_ context.Context, r *pb.CopyFileRequest) (*emptypb.Empty, error) {
	p := filepath.Clean(r.Path)
	if r.Offset == 0 {
		logger.Printf("CopyFile %s (%d bytes)", r.Path, r.FileSize)
	}
	if p != r.Path || !strings.HasPrefix(p, "/run/") {
		return nil, status.Errorf(codes.InvalidArgument, "path %q is not absolute, canonical and below /run", r.Path)
	}
	if err := os.MkdirAll(filepath.Dir(p), os.FileMode(r.DirMode&0o7777|0o700)); err != nil {
		return nil, status.Errorf(codes.Internal, "copy %s: %v", p, err)
	}
	mode := os.FileMode(r.FileMode & 0o7777)
	switch r.FileMode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if err := os.MkdirAll(p, mode|0o700); err != nil {
			return nil, status.Errorf(codes.Internal, "copy %s: %v", p, err)
		}
		return empty, nil
	case syscall.S_IFLNK:
		_ = os.Remove(p)
		if err := os.Symlink(string(r.Data), p); err != nil {
			return nil, status.Errorf(codes.Internal, "copy %s: %v", p, err)
		}
		return empty, nil
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, mode|0o600)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "copy %s: %v", p, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(r.Data, r.Offset); err != nil {
		return nil, status.Errorf(codes.Internal, "copy %s: %v", p, err)
	}
	return empty, nil
}

// GetOOMEvent: no OOM ever happens here. It waits until the sandbox is
// destroyed or the caller gives up, so the shim's watch loop neither spins
// nor ends early.
func (a *agent) GetOOMEvent(ctx context.Context, _ *pb.GetOOMEventRequest) (*pb.OOMEvent, error) {
	a.mu.Lock()
	d := a.destroyed
	a.mu.Unlock()
	select {
	case <-d:
		// The shim's watch ends on exactly this text (containerd-shim-v2/wait.go).
		//lint:ignore ST1005 kata's shim compares the error's text
		return nil, errors.New("Dead agent")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *agent) GetGuestDetails(context.Context, *pb.GuestDetailsRequest) (*pb.GuestDetailsResponse, error) {
	return &pb.GuestDetailsResponse{AgentDetails: &pb.AgentDetails{Version: "4.0.0-stand-in", InitDaemon: true}}, nil
}

func (a *agent) UpdateInterface(_ context.Context, r *pb.UpdateInterfaceRequest) (*protocols.Interface, error) {
	logger.Printf("UpdateInterface (accepted, not applied: the forwarder sets up the pod's network)")
	return r.Interface, nil
}

func (a *agent) UpdateRoutes(_ context.Context, r *pb.UpdateRoutesRequest) (*pb.Routes, error) {
	logger.Printf("UpdateRoutes (accepted, not applied)")
	return r.Routes, nil
}

func (a *agent) AddARPNeighbors(context.Context, *pb.AddARPNeighborsRequest) (*emptypb.Empty, error) {
	logger.Printf("AddARPNeighbors (accepted, not applied)")
	return empty, nil
}

func (a *agent) ListInterfaces(context.Context, *pb.ListInterfacesRequest) (*pb.Interfaces, error) {
	return &pb.Interfaces{}, nil
}

func (a *agent) ListRoutes(context.Context, *pb.ListRoutesRequest) (*pb.Routes, error) {
	return &pb.Routes{}, nil
}

// Accepted and logged: settings a real guest applies and this one has no
// use for.
func (a *agent) accept(what string) (*emptypb.Empty, error) {
	logger.Printf("%s (accepted)", what)
	return empty, nil
}

func (a *agent) UpdateContainer(context.Context, *pb.UpdateContainerRequest) (*emptypb.Empty, error) {
	return a.accept("UpdateContainer")
}

func (a *agent) UpdateEphemeralMounts(context.Context, *pb.UpdateEphemeralMountsRequest) (*emptypb.Empty, error) {
	return a.accept("UpdateEphemeralMounts")
}

func (a *agent) PauseContainer(context.Context, *pb.PauseContainerRequest) (*emptypb.Empty, error) {
	return a.accept("PauseContainer")
}

func (a *agent) ResumeContainer(context.Context, *pb.ResumeContainerRequest) (*emptypb.Empty, error) {
	return a.accept("ResumeContainer")
}

func (a *agent) RemoveStaleVirtiofsShareMounts(context.Context, *pb.RemoveStaleVirtiofsShareMountsRequest) (*emptypb.Empty, error) {
	return a.accept("RemoveStaleVirtiofsShareMounts")
}

func (a *agent) OnlineCPUMem(context.Context, *pb.OnlineCPUMemRequest) (*emptypb.Empty, error) {
	return a.accept("OnlineCPUMem")
}

func (a *agent) ReseedRandomDev(context.Context, *pb.ReseedRandomDevRequest) (*emptypb.Empty, error) {
	return a.accept("ReseedRandomDev")
}

func (a *agent) MemHotplugByProbe(context.Context, *pb.MemHotplugByProbeRequest) (*emptypb.Empty, error) {
	return a.accept("MemHotplugByProbe")
}

func (a *agent) SetGuestDateTime(context.Context, *pb.SetGuestDateTimeRequest) (*emptypb.Empty, error) {
	return a.accept("SetGuestDateTime")
}

func (a *agent) SetPolicy(context.Context, *pb.SetPolicyRequest) (*emptypb.Empty, error) {
	return a.accept("SetPolicy")
}

func (a *agent) MemAgentMemcgSet(context.Context, *pb.MemAgentMemcgConfig) (*emptypb.Empty, error) {
	return a.accept("MemAgentMemcgSet")
}

func (a *agent) MemAgentCompactSet(context.Context, *pb.MemAgentCompactConfig) (*emptypb.Empty, error) {
	return a.accept("MemAgentCompactSet")
}

// Unimplemented: logged, so a run shows what the shim wanted.
func unimplemented(what string) error {
	logger.Printf("%s: unimplemented in the stand-in", what)
	return status.Errorf(codes.Unimplemented, "%s: not implemented by the stand-in agent", what)
}

// GetDiagnosticData: the shim asks for a container's termination
// message when it stops; the modelled processes write none.
func (a *agent) GetDiagnosticData(context.Context, *pb.GetDiagnosticDataRequest) (*pb.GetDiagnosticDataResponse, error) {
	return &pb.GetDiagnosticDataResponse{}, nil
}

func (a *agent) GetIPTables(context.Context, *pb.GetIPTablesRequest) (*pb.GetIPTablesResponse, error) {
	return nil, unimplemented("GetIPTables")
}

func (a *agent) SetIPTables(context.Context, *pb.SetIPTablesRequest) (*pb.SetIPTablesResponse, error) {
	return nil, unimplemented("SetIPTables")
}

func (a *agent) GetMetrics(context.Context, *pb.GetMetricsRequest) (*pb.Metrics, error) {
	return nil, unimplemented("GetMetrics")
}

func (a *agent) AddSwap(context.Context, *pb.AddSwapRequest) (*emptypb.Empty, error) {
	return nil, unimplemented("AddSwap")
}

func (a *agent) AddSwapPath(context.Context, *pb.AddSwapPathRequest) (*emptypb.Empty, error) {
	return nil, unimplemented("AddSwapPath")
}

func (a *agent) GetVolumeStats(context.Context, *pb.VolumeStatsRequest) (*pb.VolumeStatsResponse, error) {
	return nil, unimplemented("GetVolumeStats")
}

func (a *agent) ResizeVolume(context.Context, *pb.ResizeVolumeRequest) (*emptypb.Empty, error) {
	return nil, unimplemented("ResizeVolume")
}
