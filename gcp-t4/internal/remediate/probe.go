package remediate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// HandlerState is what the running containerd has loaded for a handler.
type HandlerState struct {
	Known       bool   // false when nothing could tell (no socket, 1.x without CRI)
	Loaded      bool   // the handler is configured in the running containerd
	Snapshotter string // its snapshotter as loaded, when reported
	Discard     *bool  // discard_unpacked_layers as loaded, when reported
}

// Probe asks the running containerd.
type Probe interface {
	RuntimeVersion(ctx context.Context) (string, error)
	Handler(ctx context.Context, name string) (HandlerState, error)
}

// CRI is a Probe over containerd's CRI socket (the host's
// /run/containerd/containerd.sock, mounted into the pod).
type CRI struct {
	Socket  string
	Timeout time.Duration
}

func (c CRI) call(ctx context.Context, f func(context.Context, runtimeapi.RuntimeServiceClient) error) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial CRI socket %s: %w", c.Socket, err)
	}
	defer conn.Close()
	return f(ctx, runtimeapi.NewRuntimeServiceClient(conn))
}

// RuntimeVersion returns containerd's version as CRI reports it.
func (c CRI) RuntimeVersion(ctx context.Context) (string, error) {
	var v string
	err := c.call(ctx, func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		resp, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
		if err != nil {
			return fmt.Errorf("CRI Version on %s: %w", c.Socket, err)
		}
		v = resp.RuntimeVersion
		return nil
	})
	return v, err
}

// Handler reads Status(verbose): containerd 2.x lists RuntimeHandlers, and
// every version puts its effective CRI config in info["config"] (what
// `crictl info` prints).
func (c CRI) Handler(ctx context.Context, name string) (HandlerState, error) {
	var st HandlerState
	err := c.call(ctx, func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		resp, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			return fmt.Errorf("CRI Status on %s: %w", c.Socket, err)
		}
		st = handlerFromStatus(resp, name)
		return nil
	})
	return st, err
}

// StatusConfig is the part of the CRI verbose config the checks read.
type StatusConfig struct {
	Containerd struct {
		Runtimes map[string]struct {
			RuntimeType string `json:"runtimeType"`
			Snapshotter string `json:"snapshotter"`
		} `json:"runtimes"`
		DiscardUnpackedLayers *bool `json:"discardUnpackedLayers"`
	} `json:"containerd"`
	CNI struct {
		BinDir  string   `json:"binDir"`
		BinDirs []string `json:"binDirs"`
	} `json:"cni"`
}

// ParseStatusConfig decodes info["config"] of a verbose CRI status.
func ParseStatusConfig(resp *runtimeapi.StatusResponse) (StatusConfig, error) {
	var cfg StatusConfig
	raw, ok := resp.GetInfo()["config"]
	if !ok {
		return cfg, fmt.Errorf("CRI status has no config in its verbose info")
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return cfg, fmt.Errorf("decode CRI status config: %w", err)
	}
	return cfg, nil
}

func handlerFromStatus(resp *runtimeapi.StatusResponse, name string) HandlerState {
	st := HandlerState{}
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetName() == name {
			st.Known, st.Loaded = true, true
		}
	}
	if len(resp.GetRuntimeHandlers()) > 0 {
		st.Known = true
	}
	if cfg, err := ParseStatusConfig(resp); err == nil {
		st.Known = true
		if rt, ok := cfg.Containerd.Runtimes[name]; ok {
			st.Loaded = true
			st.Snapshotter = rt.Snapshotter
		}
		st.Discard = cfg.Containerd.DiscardUnpackedLayers
	}
	return st
}

// NodeHandlers is the fallback without a CRI socket: the names kubelet
// publishes in node.status.runtimeHandlers (containerd 2.x, Kubernetes
// 1.30 and later).
func NodeHandlers(names []string, name string) HandlerState {
	if len(names) == 0 {
		return HandlerState{}
	}
	return HandlerState{Known: true, Loaded: slices.Contains(names, name)}
}
