// Package shimclient is the kata shim's side of the remote-hypervisor
// protocol: it calls CreateVM, StartVM, StopVM and Version the way kata's
// remote hypervisor (virtcontainers/remote.go) does, with the annotations
// and timeouts it uses, so tests and the demo cross the same boundary a
// real pod does.
package shimclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/caa-gcp-t4/gcp-t4/internal/hypervisor"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
)

// Kata's defaults: StartVM waits at least minTimeout, and
// configuration-remote.toml sets remote_hypervisor_timeout to 600 s.
const (
	minTimeout     = 60 * time.Second
	DefaultTimeout = 600 * time.Second
)

// Sandbox is a pod as the shim's hypervisor config holds it after the
// webhook turned its resource requests into annotations.
type Sandbox struct {
	Name      string
	Namespace string
	// MachineType and Image are the machine_type and image annotations,
	// empty when the pod sets none.
	MachineType string
	Image       string
	VCPUs       uint32
	MemoryMiB   uint32
	GPUs        uint32
	GPUModel    string
	InitData    string
}

// Annotations are exactly what kata puts in CreateVMRequest: every key,
// empty strings included, and numbers in decimal (default_gpus "0" for a
// pod without GPUs).
func (s Sandbox) Annotations() map[string]string {
	return map[string]string{
		annotations.SandboxName:      s.Name,
		annotations.SandboxNamespace: s.Namespace,
		annotations.MachineType:      s.MachineType,
		annotations.Image:            s.Image,
		annotations.VCPUs:            strconv.FormatUint(uint64(s.VCPUs), 10),
		annotations.Memory:           strconv.FormatUint(uint64(s.MemoryMiB), 10),
		annotations.InitData:         s.InitData,
		annotations.GPUs:             strconv.FormatUint(uint64(s.GPUs), 10),
		annotations.GPUModel:         s.GPUModel,
	}
}

// Client calls a remote-hypervisor service on a unix socket. Like kata it
// opens a connection per call, so it holds nothing between calls.
type Client struct {
	socket string
	// timeout is remote_hypervisor_timeout.
	timeout time.Duration
}

// New returns a client for the service on socketPath; timeout is kata's
// remote_hypervisor_timeout (DefaultTimeout when 0).
func New(socketPath string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{socket: socketPath, timeout: timeout}
}

// call opens a connection, runs fn with a client on it, and closes it.
func (c *Client) call(ctx context.Context, method string, fn func(hypervisor.HypervisorService) error) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return fmt.Errorf("%s: connecting to the remote hypervisor at %s (is the adaptor running and is this kata's remote_hypervisor_socket?): %w", method, c.socket, err)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	if err := fn(hypervisor.NewHypervisorClient(client)); err != nil {
		return fmt.Errorf("%s: remote hypervisor call failed: %w", method, err)
	}
	return nil
}

// CreateVM registers sandbox id with the pod's annotations and returns the
// agent socket path, which kata requires to be non-empty.
func (c *Client) CreateVM(ctx context.Context, id, netnsPath string, sb Sandbox) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var socket string
	err := c.call(ctx, "CreateVM", func(hv hypervisor.HypervisorService) error {
		res, err := hv.CreateVM(ctx, &hypervisor.CreateVMRequest{Id: id, Annotations: sb.Annotations(), NetworkNamespacePath: netnsPath})
		if err != nil {
			return err
		}
		socket = res.GetAgentSocketPath()
		return nil
	})
	if err != nil {
		return "", err
	}
	if socket == "" {
		return "", errors.New("CreateVM: the remote hypervisor returned no agent socket path")
	}
	return socket, nil
}

// StartVM starts sandbox id, waiting up to timeout but never less than the
// client's remote_hypervisor_timeout (at least a minute), as kata does.
func (c *Client) StartVM(ctx context.Context, id string, timeout time.Duration) error {
	if floor := max(c.timeout, minTimeout); timeout < floor {
		timeout = floor
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.call(ctx, "StartVM", func(hv hypervisor.HypervisorService) error {
		_, err := hv.StartVM(ctx, &hypervisor.StartVMRequest{Id: id})
		return err
	})
}

// StopVM stops sandbox id within remote_hypervisor_timeout.
func (c *Client) StopVM(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.call(ctx, "StopVM", func(hv hypervisor.HypervisorService) error {
		_, err := hv.StopVM(ctx, &hypervisor.StopVMRequest{Id: id})
		return err
	})
}

// Version returns the service's version string.
func (c *Client) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var v string
	err := c.call(ctx, "Version", func(hv hypervisor.HypervisorService) error {
		res, err := hv.Version(ctx, &hypervisor.VersionRequest{})
		if err != nil {
			return err
		}
		v = res.GetVersion()
		return nil
	})
	return v, err
}
