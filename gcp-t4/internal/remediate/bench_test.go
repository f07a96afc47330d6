package remediate

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkConfigResetRestored measures how long after GKE's rewrite of
// config.toml lands the handler is back in the file: fsnotify, the
// default 100 ms debounce, the default 500 ms quiet time (no writer holds
// the file, unchanged that long), plan, the check with the node's
// containerd (`config dump` of the current and the candidate files), state,
// temp + fsync + rename. Reported as p50-ms and p99-ms over b.N resets.
func BenchmarkConfigResetRestored(b *testing.B) {
	// The oldest release edited in place (1.7) and the newest (2.x).
	for _, rel := range []release{first(b, inPlace, "edited in place"), newest()} {
		b.Run("containerd-"+strings.TrimPrefix(rel.Version, "v"), func(b *testing.B) {
			f2 := newFixtureOn(b, rel, "")
			f2.cfg.Quiet = 500 * time.Millisecond
			f2.probe.state = loadedState()
			r, err := New(f2.cfg, Deps{Probe: f2.probe, Restarter: f2.rs, Containerd: checker(b, rel)})
			if err != nil {
				b.Fatal(err)
			}
			gke, err := os.ReadFile("testdata/gke-v2.toml")
			if err != nil {
				b.Fatal(err)
			}
			restored := make(chan time.Time, 16)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// GKE's plain `cat >` can be seen half-written; such a pass
			// fails validation and the write's next event converges.
			os.WriteFile(f2.cfg.Target.Config, gke, 0o644)
			go r.Run(ctx, Loop{Reconciled: func(res Result, err error) {
				if slices.Contains(res.Wrote, f2.cfg.Target.Config) {
					restored <- time.Now()
				}
			}})
			<-restored // initial convergence
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := os.WriteFile(f2.cfg.Target.Config, gke, 0o644); err != nil {
					b.Fatal(err)
				}
				reset := time.Now()
				select {
				case at := <-restored:
					samples = append(samples, at.Sub(reset))
				case <-time.After(30 * time.Second):
					b.Fatal("config not restored within 30s")
				}
			}
			b.StopTimer()
			slices.Sort(samples)
			pct := func(p float64) float64 {
				return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}
