package cachemirror

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
)

// The pull lines: for each image a pull asks the mirror for, by the
// digest its pod names, one line when its manifest is first served and one
// when its first layer is, so that the provider can tell each container's
// pod where its image came from (docs/cache.md, "Where each image came
// from"). image-rs at guest-components dcd55ea1 always fetches the
// manifest and config first, then looks the config digest up in its store
// and fetches no layer on a hit (image.rs:385-401): a manifest served and
// no layer means the pre-unpacked store (or an earlier pull in the same
// podVM); a layer served means the mirror; a manifest the cache does not
// hold means the registry.

// PullPrefix starts a pull line on the serial console.
const PullPrefix = "CAA-GCP-T4-PULL "

// What a pull line says was served of an image.
const (
	ServedManifest = "manifest"
	ServedLayers   = "layers"
	// ServedAbsent: a manifest asked for by digest that the cache does
	// not hold (the pull goes on to the registry).
	ServedAbsent = "absent"
)

// maxAbsentLines bounds the lines for digests the cache does not hold:
// those names come from whoever pulls (a pod can ask for any digest), the
// cache's own images are bounded by the disk.
const maxAbsentLines = 32

// pullLog prints each (image, served) once. The lines go out through a
// queue written by one goroutine: a slow console never holds up a pull,
// and a line that finds the queue full is dropped (and counted) rather
// than waited for.
type pullLog struct {
	mu     sync.Mutex
	queue  chan string
	told   map[string]bool
	absent int
}

// pullQueue is how many lines may wait for the console.
const pullQueue = 256

// PullLine is one pull line's JSON.
type PullLine struct {
	Image  string `json:"image"`
	Served string `json:"served"`
}

// TellPulls makes the mirror print its pull lines to w (the console)
// until ctx ends.
func (m *Mirror) TellPulls(ctx context.Context, w io.Writer) {
	p := &pullLog{queue: make(chan string, pullQueue), told: map[string]bool{}}
	m.pulls = p
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case l := <-p.queue:
				_, _ = io.WriteString(w, l)
			}
		}
	}()
}

func (p *pullLog) tell(image, served string) {
	if p == nil || !digestRE.MatchString(image) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := image + " " + served
	if p.told[key] {
		return
	}
	if served == ServedAbsent {
		if p.absent >= maxAbsentLines {
			return
		}
		p.absent++
	}
	p.told[key] = true
	b, _ := json.Marshal(PullLine{Image: image, Served: served})
	select {
	case p.queue <- fmt.Sprintf("%s%s\n", PullPrefix, b):
	default:
		// dropped: the console is that far behind
	}
}

// addTop records that top (an index entry) names digest.
func addTop(m map[string][]string, digest, top string) {
	if !slices.Contains(m[digest], top) {
		m[digest] = append(m[digest], top)
	}
}
