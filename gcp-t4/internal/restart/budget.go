// Package restart restarts containerd when, and only when, a new runtime
// handler cannot be loaded otherwise (containerd has no reload), within a
// budget that keeps a node out of a restart loop.
package restart

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Restarter restarts the containerd the node runs. The systemd one is used
// on nodes; tests plug in one that restarts their own containerd.
type Restarter interface {
	// StartedAt is when the running containerd started (systemd's
	// ActiveEnterTimestamp); a config file newer than that is not loaded.
	StartedAt(ctx context.Context) (time.Time, error)
	// Restart restarts containerd and returns once it runs again.
	Restart(ctx context.Context) error
}

// Errors the budget answers with.
var (
	ErrTooSoon   = errors.New("restart budget: a restart happened too recently")
	ErrExhausted = errors.New("restart budget exhausted")
)

// Budget limits restarts: at most one per Interval, and none after
// MaxFailures consecutive failures until Reset. GKE's node-problem-detector
// flags FrequentContainerdRestart at 5 restarts in 20 minutes; one per 10
// minutes stays well below it.
type Budget struct {
	Interval    time.Duration
	MaxFailures int

	mu       sync.Mutex
	last     time.Time
	failures int
}

// NewBudget returns a budget with the given limits (defaults: 10 minutes, 3).
func NewBudget(interval time.Duration, maxFailures int) *Budget {
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	if maxFailures <= 0 {
		maxFailures = 3
	}
	return &Budget{Interval: interval, MaxFailures: maxFailures}
}

// Allow says whether a restart may start at now, and if not, why.
func (b *Budget) Allow(now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures >= b.MaxFailures {
		return fmt.Errorf("%w after %d failed restarts; fix containerd on the node and restart this pod", ErrExhausted, b.failures)
	}
	if !b.last.IsZero() && now.Sub(b.last) < b.Interval {
		return fmt.Errorf("%w (last at %s, next allowed at %s)", ErrTooSoon, b.last.Format(time.RFC3339), b.last.Add(b.Interval).Format(time.RFC3339))
	}
	return nil
}

// Record books a restart attempt made at now and its outcome.
func (b *Budget) Record(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = now
	if err != nil {
		b.failures++
	} else {
		b.failures = 0
	}
}

// Failures is the count of consecutive failed restarts.
func (b *Budget) Failures() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures
}
