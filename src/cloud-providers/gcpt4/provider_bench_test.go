package gcpt4

import (
	"context"
	"fmt"
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
	}{{"primary-zone", false}, {"fallback-after-stockout", true}} {
		b.Run(bc.name, func(b *testing.B) {
			p, fake := newTestProvider(b, func(c *Config) { c.FallbackZones = commaList{"us-central1-b"} })
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
