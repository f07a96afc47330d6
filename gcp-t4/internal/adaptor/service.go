// Package adaptor is a kata remote-hypervisor service in front of a CAA
// provider: it does what CAA's cloud service does for podVM provisioning
// (annotations → InstanceTypeSpec, CreateInstance on StartVM,
// DeleteInstance on StopVM) without CAA's pod networking and agent proxy,
// so that provisioning can be tested through the same ttrpc boundary the
// kata shim uses.
package adaptor

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caa-gcp-t4/gcp-t4/internal/hypervisor"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// AgentSocketName is the per-sandbox socket CreateVM hands the shim, named
// as CAA names it.
const AgentSocketName = "agent.ttrpc"

// apfConfigPath is where the podVM's agent-protocol-forwarder reads its
// configuration, as CAA writes it.
const apfConfigPath = "/run/peerpod/apf.json"

// sandboxIDRE limits sandbox IDs to what kata and containerd generate
// (hex), with room for other runtimes; the ID becomes a directory name, so
// separators and dot-only names are refused.
var sandboxIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Service implements hypervisor.HypervisorService over a provider.
type Service struct {
	prov    provider.Provider
	podsDir string
	version string
	log     *slog.Logger
	// records, if set, gets a PeerPod per created VM, as CAA makes one.
	records   Recorder
	noRecords sync.Once

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    bool
}

var _ hypervisor.HypervisorService = (*Service)(nil)

// sandbox is one CreateVM's state.
type sandbox struct {
	id          string
	pod         podRequest
	netns       string
	dir         string
	cloudConfig *cloudinit.CloudConfig

	// op serialises StartVM, StopVM and shutdown on this sandbox, so a
	// StopVM that arrives while StartVM is creating the VM deletes that VM
	// instead of missing it.
	op sync.Mutex
	// instance is the VM StartVM created, or the partial one a failed
	// create left for clean-up; nil before StartVM. Guarded by op.
	instance *provider.Instance
	// started is set once StartVM succeeded. Guarded by op.
	started bool
	// record is the PeerPod naming instance, "" when none. Guarded by op.
	record string
	// removed is set, under op, once the sandbox left the table, so a
	// StartVM that was waiting for op creates nothing for it.
	removed bool
}

// WithRecorder makes the service record each podVM it creates (PeerPods).
func (s *Service) WithRecorder(r Recorder) *Service {
	s.records = r
	return s
}

// NewService serves prov; agent sockets go under podsDir/<sandbox id>/.
func NewService(prov provider.Provider, podsDir, version string, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{
		prov:      prov,
		podsDir:   podsDir,
		version:   version,
		log:       logger.With("component", "adaptor"),
		sandboxes: map[string]*sandbox{},
	}
}

// Version answers the shim's version query. No kata shim calls it today;
// CAA answers a fixed string, this answers the gcp-t4 build.
func (s *Service) Version(context.Context, *hypervisor.VersionRequest) (*hypervisor.VersionResponse, error) {
	return &hypervisor.VersionResponse{Version: s.version}, nil
}

