// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// opLatency is how long an operation runs on the fake clock of the tests
// that use one; only advancing that clock completes it, so its size only
// has to be larger than nothing.
const opLatency = time.Minute

// TestFaultMatrix drives one create through each fault GCE users meet and
// checks the outcome and, always, that no instance is left behind once the
// adaptor has deleted what it was given. The fake runs on a clock only the
// case's drive advances, once the condition it waits for holds.
func TestFaultMatrix(t *testing.T) {
	cases := []struct {
		name  string
		zones []string
		setup func(*gcefake.Server)
		// ctx wraps the create's context (deadlines, cancellation).
		ctx func(context.Context) (context.Context, context.CancelFunc)
		// drive runs beside the create: it ends the create's context or
		// advances the clock when the fake shows the create got there.
		drive   func(context.Context, *gcefake.Server, *gcefake.Clock, context.CancelFunc) error
		wantErr string // "" = success
		// wantZone is where a successful create must land.
		wantZone    string
		wantInserts int
	}{
		{name: "stockout in zone 1", zones: []string{"us-central1-b"},
			setup:    func(f *gcefake.Server) { f.SetStockout("us-central1-a", true) },
			wantZone: "us-central1-b", wantInserts: 2},
		{name: "stockout in all zones", zones: []string{"us-central1-b", "us-central1-f"},
			setup: func(f *gcefake.Server) {
				for _, z := range []string{"us-central1-a", "us-central1-b", "us-central1-f"} {
					f.SetStockout(z, true)
				}
			},
			wantErr: "no GPU capacity", wantInserts: 3},
		{name: "regional quota skips the region", zones: []string{"us-central1-b", "us-east1-c"},
			setup:    func(f *gcefake.Server) { f.SetQuota("us-central1", "NVIDIA_T4_GPUS", 0) },
			wantZone: "us-east1-c", wantInserts: 2},
		{name: "global GPU quota fails fast", zones: []string{"us-central1-b", "us-east1-c"},
			setup:   func(f *gcefake.Server) { f.SetQuota("", "GPUS_ALL_REGIONS", 0) },
			wantErr: "GPUS_ALL_REGIONS", wantInserts: 1},
		{name: "429 burst on insert",
			setup:    func(f *gcefake.Server) { f.FailNext("POST", "instances.insert", 429, 3) },
			wantZone: "us-central1-a", wantInserts: 4},
		{name: "403 rateLimitExceeded on insert",
			setup:    func(f *gcefake.Server) { f.FailNextReason("POST", "instances.insert", 403, "rateLimitExceeded", 2) },
			wantZone: "us-central1-a", wantInserts: 3},
		{name: "503 on insert",
			setup:    func(f *gcefake.Server) { f.FailNext("POST", "instances.insert", 503, 1) },
			wantZone: "us-central1-a", wantInserts: 2},
		{name: "503 on operation wait",
			setup: func(f *gcefake.Server) {
				f.SetOperationLatency(opLatency)
				f.FailNext("POST", "zoneOperations.wait", 503, 2)
			},
			// The third wait gets through and parks on the running insert.
			drive: func(ctx context.Context, f *gcefake.Server, clk *gcefake.Clock, _ context.CancelFunc) error {
				if err := f.AwaitLongPolls(ctx, 1); err != nil {
					return err
				}
				clk.Advance(opLatency)
				return nil
			},
			wantZone: "us-central1-a", wantInserts: 1},
		{name: "503 on get",
			setup:    func(f *gcefake.Server) { f.FailNext("GET", "instances.get", 503, 2) },
			wantZone: "us-central1-a", wantInserts: 1},
		{name: "persistent 503 on get until the deadline deletes the VM",
			// The client itself retries GETs on 503 until the deadline,
			// which passes once it has retried.
			setup: func(f *gcefake.Server) { f.FailNext("GET", "instances.get", 503, 1000) },
			ctx:   expiringContext,
			drive: func(ctx context.Context, f *gcefake.Server, _ *gcefake.Clock, expire context.CancelFunc) error {
				if err := f.AwaitCalls(ctx, "instances.get", 2); err != nil {
					return err
				}
				expire()
				return nil
			},
			wantErr: "deadline exceeded", wantInserts: 1},
		{name: "operation error without HTTP code", zones: []string{"us-central1-b"},
			setup: func(f *gcefake.Server) {
				f.SetSilentOperationFailure(true)
				f.SetStockout("us-central1-a", true)
				f.SetStockout("us-central1-b", true)
			},
			wantErr: "ZONE_RESOURCE_POOL_EXHAUSTED", wantInserts: 2},
		{name: "slow operation past the deadline",
			setup:   func(f *gcefake.Server) { f.SetOperationLatency(opLatency) },
			ctx:     expiringContext,
			drive:   endWaitThenFinishDelete,
			wantErr: "deadline exceeded", wantInserts: 1},
		{name: "cancellation mid-create",
			setup: func(f *gcefake.Server) { f.SetOperationLatency(opLatency) },
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithCancel(ctx)
			},
			drive:   endWaitThenFinishDelete,
			wantErr: "context canceled", wantInserts: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, fake, clk := newClockedProvider(t, func(c *Config) { c.FallbackZones = tc.zones })
			if tc.setup != nil {
				tc.setup(fake)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx(ctx)
			}
			driven := make(chan error, 1)
			driveCtx, stopDrive := context.WithCancel(context.Background())
			if tc.drive != nil {
				go func() { driven <- tc.drive(driveCtx, fake, clk, cancel) }()
			} else {
				driven <- nil
			}
			inst, err := p.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
			cancel()
			stopDrive()
			if derr := <-driven; derr != nil {
				t.Errorf("drive: %v", derr)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CreateInstance: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("CreateInstance error = %v, want it to contain %q", err, tc.wantErr)
			case tc.wantErr == "" && !strings.HasPrefix(inst.ID, "zones/"+tc.wantZone+"/"):
				t.Errorf("instance %s, want it in %s", inst.ID, tc.wantZone)
			}
			if n := fake.CountCalls("instances.insert"); n != tc.wantInserts {
				t.Errorf("inserts = %d, want %d", n, tc.wantInserts)
			}
			// What CAA does with the result: delete whatever it was given.
			if inst != nil && inst.ID != "" {
				fake.SetOperationLatency(0)
				if err := p.DeleteInstance(context.Background(), inst.ID); err != nil {
					t.Fatalf("DeleteInstance(%s): %v", inst.ID, err)
				}
			}
			if left := fake.Instances(); len(left) != 0 {
				t.Fatalf("%d instance(s) leaked, e.g. %s (%s)", len(left), left[0].GetName(), left[0].GetStatus())
			}
		})
	}
}

