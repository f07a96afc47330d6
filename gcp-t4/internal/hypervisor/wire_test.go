package hypervisor

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The fixtures below are built from kata's field numbers, not from the
// generated code, so renumbering or retyping a field in hypervisor.proto
// breaks these tests even though both ends of our own code would agree.

func wireString(num protowire.Number, s string) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func wireMessage(num protowire.Number, parts ...[]byte) []byte {
	body := bytes.Join(parts, nil)
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

// mapEntry is one map<string,string> entry: key is field 1, value field 2.
func mapEntry(num protowire.Number, key, value string) []byte {
	return wireMessage(num, wireString(1, key), wireString(2, value))
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestWireEncodingMatchesKataFieldNumbers(t *testing.T) {
	const sid = "5f1c0a6e9b2d4c7fa1e3b5d7c9f0e2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1d3e5"
	cases := []struct {
		name string
		msg  proto.Message
		want []byte
	}{
		{
			name: "CreateVMRequest",
			msg: &CreateVMRequest{
				Id: sid,
				Annotations: map[string]string{
					"io.katacontainers.config.hypervisor.default_gpus": "1",
					"io.kubernetes.cri.sandbox-name":                   "mistral-tp-0",
				},
				NetworkNamespacePath: "/var/run/netns/cni-1234",
			},
			// Deterministic marshalling sorts map entries by key.
			want: concat(
				wireString(1, sid),
				mapEntry(2, "io.katacontainers.config.hypervisor.default_gpus", "1"),
				mapEntry(2, "io.kubernetes.cri.sandbox-name", "mistral-tp-0"),
				wireString(3, "/var/run/netns/cni-1234"),
			),
		},
		{
			name: "CreateVMResponse",
			msg:  &CreateVMResponse{AgentSocketPath: "/run/peerpod/pods/" + sid + "/agent.ttrpc"},
			want: wireString(1, "/run/peerpod/pods/"+sid+"/agent.ttrpc"),
		},
		{name: "StartVMRequest", msg: &StartVMRequest{Id: sid}, want: wireString(1, sid)},
		{name: "StartVMResponse", msg: &StartVMResponse{}, want: nil},
		{name: "StopVMRequest", msg: &StopVMRequest{Id: sid}, want: wireString(1, sid)},
		{name: "StopVMResponse", msg: &StopVMResponse{}, want: nil},
		{name: "VersionRequest", msg: &VersionRequest{Version: "3.23.0"}, want: wireString(1, "3.23.0")},
		{name: "VersionResponse", msg: &VersionResponse{Version: "0.0.0"}, want: wireString(1, "0.0.0")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := proto.MarshalOptions{Deterministic: true}.Marshal(tc.msg)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("encoding differs from kata's field numbers\n got: %x\nwant: %x", got, tc.want)
			}
			// The shim's bytes must decode into the same message, too.
			back := tc.msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(tc.want, back); err != nil {
				t.Fatalf("unmarshal fixture: %v", err)
			}
			if !proto.Equal(back, tc.msg) {
				t.Errorf("fixture decodes to %v, want %v", back, tc.msg)
			}
		})
	}
}