// CreateVM registers a sandbox and its pod's shape; like CAA it boots
// nothing. Bad annotations are refused here, so StartVM never starts a VM
// from them.
func (s *Service) CreateVM(ctx context.Context, req *hypervisor.CreateVMRequest) (*hypervisor.CreateVMResponse, error) {
	sid := req.GetId()
	if err := checkSandboxID(sid); err != nil {
		return nil, err
	}
	pod, err := parseAnnotations(req.GetAnnotations())
	if err != nil {
		s.log.Warn("CreateVM refused", "sandbox", sid, "error", err)
		return nil, status.Errorf(codes.InvalidArgument, "CreateVM %s: %v", sid, err)
	}
	apf, err := json.Marshal(apfConfig{PodName: pod.name, PodNamespace: pod.namespace})
	if err != nil {
		return nil, fmt.Errorf("CreateVM %s: encoding %s: %w", sid, apfConfigPath, err)
	}
	sb := &sandbox{
		id:          sid,
		pod:         pod,
		netns:       req.GetNetworkNamespacePath(),
		dir:         filepath.Join(s.podsDir, sid),
		cloudConfig: &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: apfConfigPath, Content: string(apf)}}},
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Errorf(codes.Unavailable, "CreateVM %s: the adaptor is shutting down; retry against the new adaptor", sid)
	}
	if _, ok := s.sandboxes[sid]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "CreateVM %s: sandbox already exists; StopVM it before creating it again", sid)
	}
	// The shim's agent socket lives in the sandbox's directory, as in CAA.
	if err := os.MkdirAll(sb.dir, 0o750); err != nil {
		return nil, fmt.Errorf("CreateVM %s: creating the sandbox directory (check -pods-dir is writable): %w", sid, err)
	}
	s.sandboxes[sid] = sb
	if req.GetAnnotations()[annotations.InitData] != "" {
		// CAA writes it to the podVM as /run/peerpod/initdata; this
		// adaptor tests provisioning only and does not.
		s.log.Warn("cc_init_data annotation ignored: this adaptor does not deliver initdata", "sandbox", sid)
	}
	s.log.Info("sandbox created", "sandbox", sid, "pod", pod.name, "namespace", pod.namespace,
		"instanceType", pod.spec.InstanceType, "vcpus", pod.spec.VCPUs, "memoryMiB", pod.spec.Memory,
		"gpus", pod.spec.GPUs, "gpuModel", pod.gpuModel, "image", pod.spec.Image, "netns", sb.netns)
	return &hypervisor.CreateVMResponse{AgentSocketPath: filepath.Join(sb.dir, AgentSocketName)}, nil
}

// apfConfig is the part of CAA's agent-protocol-forwarder configuration
// this adaptor knows: the pod's identity (it does no pod networking).
type apfConfig struct {
	PodName      string `json:"pod-name"`
	PodNamespace string `json:"pod-namespace"`
}