// endWaitThenFinishDelete ends the create's context once it waits on the
// accepted insert (GCE has the VM; the create cannot finish first, since
// the clock stands still), then lets the provider's own clean-up delete
// complete.
func endWaitThenFinishDelete(ctx context.Context, f *gcefake.Server, clk *gcefake.Clock, end context.CancelFunc) error {
	if err := f.AwaitLongPolls(ctx, 1); err != nil {
		return err
	}
	end()
	// Once recorded, the delete's operation exists: advancing completes
	// both it and the insert.
	if err := f.AwaitCalls(ctx, "instances.delete", 1); err != nil {
		return err
	}
	clk.Advance(2 * opLatency)
	return nil
}

// TestCrashBetweenInsertAndReturn: the adaptor dies after GCE accepted the
// insert, so the instance never reaches CAA. The VM is found again by its
// labels after the restart and deleted, so nothing leaks.
func TestCrashBetweenInsertAndReturn(t *testing.T) {
	first, fake, _ := newClockedProvider(t, nil)
	fake.SetOperationLatency(opLatency)
	// The dying process cannot clean up either: its deletes fail.
	fake.FailNext("DELETE", "instances.delete", 500, callAttempts)
	ctx, cancel := context.WithCancel(context.Background())
	crashed := make(chan error, 1)
	go func() {
		// The crash comes while the create waits on the accepted insert.
		err := fake.AwaitLongPolls(testContext(t), 1)
		cancel()
		crashed <- err
	}()
	// The crash: whatever CreateInstance returns is lost with the process.
	_, _ = first.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err := <-crashed; err != nil {
		t.Fatal(err)
	}
	if len(fake.Instances()) != 1 {
		t.Fatalf("the crash should leave the accepted VM behind, got %d instances", len(fake.Instances()))
	}

	fake.SetOperationLatency(0)
	restarted, _ := newTestProviderOn(t, fake, nil)
	vms, err := restarted.ListManaged(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Pod != "llm-0" || vms[0].Sandbox != sandbox || vms[0].Zone != "us-central1-a" {
		t.Fatalf("ListManaged after restart = %+v", vms)
	}
	if err := restarted.DeleteInstance(context.Background(), vms[0].ID); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Instances()); n != 0 {
		t.Fatalf("%d instances leaked", n)
	}
}

