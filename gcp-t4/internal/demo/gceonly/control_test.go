package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"google.golang.org/protobuf/proto"
)

func TestControlInterrupts(t *testing.T) {
	fake := gcefake.New()
	defer fake.Close()
	const zone = "us-central1-a"
	spot := func() *computepb.Scheduling {
		return &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("DELETE")}
	}
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String("spot-1"), MachineType: proto.String("e2-medium"), Scheduling: spot()})
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String("spot-2"), MachineType: proto.String("e2-medium"), Scheduling: spot()})
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String("standard"), MachineType: proto.String("e2-medium")})
	srv := httptest.NewServer(controlHandler(fake))
	defer srv.Close()

	post := func(method string, q url.Values) (int, string) {
		req, err := http.NewRequest(method, srv.URL+"/test-only/interrupt?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, c := range []struct {
		method                string
		instance, event, want string
		code                  int
	}{
		{http.MethodPost, "spot-1", "preemption", "preemption of us-central1-a/spot-1", http.StatusOK},
		{http.MethodPost, "spot-2", "host-error", "host error of us-central1-a/spot-2", http.StatusOK},
		{http.MethodPost, "standard", "preemption", "never preempted", http.StatusConflict},
		{http.MethodPost, "nothere", "host-error", "no such instance", http.StatusConflict},
		{http.MethodPost, "standard", "meteor", "want zone, instance and event", http.StatusBadRequest},
		{http.MethodGet, "standard", "host-error", "POST only", http.StatusMethodNotAllowed},
	} {
		code, body := post(c.method, url.Values{"zone": {zone}, "instance": {c.instance}, "event": {c.event}})
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %q, want %d and %q", c.method, c.instance, c.event, code, body, c.code, c.want)
		}
	}
	// GCE's own operations, as the provider reads the cause from them.
	types := map[string]string{}
	for _, op := range fake.Operations(zone) {
		types[op.GetTargetLink()[strings.LastIndex(op.GetTargetLink(), "/")+1:]] += op.GetOperationType() + " "
	}
	if !strings.Contains(types["spot-1"], "compute.instances.preempted") || !strings.Contains(types["spot-2"], "compute.instances.hostError") {
		t.Errorf("operations by instance: %v; want spot-1 preempted, spot-2 hostError", types)
	}
	if strings.Contains(types["standard"], "compute.instances.") {
		t.Errorf("the standard VM got an operation: %v", types["standard"])
	}
}

func TestControlListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.0.0.1:0", "localhost"} {
		if l, err := listenLoopback(addr); err == nil {
			l.Close()
			t.Errorf("listenLoopback(%q) listened; want it refused", addr)
		}
	}
	l, err := listenLoopback("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