// StartVM creates the sandbox's podVM with the pod name and sandbox ID, as
// CAA does. A second StartVM of a started sandbox is a no-op.
func (s *Service) StartVM(ctx context.Context, req *hypervisor.StartVMRequest) (*hypervisor.StartVMResponse, error) {
	sid := req.GetId()
	sb, err := s.lookup("StartVM", sid)
	if err != nil {
		return nil, err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if sb.removed {
		return nil, status.Errorf(codes.NotFound, "StartVM %s: the sandbox was stopped while this call waited; CreateVM it again", sid)
	}
	if s.isClosed() {
		return nil, status.Errorf(codes.Unavailable, "StartVM %s: the adaptor is shutting down; retry against the new adaptor", sid)
	}
	if sb.started {
		return &hypervisor.StartVMResponse{}, nil
	}
	inst, err := s.prov.CreateInstance(ctx, sb.pod.name, sid, sb.cloudConfig, sb.pod.spec)
	if inst != nil && inst.ID != "" {
		// Even a failed create may leave a VM; remember it for StopVM.
		sb.instance = inst
	}
	if err != nil {
		s.log.Error("StartVM failed", "sandbox", sid, "pod", sb.pod.name, "error", err)
		return nil, fmt.Errorf("StartVM %s: creating the podVM of pod %s/%s: %w", sid, sb.pod.namespace, sb.pod.name, err)
	}
	if inst == nil || inst.ID == "" || len(inst.IPs) == 0 {
		// CAA dials IPs[0]; a VM without one cannot host the pod.
		return nil, fmt.Errorf("StartVM %s: the provider returned podVM %+v without an ID or IP address; this is a provider bug", sid, inst)
	}
	if s.records == nil {
		// CAA logs the same and runs on without PeerPods.
		s.noRecords.Do(func() {
			s.log.Warn("no Kubernetes API (no -kubeconfig, not in a pod): PeerPods are not recorded, so the reaper cannot tell this adaptor's VMs in use")
		})
	} else {
		// As CAA: after the create returned, and a failure is only
		// logged (cloud.go StartVM, OwnPeerPod).
		rec, err := s.records.Own(context.WithoutCancel(ctx), sb.pod.namespace, sb.pod.name, inst.ID)
		if err != nil {
			s.log.Error("failed to create PeerPod", "sandbox", sid, "instance", inst.ID, "error", err)
		}
		sb.record = rec
	}
	sb.started = true
	s.log.Info("podVM created", "sandbox", sid, "pod", sb.pod.name, "instance", inst.Name, "id", inst.ID, "ip", inst.IPs[0].String())
	return &hypervisor.StartVMResponse{}, nil
}

// StopVM deletes the sandbox's podVM and forgets the sandbox. When the
// delete fails the sandbox is kept, so a retry or the adaptor's shutdown
// deletes the VM instead of leaking it (CAA forgets it either way).
func (s *Service) StopVM(ctx context.Context, req *hypervisor.StopVMRequest) (*hypervisor.StopVMResponse, error) {
	sid := req.GetId()
	sb, err := s.lookup("StopVM", sid)
	if err != nil {
		return nil, err
	}
	if err := s.stop(ctx, sb); err != nil {
		return nil, fmt.Errorf("StopVM %s: %w", sid, err)
	}
	return &hypervisor.StopVMResponse{}, nil
}

// stop deletes sb's VM, if any, and removes sb from the table.
func (s *Service) stop(ctx context.Context, sb *sandbox) error {
	if !sb.op.TryLock() {
		// Said once, before waiting: a StopVM that seems slow is waiting
		// for the StartVM in flight, whose VM it then deletes.
		s.log.Info("StopVM waits for the sandbox's StartVM in flight", "sandbox", sb.id)
		sb.op.Lock()
	}
	defer sb.op.Unlock()
	if sb.removed {
		return nil
	}
	if sb.instance != nil {
		if err := s.prov.DeleteInstance(ctx, sb.instance.ID); err != nil {
			s.log.Error("deleting podVM failed", "sandbox", sb.id, "instance", sb.instance.ID, "error", err)
			return fmt.Errorf("deleting podVM %s of pod %s/%s (kept for a retry): %w", sb.instance.ID, sb.pod.namespace, sb.pod.name, err)
		}
		s.log.Info("podVM deleted", "sandbox", sb.id, "instance", sb.instance.ID)
		if sb.record != "" {
			if err := s.records.Release(ctx, sb.pod.namespace, sb.record); err != nil {
				s.log.Error("failed to release PeerPod", "sandbox", sb.id, "peerpod", sb.record, "error", err)
			}
		}
		sb.instance, sb.started, sb.record = nil, false, ""
	}
	sb.removed = true
	s.mu.Lock()
	delete(s.sandboxes, sb.id)
	s.mu.Unlock()
	if err := os.RemoveAll(sb.dir); err != nil {
		s.log.Warn("removing the sandbox directory failed", "dir", sb.dir, "error", err)
	}
	return nil
}

// Shutdown refuses new sandboxes and leaves the podVMs of the live ones
// running, as upstream CAA does at SIGTERM: it deletes nothing there
// (server.Shutdown only tears the provider down; clean-up of what is left
// is peerpod-ctrl's job; pkg/adaptor/server.go, v0.22.0). The reaper
// collects them once their pods are gone. It returns the VMs left.
func (s *Service) Shutdown(context.Context) []string {
	s.mu.Lock()
	s.closed = true
	live := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		live = append(live, sb)
	}
	s.mu.Unlock()
	sort.Slice(live, func(i, j int) bool { return live[i].id < live[j].id })
	var left []string
	for _, sb := range live {
		sb.op.Lock()
		if sb.instance != nil {
			left = append(left, sb.instance.ID)
		}
		sb.op.Unlock()
	}
	if len(left) > 0 {
		s.log.Warn("shutting down with live sandboxes: their podVMs keep running, as with upstream CAA; the reaper collects them once their pods are gone", "podVMs", left)
	}
	return left
}

func (s *Service) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Sandboxes returns the IDs of the live sandboxes, sorted.
func (s *Service) Sandboxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (s *Service) lookup(method, sid string) (*sandbox, error) {
	if sid == "" {
		return nil, status.Errorf(codes.InvalidArgument, "%s: empty sandbox id; pass the id CreateVM was called with", method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[sid]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s %s: sandbox does not exist; CreateVM it first (or it was already stopped)", method, sid)
	}
	return sb, nil
}

func checkSandboxID(sid string) error {
	if sid == "" {
		return status.Error(codes.InvalidArgument, "CreateVM: empty sandbox id; the shim must send the sandbox ID in id")
	}
	if !sandboxIDRE.MatchString(sid) {
		return status.Errorf(codes.InvalidArgument, "CreateVM: sandbox id %q: want letters, digits, '_', '.' or '-' (at most 128, not starting with a symbol), as kata's hex IDs are", sid)
	}
	return nil
}
