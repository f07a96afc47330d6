// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkCreateInstance reports GCE API calls per successful create
// (goal: 3 — insert, one long-poll wait, one get) and per delete, with an
// operation latency so the wait is real, and with the primary zone out of
// stock so the fallback cost shows too.
func BenchmarkCreateInstance(b *testing.B) {
	for _, bc := range []struct {
		name     string
		stockout bool
		ttl      time.Duration
	}{
		{"primary-zone", false, 3 * time.Minute},
		// Cache off: every create meets the stockout first (+2 calls).
		{"fallback-after-stockout-uncached", true, 0},
		// Cache on: only the first create in the TTL pays for it.
		{"fallback-after-stockout-cached", true, 3 * time.Minute},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, fake := newTestProvider(b, func(c *Config) {
				c.FallbackZones = commaList{"us-central1-b"}
				c.UnavailableTTL = bc.ttl
			})
			fake.SetOperationLatency(time.Millisecond)
			fake.SetStockout("us-central1-a", bc.stockout)
			ctx := context.Background()
			createCalls, deleteCalls := 0, 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fake.ResetCalls()
				inst, err := p.CreateInstance(ctx, "bench", fmt.Sprintf("%064x", i), cloudConfig("bench"), oneT4)
				if err != nil {
					b.Fatal(err)
				}
				createCalls += len(fake.Calls())
				fake.ResetCalls()
				if err := p.DeleteInstance(ctx, inst.ID); err != nil {
					b.Fatal(err)
				}
				deleteCalls += len(fake.Calls())
			}
			b.ReportMetric(float64(createCalls)/float64(b.N), "calls/create")
			b.ReportMetric(float64(deleteCalls)/float64(b.N), "calls/delete")
		})
	}
}

// BenchmarkLatencyBeyondOperation measures how long after GCE finishes the
// insert operation (2 s on the fake) the create returns: the long poll
// should hand back the result at once (goal < 50 ms).
func BenchmarkLatencyBeyondOperation(b *testing.B) {
	const opTime = 2 * time.Second
	p, fake := newTestProvider(b, nil)
	fake.SetOperationLatency(opTime)
	var beyond time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		inst, err := p.CreateInstance(context.Background(), "lat", fmt.Sprintf("%064x", i), cloudConfig("lat"), oneT4)
		if err != nil {
			b.Fatal(err)
		}
		beyond += time.Since(start) - opTime
		b.StopTimer()
		fake.SetOperationLatency(0)
		if err := p.DeleteInstance(context.Background(), inst.ID); err != nil {
			b.Fatal(err)
		}
		fake.SetOperationLatency(opTime)
		b.StartTimer()
	}
	b.ReportMetric(float64(beyond.Milliseconds())/float64(b.N), "ms-beyond-op")
}

// BenchmarkConcurrentCreatesRateLimited starts 200 creates at once under a
// 20 mutations/s limit: the ideal wall time is 200/20 = 10 s; the ratio to
// it (goal ≤ 1.2) shows the limiter paces without stalls, with 0 failures.
func BenchmarkConcurrentCreatesRateLimited(b *testing.B) {
	const pods, perSecond = 200, 20
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p, fake := newTestProvider(b, func(c *Config) { c.MutationsPerSecond = perSecond })
		fake.SetOperationLatency(50 * time.Millisecond)
		fake.SetQuota("us-central1", "NVIDIA_T4_GPUS", pods)
		fake.SetQuota("us-central1", "CPUS", pods*4)
		fake.SetQuota("us-central1", "INSTANCES", pods)
		fake.SetQuota("", "GPUS_ALL_REGIONS", pods)
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		var failures atomic.Int64
		for j := 0; j < pods; j++ {
			wg.Add(1)
			go func(j int) {
				defer wg.Done()
				if _, err := p.CreateInstance(context.Background(), "burst", fmt.Sprintf("%08x%056x", j, 0), cloudConfig("b"), oneT4); err != nil {
					if failures.Add(1) == 1 {
						b.Logf("first failure: %v", err)
					}
				}
			}(j)
		}
		wg.Wait()
		wall := time.Since(start)
		ideal := time.Duration(float64(pods-perSecond) / perSecond * float64(time.Second)) // the burst admits the first 20 at once
		b.ReportMetric(wall.Seconds()/ideal.Seconds(), "wall/ideal")
		b.ReportMetric(float64(failures.Load()), "failures")
		b.ReportMetric(float64(len(fake.Instances())), "vms")
	}
}

// BenchmarkCallsIntoCachedStockout: after one pod met a stockout, the next
// pods within the TTL spend no call on that offering (goal 0).
func BenchmarkCallsIntoCachedStockout(b *testing.B) {
	p, fake := newTestProvider(b, func(c *Config) { c.FallbackZones = commaList{"us-central1-b"} })
	fake.SetStockout("us-central1-a", true)
	if _, err := p.CreateInstance(context.Background(), "first", strings.Repeat("f", 64), cloudConfig("f"), oneT4); err != nil {
		b.Fatal(err)
	}
	calls := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fake.ResetCalls()
		inst, err := p.CreateInstance(context.Background(), "next", fmt.Sprintf("%064x", i), cloudConfig("n"), oneT4)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range fake.Calls() {
			if strings.Contains(c.Path, "/zones/us-central1-a/") {
				calls++
			}
		}
		b.StopTimer()
		_ = p.DeleteInstance(context.Background(), inst.ID)
		b.StartTimer()
	}
	b.ReportMetric(float64(calls)/float64(b.N), "calls-into-stockout/pod")
}
