// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// guestGet is one request to a guest metadata server as a guest makes it.
func guestGet(t *testing.T, ctx context.Context, base, path string, hdr bool) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hdr {
		req.Header.Set("Metadata-Flavor", "Google")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Metadata-Flavor") != "Google" {
		t.Errorf("GET %s: answer without Metadata-Flavor: Google", path)
	}
	return resp.StatusCode, string(b), resp.Header.Get("ETag")
}

// What a podVM's guest reads before GCE stops it: NONE and FALSE while
// nothing comes; a hanging wait_for_change that returns with the notice;
// the notice while the VM still runs, then the stop; nothing served once
// the VM is off; a restart reads NONE and FALSE again.
func TestGuestMetadataNotice(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now))
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("gpu", zoneA, 1))
	mustInsert(t, c, zoneA, spot("spot", "STOP"))
	gpu := httptest.NewServer(s.GuestMetadata(zoneA, "gpu"))
	defer gpu.Close()
	sp := httptest.NewServer(s.GuestMetadata(zoneA, "spot"))
	defer sp.Close()
	ctx := testCtx(t)
	const me, pre = "/computeMetadata/v1/instance/maintenance-event", "/computeMetadata/v1/instance/preempted"

	if code, _, _ := guestGet(t, ctx, gpu.URL, me, false); code != http.StatusForbidden {
		t.Fatalf("without Metadata-Flavor: %d, want 403", code)
	}
	code, v, etag := guestGet(t, ctx, gpu.URL, me, true)
	if code != 200 || v != "NONE" || etag == "" {
		t.Fatalf("maintenance-event before any notice: %d %q etag %q", code, v, etag)
	}
	if _, v, _ := guestGet(t, ctx, sp.URL, pre, true); v != "FALSE" {
		t.Fatalf("preempted before any notice: %q", v)
	}
	if code, _, _ := guestGet(t, ctx, gpu.URL, "/computeMetadata/v1/instance/attributes/no-such", true); code != http.StatusNotFound {
		t.Fatalf("an attribute that is not there: %d", code)
	}
	if err := s.Notice(zoneA, "gpu", Preemption); err == nil {
		t.Fatal("a standard VM got a preemption notice")
	}
	if err := s.Notice(zoneA, "gpu", HostError); err == nil {
		t.Fatal("a host error came with notice")
	}

	// A guest hangs on the value; the notice ends its wait.
	type answer struct {
		v, etag string
	}
	got := make(chan answer, 1)
	go func() {
		_, v, e := guestGet(t, ctx, gpu.URL, me+"?wait_for_change=true&last_etag="+etag, true)
		got <- answer{v, e}
	}()
	// A wait with a short timeout_sec on an unchanged value returns it.
	if _, v, e := guestGet(t, ctx, gpu.URL, me+"?wait_for_change=true&timeout_sec=1&last_etag="+etag, true); v != "NONE" || e != etag {
		t.Fatalf("timed-out wait: %q %q", v, e)
	}
	if err := s.Notice(zoneA, "gpu", HostMaintenance); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.v != "TERMINATE_ON_HOST_MAINTENANCE" || a.etag == etag {
		t.Fatalf("the wait returned %q etag %q, want TERMINATE_ON_HOST_MAINTENANCE with a new etag", a.v, a.etag)
	}
	wantStatus(t, c, "gpu", "RUNNING") // the notice comes ahead of the stop
	// A wait with an old etag returns the new value at once.
	if _, v, _ := guestGet(t, ctx, gpu.URL, me+"?wait_for_change=true&last_etag="+etag, true); v != "TERMINATE_ON_HOST_MAINTENANCE" {
		t.Fatalf("stale-etag wait: %q", v)
	}

	// Preemption: the spot VM's guest reads TRUE while it stops.
	s.SetOperationLatency(30 * time.Second)
	if err := s.Interrupt(zoneA, "spot", Preemption); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, c, "spot", "STOPPING")
	if _, v, _ := guestGet(t, ctx, sp.URL, pre, true); v != "TRUE" {
		t.Fatalf("preempted while the preemption runs: %q", v)
	}
	if err := s.Interrupt(zoneA, "gpu", HostMaintenance); err != nil {
		t.Fatal(err)
	}
	// A guest waiting when the hard off comes: its wait ends with the VM,
	// whether it was parked before the stop or arrived after it, and a VM
	// that is off serves nothing.
	waitEnd := make(chan int, 1)
	go func() {
		code, _, _ := guestGet(t, ctx, sp.URL, pre+"?wait_for_change=true", true)
		waitEnd <- code
	}()
	clk.Advance(time.Minute)
	wantStatus(t, c, "spot", "TERMINATED")
	wantStatus(t, c, "gpu", "TERMINATED")
	if code := <-waitEnd; code != http.StatusServiceUnavailable {
		t.Fatalf("a wait across the hard off ended with %d, want 503", code)
	}
	if code, _, _ := guestGet(t, ctx, gpu.URL, me, true); code != http.StatusServiceUnavailable {
		t.Fatalf("a TERMINATED VM's metadata answered %d, want 503", code)
	}

	// Started again: nothing coming.
	if _, err := c.Start(ctx, &computepb.StartInstanceRequest{Project: testProject, Zone: zoneA, Instance: "gpu"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	wantStatus(t, c, "gpu", "RUNNING")
	if _, v, _ := guestGet(t, ctx, gpu.URL, me, true); v != "NONE" {
		t.Fatalf("maintenance-event after a restart: %q", v)
	}
}