// TestTeardownWaitsForCreates: shutting the adaptor down mid-create must
// neither panic nor orphan the VM; the create finishes and is returned.
func TestTeardownWaitsForCreates(t *testing.T) {
	p, fake, clk := newClockedProvider(t, nil)
	fake.SetOperationLatency(opLatency)
	type result struct {
		inst *provider.Instance
		err  error
	}
	res := make(chan result, 1)
	go func() {
		inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
		res <- result{inst, err}
	}()
	// The create waits on its insert, which cannot finish before the
	// clock moves: Teardown begins with the create in flight.
	if err := fake.AwaitLongPolls(testContext(t), 1); err != nil {
		t.Fatal(err)
	}
	tornDown := make(chan error, 1)
	go func() { tornDown <- p.Teardown() }()
	for !closing(p) {
		runtime.Gosched() // Teardown marks the provider closed first thing
	}
	select {
	case err := <-tornDown:
		t.Fatalf("Teardown returned (%v) while a create was in flight", err)
	default:
	}
	clk.Advance(opLatency)
	r := <-res
	if r.err != nil || r.inst == nil || len(r.inst.IPs) != 1 {
		t.Fatalf("create in flight at teardown: %+v, %v", r.inst, r.err)
	}
	if err := <-tornDown; err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateInstance(context.Background(), "late", sandbox, cloudConfig("x"), oneT4); !errors.Is(err, errTornDown) {
		t.Fatalf("create after teardown: %v", err)
	}
}

func TestUnavailableOfferingCacheSpendsNoCalls(t *testing.T) {
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p, fake := newTestProvider(t, func(c *Config) { c.FallbackZones = commaList{"us-central1-b"} })
	p.offerings.now = func() time.Time { return clock }
	fake.SetStockout("us-central1-a", true)
	if _, err := p.CreateInstance(context.Background(), "a", strings.Repeat("a", 64), cloudConfig("a"), oneT4); err != nil {
		t.Fatal(err)
	}
	fake.ResetCalls()
	// Within the TTL, later pods go straight to the zone with capacity.
	for i := 0; i < 3; i++ {
		if _, err := p.CreateInstance(context.Background(), "b", strings.Repeat(string(rune('b'+i)), 64), cloudConfig("b"), oneT4); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range fake.Calls() {
		if strings.Contains(c.Path, "/zones/us-central1-a/") {
			t.Fatalf("call into the stocked-out offering within the TTL: %s %s", c.Method, c.Path)
		}
	}
	// A CPU-only pod is another offering: the GPU stockout does not keep
	// it from trying zone a (the fake's stockout is zone-wide, so it then
	// falls back like the first pod did).
	fake.ResetCalls()
	if _, err := p.CreateInstance(context.Background(), "cpu", strings.Repeat("z", 64), cloudConfig("c"), provider.InstanceTypeSpec{VCPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if c := fake.Calls(); len(c) == 0 || !strings.Contains(c[0].Path, "/zones/us-central1-a/") {
		t.Errorf("CPU-only pod skipped zone a: first call %+v", c)
	}
	// After the TTL the zone is probed again.
	clock = clock.Add(4 * time.Minute)
	fake.SetStockout("us-central1-a", false)
	inst, err := p.CreateInstance(context.Background(), "d", strings.Repeat("y", 64), cloudConfig("d"), oneT4)
	if err != nil || !strings.HasPrefix(inst.ID, "zones/us-central1-a/") {
		t.Fatalf("after the TTL: %+v, %v; want zone a again", inst, err)
	}
}

func TestAllOfferingsCachedFailsWithoutCalls(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	fake.SetStockout("us-central1-a", true)
	if _, err := p.CreateInstance(context.Background(), "a", strings.Repeat("a", 64), cloudConfig("a"), oneT4); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("first create: %v", err)
	}
	fake.ResetCalls()
	_, err := p.CreateInstance(context.Background(), "b", strings.Repeat("b", 64), cloudConfig("b"), oneT4)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "skipped: out of capacity until") {
		t.Fatalf("second create: %v", err)
	}
	if n := len(fake.Calls()); n != 0 {
		t.Fatalf("%d calls into a cached stockout", n)
	}
}

func TestSpotFallsBackToStandard(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) {
		c.ProvisioningModel = setting.ProvisioningSpot
		c.SpotFallback = true
	})
	fake.SetQuota("us-central1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0)
	if _, err := p.CreateInstance(context.Background(), "a", sandbox, cloudConfig("a"), oneT4); err != nil {
		t.Fatalf("spot with fallback: %v", err)
	}
	vm := fake.Instances()[0]
	if vm.GetScheduling().GetProvisioningModel() == setting.ProvisioningSpot {
		t.Fatalf("want the standard fallback, got %v", vm.GetScheduling())
	}

	q, fake2 := newTestProvider(t, func(c *Config) { c.ProvisioningModel = setting.ProvisioningSpot })
	fake2.SetQuota("us-central1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0)
	_, err := q.CreateInstance(context.Background(), "a", sandbox, cloudConfig("a"), oneT4)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "GCP_SPOT_FALLBACK=true") || !strings.Contains(err.Error(), "PREEMPTIBLE_NVIDIA_T4_GPUS") {
		t.Fatalf("spot without fallback: %v", err)
	}
}