// TestDescriptorMatchesKata pins the names ttrpc puts on the wire (service
// and method) and the full message and field schema.
func TestDescriptorMatchesKata(t *testing.T) {
	fd := File_hypervisor_proto
	if fd.Package() != "hypervisor" {
		t.Errorf("proto package %q, want hypervisor", fd.Package())
	}
	if fd.Services().Len() != 1 {
		t.Fatalf("%d services, want 1", fd.Services().Len())
	}
	svc := fd.Services().Get(0)
	if svc.FullName() != "hypervisor.Hypervisor" {
		t.Errorf("service %q, want hypervisor.Hypervisor", svc.FullName())
	}
	wantMethods := map[string][2]string{
		"CreateVM": {"hypervisor.CreateVMRequest", "hypervisor.CreateVMResponse"},
		"StartVM":  {"hypervisor.StartVMRequest", "hypervisor.StartVMResponse"},
		"StopVM":   {"hypervisor.StopVMRequest", "hypervisor.StopVMResponse"},
		"Version":  {"hypervisor.VersionRequest", "hypervisor.VersionResponse"},
	}
	if svc.Methods().Len() != len(wantMethods) {
		t.Errorf("%d methods, want %d", svc.Methods().Len(), len(wantMethods))
	}
	for i := 0; i < svc.Methods().Len(); i++ {
		m := svc.Methods().Get(i)
		want, ok := wantMethods[string(m.Name())]
		if !ok {
			t.Errorf("unexpected method %s", m.Name())
			continue
		}
		if string(m.Input().FullName()) != want[0] || string(m.Output().FullName()) != want[1] {
			t.Errorf("method %s: %s -> %s, want %s -> %s", m.Name(), m.Input().FullName(), m.Output().FullName(), want[0], want[1])
		}
		if m.IsStreamingClient() || m.IsStreamingServer() {
			t.Errorf("method %s must be unary", m.Name())
		}
	}

	type field struct {
		name string
		num  protoreflect.FieldNumber
		kind string
	}
	wantMessages := map[string][]field{
		"CreateVMRequest":  {{"id", 1, "string"}, {"annotations", 2, "map<string,string>"}, {"networkNamespacePath", 3, "string"}},
		"CreateVMResponse": {{"agentSocketPath", 1, "string"}},
		"StartVMRequest":   {{"id", 1, "string"}},
		"StartVMResponse":  nil,
		"StopVMRequest":    {{"id", 1, "string"}},
		"StopVMResponse":   nil,
		"VersionRequest":   {{"version", 1, "string"}},
		"VersionResponse":  {{"version", 1, "string"}},
	}
	if fd.Messages().Len() != len(wantMessages) {
		t.Errorf("%d messages, want %d", fd.Messages().Len(), len(wantMessages))
	}
	for name, fields := range wantMessages {
		md := fd.Messages().ByName(protoreflect.Name(name))
		if md == nil {
			t.Errorf("message %s missing", name)
			continue
		}
		if md.Fields().Len() != len(fields) {
			t.Errorf("%s has %d fields, want %d", name, md.Fields().Len(), len(fields))
		}
		for _, f := range fields {
			fdesc := md.Fields().ByName(protoreflect.Name(f.name))
			if fdesc == nil {
				t.Errorf("%s.%s missing", name, f.name)
				continue
			}
			kind := fdesc.Kind().String()
			if fdesc.IsMap() {
				kind = "map<" + fdesc.MapKey().Kind().String() + "," + fdesc.MapValue().Kind().String() + ">"
			}
			if fdesc.Number() != f.num || kind != f.kind || fdesc.Cardinality() == protoreflect.Required {
				t.Errorf("%s.%s = %s #%d, want %s #%d", name, f.name, kind, fdesc.Number(), f.kind, f.num)
			}
		}
	}
}

// recorder is a HypervisorService that keeps what it was sent.
type recorder struct {
	mu  sync.Mutex
	got []proto.Message
}

func (r *recorder) keep(m proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
}

func (r *recorder) CreateVM(_ context.Context, req *CreateVMRequest) (*CreateVMResponse, error) {
	r.keep(req)
	return &CreateVMResponse{AgentSocketPath: "/pods/" + req.Id + "/agent.ttrpc"}, nil
}

func (r *recorder) StartVM(_ context.Context, req *StartVMRequest) (*StartVMResponse, error) {
	r.keep(req)
	return &StartVMResponse{}, nil
}

func (r *recorder) StopVM(_ context.Context, req *StopVMRequest) (*StopVMResponse, error) {
	r.keep(req)
	return nil, errors.New("sandbox " + req.Id + " does not exist")
}

func (r *recorder) Version(_ context.Context, req *VersionRequest) (*VersionResponse, error) {
	r.keep(req)
	return &VersionResponse{Version: "v-test"}, nil
}

// shortSocketDir keeps the socket path under the 108-byte sun_path limit,
// which t.TempDir's test-named paths can exceed.
func shortSocketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestRoundTripOverUnixSocket(t *testing.T) {
	sock := filepath.Join(shortSocketDir(t), "hypervisor.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	RegisterHypervisorService(srv, rec)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, ttrpc.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})

	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	hv := NewHypervisorClient(client)

	create := &CreateVMRequest{Id: "sb-1", Annotations: map[string]string{"a": "1", "b": ""}, NetworkNamespacePath: "/var/run/netns/x"}
	cres, err := hv.CreateVM(ctx, create)
	if err != nil || cres.GetAgentSocketPath() != "/pods/sb-1/agent.ttrpc" {
		t.Fatalf("CreateVM: %v, %v", cres, err)
	}
	if _, err := hv.StartVM(ctx, &StartVMRequest{Id: "sb-1"}); err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	_, err = hv.StopVM(ctx, &StopVMRequest{Id: "sb-2"})
	if err == nil || !strings.Contains(err.Error(), "sandbox sb-2 does not exist") {
		t.Fatalf("StopVM: want the server's error, got %v", err)
	}
	vres, err := hv.Version(ctx, &VersionRequest{Version: "shim"})
	if err != nil || vres.GetVersion() != "v-test" {
		t.Fatalf("Version: %v, %v", vres, err)
	}

	want := []proto.Message{create, &StartVMRequest{Id: "sb-1"}, &StopVMRequest{Id: "sb-2"}, &VersionRequest{Version: "shim"}}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != len(want) {
		t.Fatalf("server saw %d calls, want %d", len(rec.got), len(want))
	}
	for i := range want {
		if !proto.Equal(rec.got[i], want[i]) {
			t.Errorf("call %d: server got %v, want %v", i, rec.got[i], want[i])
		}
	}
}
