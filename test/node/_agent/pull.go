package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// puller models the in-guest image pull that the pinned kata-agent asks
// the confidential-data-hub (image-rs) for inside CreateContainer. Read at
// guest-components dcd55ea1 (the commit gcp-t4/internal/imagestore's
// format is for), image-rs/src/image.rs pull_task and src/pull.rs:
//
//   - serialised: one pull at a time in a podVM (one lock for every
//     image), so a second container's create waits behind the first's pull;
//   - it goes on after the shim gives up: the pull is bound to the
//     agent's life, not to the request, so when kata's
//     create_container_timeout or kubelet's runtimeRequestTimeout ends
//     the call the pull still finishes, and a later CreateContainer of the
//     same image finds it stored;
//   - a stored image is found by its config digest (image.rs ~390-401:
//     the manifest is fetched, then meta_store.image_db is looked up by
//     manifest.config.digest), so another name of the same image (a tag
//     and a digest reference) is found too; the manifest fetch is not
//     modelled (no time);
//   - the pre-unpacked store (-store): config digests already in image_db
//     when the agent starts, as podvm-cache-store hands the cache disk's
//     store to image-rs before CDH starts; found as a stored image is;
//   - a failed pull keeps nothing (-pull-failures): image-rs adds an
//     image's layers to layer_db only once every layer is pulled
//     (image.rs ~430-445), so the next pull of the image starts over, the
//     layers the failed one unpacked left on disk unrecorded;
//   - it takes a configured time (-pull-duration) for an image not yet
//     stored in this podVM, and none for one that is.
//
// Not modelled: any registry or bytes (an image's config digest is given
// by -image, else derived from its name), layers shared between images,
// signature or policy checks, and the time of the manifest fetch.
type puller struct {
	duration time.Duration
	// images is the modelled registry: an image reference's config
	// digest; one not named gets a digest of its reference.
	images map[string]string
	// failures is how many pulls fail, each halfway, before one succeeds.
	failures int

	lock   sync.Mutex // CDH's one pull at a time
	mu     sync.Mutex
	stored map[string]string // config digest → how it got here
}

func newPuller(duration time.Duration, images map[string]string, store []string, failures int) *puller {
	p := &puller{duration: duration, images: images, failures: failures, stored: map[string]string{}}
	for _, d := range store {
		p.stored[d] = "the pre-unpacked store"
	}
	return p
}

// configDigest is image's config digest in the modelled registry.
func (p *puller) configDigest(image string) string {
	if d, ok := p.images[image]; ok {
		return d
	}
	sum := sha256.Sum256([]byte(image))
	return "sha256:" + hex.EncodeToString(sum[:])
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
	digest := p.configDigest(image)
	p.mu.Lock()
	from, have := p.stored[digest]
	fail := p.failures > 0
	if fail {
		p.failures--
	}
	p.mu.Unlock()
	if have {
		logger.Printf("pull %s for %s: config %s found in image_db (%s); no layer pulled", image, cid, short(digest), from)
		return nil
	}
	d := p.duration
	if fail {
		d /= 2
	}
	logger.Printf("pull %s for %s: config %s not stored; pulling (%s modelled)", image, cid, short(digest), p.duration)
	start := time.Now()
	t := time.NewTimer(d)
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
	if fail {
		logger.Printf("pull %s for %s: failed after %s (modelled: the registry connection dropped); nothing recorded, the next pull starts over", image, cid, time.Since(start).Round(time.Millisecond))
		return fmt.Errorf("pull %s: the registry connection dropped after %s (modelled); image-rs recorded none of its layers", image, time.Since(start).Round(time.Second))
	}
	p.mu.Lock()
	p.stored[digest] = "pulled in this podVM"
	p.mu.Unlock()
	logger.Printf("pull %s for %s: stored after %s (config %s)", image, cid, time.Since(start).Round(time.Millisecond), short(digest))
	return nil
}

func short(digest string) string {
	if len(digest) > 19 {
		return digest[:19]
	}
	return digest
}

// imageFlag is -image NAME=DIGEST, repeatable.
type imageFlag map[string]string

func (f imageFlag) String() string {
	var out []string
	for k, v := range f {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func (f imageFlag) Set(s string) error {
	name, digest, ok := strings.Cut(s, "=")
	if !ok || name == "" || !strings.HasPrefix(digest, "sha256:") || len(digest) != len("sha256:")+64 {
		return fmt.Errorf("-image %q: want NAME=sha256:<64 hex>", s)
	}
	f[name] = digest
	return nil
}

// digestsFlag is -store D1,D2 (config digests).
type digestsFlag []string

func (f *digestsFlag) String() string { return strings.Join(*f, ",") }

func (f *digestsFlag) Set(s string) error {
	for _, d := range strings.Split(s, ",") {
		if d == "" {
			continue
		}
		if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
			return fmt.Errorf("-store: %q is not sha256:<64 hex>", d)
		}
		*f = append(*f, d)
	}
	return nil
}
