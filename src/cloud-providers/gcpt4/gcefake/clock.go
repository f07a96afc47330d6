// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"sync"
	"time"
)

// Clock is a time source that moves only when Advance is called. Tests hand
// its Now to WithClock so that an operation's latency passes when the test
// says so rather than in wall time, and often also to the code under test so
// that both sides share one notion of now. It lives here, next to WithClock,
// so that every package testing against the fake (this module's and the
// gcp-t4 CLI's) uses one clock instead of writing its own. It is safe for
// concurrent use: the fake's handlers read it while the test advances it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock {
	return &Clock{t: start}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
