package gcpt4

import (
	"sync"
	"time"
)

// offering is one thing GCE can be out of: a shape under a provisioning
// model in a zone. Spot and standard capacity run out independently.
type offering struct {
	model, machineType, accelerator, zone string
}

// offeringCache remembers offerings that just stocked out, so that the
// pods after the first spend no API call on them until the entry expires.
// Stockouts last minutes to hours; a short TTL re-probes soon enough.
type offeringCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	expires map[offering]time.Time
}

func newOfferingCache(ttl time.Duration, now func() time.Time) *offeringCache {
	return &offeringCache{ttl: ttl, now: now, expires: map[offering]time.Time{}}
}

// markUnavailable records a stockout; a repeat extends the entry.
func (c *offeringCache) markUnavailable(o offering) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expires[o] = c.now().Add(c.ttl)
}

// unavailableUntil reports whether o is still marked, and until when.
func (c *offeringCache) unavailableUntil(o offering) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.expires[o]
	if !ok {
		return time.Time{}, false
	}
	if !c.now().Before(until) {
		delete(c.expires, o)
		return time.Time{}, false
	}
	return until, true
}
