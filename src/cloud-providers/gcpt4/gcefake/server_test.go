// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// TestPanickingHandlerDoesNotWedgeTheFake: net/http recovers a handler's
// panic, so the fake must release s.mu on that path too; with the lock
// still held, the request after it would block until its context expires.
func TestPanickingHandlerDoesNotWedgeTheFake(t *testing.T) {
	boom := func(*Server, *reqCtx) (proto.Message, error) { panic("handler bug") }
	routes := append(routeTable(),
		route{method: http.MethodGet, kind: "test.panic", path: "panic", h: boom},
		route{method: http.MethodGet, kind: "test.panicUnlocked", path: "panic-unlocked", h: boom, unlocked: true},
	)
	s := newServer(routes)
	t.Cleanup(func() {
		// Close waits for in-flight requests, which a wedged fake never
		// finishes: then fail without hanging the suite.
		if !s.mu.TryLock() {
			t.Error("s.mu is still held after the requests ended")
			return
		}
		s.mu.Unlock()
		s.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zones := newClient(t, s, compute.NewZonesRESTClient)

	// An operation whose completion panics: the first request below, the
	// long-poll, settles it while it looks at operations under s.mu itself.
	s.mu.Lock()
	rec := s.newOperation(zoneA, "insert", "ghost", 1, "")
	rec.onDone = func() { panic("completion bug") }
	s.mu.Unlock()

	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "zones/" + zoneA + "/operations/" + rec.op.GetName() + "/wait"},
		{http.MethodGet, "panic"},
		{http.MethodGet, "panic-unlocked"},
	} {
		mustDropConnection(ctx, t, s, req.method, req.path)
		if _, err := zones.Get(ctx, &computepb.GetZoneRequest{Project: testProject, Zone: zoneA}); err != nil {
			t.Fatalf("zones.get after a panic in %s %s: %v", req.method, req.path, err)
		}
	}
	for kind, want := range map[string]int{"test.panic": 1, "test.panicUnlocked": 1, "zoneOperations.wait": 1, "zones.get": 3} {
		if n := s.CountCalls(kind); n != want {
			t.Errorf("%s calls = %d, want %d", kind, n, want)
		}
	}
}

// mustDropConnection sends one request whose handler panics: the client
// sees the connection closed, not a response.
func mustDropConnection(ctx context.Context, t *testing.T, s *Server, method, path string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+pathBase+testProject+"/"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh connection each time: net/http retries an idempotent request
	// once when a reused connection drops, which would count it twice.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("%s %s: HTTP %d, want the connection dropped by the recovered panic", method, path, resp.StatusCode)
	}
}

func TestAwaitCalls(t *testing.T) {
	s := newFake(t)
	ctx := testCtx(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.AwaitCalls(done, "instances.insert", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitCalls with nothing recorded = %v, want context.Canceled", err)
	}
	if err := s.AwaitLongPolls(done, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitLongPolls with none parked = %v, want context.Canceled", err)
	}
	res := make(chan error, 1)
	go func() { res <- s.AwaitCalls(ctx, "instances.insert", 2) }()
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("a1", zoneA, 1))
	mustInsert(t, c, zoneA, t4Instance("a2", zoneA, 1))
	if err := <-res; err != nil {
		t.Fatalf("AwaitCalls after two inserts: %v", err)
	}
}