func TestZonesAutoDiscovery(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.FallbackZones = commaList{setting.ZonesAuto} })
	fake.SetStockout("us-central1-a", true)
	fake.SetStockout("us-central1-b", true)
	inst, err := p.CreateInstance(context.Background(), "a", sandbox, cloudConfig("a"), oneT4)
	if err != nil || !strings.HasPrefix(inst.ID, "zones/us-central1-f/") {
		t.Fatalf("auto zones: %+v, %v; want us-central1-f, the region's other T4 zone", inst, err)
	}
	if _, err := p.CreateInstance(context.Background(), "b", strings.Repeat("b", 64), cloudConfig("b"), oneT4); err != nil {
		t.Fatal(err)
	}
	if n := fake.CountCalls("acceleratorTypes.aggregatedList"); n != 1 {
		t.Errorf("zone discovery calls = %d, want 1 (cached)", n)
	}
}

// TestMutationRateLimit measures the pacing by what GCE receives, with no
// wall-clock bound: at one mutation per 10^6 s (burst 1) the first create
// is sent; a second create and a delete, whose deadline comes long before
// the next token, are refused by the limiter at once (rate.Limiter.Wait
// fails when the wait would pass the deadline) and never reach GCE. So each
// insert and each delete takes a token before its request is sent, and the
// next token is 1/rate after the last.
func TestMutationRateLimit(t *testing.T) {
	slow, fake := newTestProvider(t, func(c *Config) { c.MutationsPerSecond = 1e-6 })
	ctx := testContext(t)
	inst, err := slow.CreateInstance(ctx, "llm-0", sandbox, cloudConfig("llm-0"), oneT4)
	if err != nil {
		t.Fatalf("first create, within the burst: %v", err)
	}
	if _, err := slow.CreateInstance(ctx, "llm-1", "fedcba9876543210"+sandbox[16:], cloudConfig("llm-1"), oneT4); err == nil || !strings.Contains(err.Error(), "mutation rate limit") {
		t.Fatalf("second create with no token left: want the rate-limit error, got %v", err)
	}
	if err := slow.DeleteInstance(ctx, inst.ID); err == nil || !strings.Contains(err.Error(), "mutation rate limit") {
		t.Fatalf("delete with no token left: want the rate-limit error, got %v", err)
	}
	if n, d := fake.CountCalls("instances.insert"), fake.CountCalls("instances.delete"); n != 1 || d != 0 {
		t.Fatalf("GCE got %d inserts and %d deletes; want 1 and 0: a mutation was sent without a token", n, d)
	}
	// The limiter's own account: the next token is 1/rate after the first.
	r := slow.limiter.Reserve()
	defer r.Cancel()
	if d := r.Delay(); d < 999_000*time.Second {
		t.Fatalf("the next mutation may go in %v, want about 10^6 s", d)
	}

	p, _ := newTestProvider(t, func(c *Config) { c.MutationsPerSecond = 20 })
	if p.limiter == nil || p.limiter.Limit() != 20 || p.limiter.Burst() != 20 {
		t.Fatalf("limiter = %v", p.limiter)
	}
	p0, _ := newTestProvider(t, func(c *Config) { c.MutationsPerSecond = 0 })
	if p0.limiter != nil {
		t.Fatal("0 must disable the limiter")
	}
}

// newClockedProvider is newTestProvider on a fake whose clock only the test
// moves, so that tests need not wait out real operations.
func newClockedProvider(t testing.TB, mutate func(*Config)) (*Provider, *gcefake.Server, *gcefake.Clock) {
	t.Helper()
	clk := gcefake.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	fake := gcefake.New(gcefake.WithClock(clk.Now))
	t.Cleanup(fake.Close)
	p, _ := newTestProviderOn(t, fake, mutate)
	return p, fake, clk
}

// testContext bounds a test's waits on the fake, so that a broken provider
// fails the test instead of hanging it.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// expiringContext returns a context whose deadline passes when its cancel
// func is called: Err is then context.DeadlineExceeded, as for a real
// deadline, but the moment is a condition the test chose, not a duration
// that a loaded machine may overrun before the create gets there.
func expiringContext(parent context.Context) (context.Context, context.CancelFunc) {
	c := &expiring{Context: parent, done: make(chan struct{})}
	return c, func() { c.once.Do(func() { close(c.done) }) }
}

type expiring struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func (c *expiring) Done() <-chan struct{} { return c.done }

func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// closing reports whether Teardown has begun.
func closing(p *Provider) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
