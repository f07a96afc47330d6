package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// puller models the in-guest image pull that the pinned kata-agent asks
// the confidential-data-hub (image-rs) for inside CreateContainer, in
// the three behaviours the node's scenarios turn on:
//
//   - serialised: one pull at a time in a podVM (one lock for every
//     image), so a second container's create waits behind the first's pull;
//   - it goes on after the shim gives up: the pull is bound to the
//     agent's life, not to the request, so when kata's
//     create_container_timeout or kubelet's runtimeRequestTimeout ends
//     the call the pull still finishes, and a later CreateContainer of the
//     same image finds it stored;
//   - it takes a configured time (-pull-duration) for an image not yet
//     stored in this podVM, and none for one that is.
//
// Not modelled: any registry or bytes (the image is a name), a stored
// image looked up by its config digest (here by its name), a pull that
// fails or is aborted and starts over, and the pre-unpacked store.
type puller struct {
	duration time.Duration

	lock   sync.Mutex // CDH's one pull at a time
	mu     sync.Mutex
	stored map[string]bool
}

// pull returns once image is stored. It waits for life, never for req:
// req only says, in the log, that the caller stopped waiting.
func (p *puller) pull(life, req context.Context, cid, image string) error {
	queued := time.Now()
	p.lock.Lock()
	defer p.lock.Unlock()
	if waited := time.Since(queued); waited > 100*time.Millisecond {
		logger.Printf("pull %s for %s: waited %s behind another pull", image, cid, waited.Round(time.Millisecond))
	}
	p.mu.Lock()
	have := p.stored[image]
	p.mu.Unlock()
	if have {
		logger.Printf("pull %s for %s: stored in this podVM already", image, cid)
		return nil
	}
	logger.Printf("pull %s for %s: pulling (%s modelled)", image, cid, p.duration)
	start := time.Now()
	t := time.NewTimer(p.duration)
	defer t.Stop()
	gaveUp := req.Done()
	for {
		select {
		case <-life.Done():
			return fmt.Errorf("pull %s: the agent is stopping: %w", image, life.Err())
		case <-gaveUp:
			logger.Printf("pull %s for %s: the caller gave up after %s (%v); the pull goes on", image, cid, time.Since(start).Round(time.Millisecond), req.Err())
			gaveUp = nil
			continue
		case <-t.C:
		}
		break
	}
	p.mu.Lock()
	p.stored[image] = true
	p.mu.Unlock()
	logger.Printf("pull %s for %s: stored after %s", image, cid, time.Since(start).Round(time.Millisecond))
	return nil
}
