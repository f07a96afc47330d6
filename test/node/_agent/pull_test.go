package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The modelled pull's behaviours (pull.go), run where the stand-in is
// built (test/node/kata-build.sh), since it imports kata's protocol.
func TestPullerModel(t *testing.T) {
	life := context.Background()
	const d = 40 * time.Millisecond
	digest := func(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

	t.Run("a stored image is found by config digest under another name", func(t *testing.T) {
		p := newPuller(d, map[string]string{"r/app:v1": digest('a'), "r/app@sha256:x": digest('a')}, nil, 0)
		if err := p.pull(life, life, "c1", "r/app:v1"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.pull(life, life, "c2", "r/app@sha256:x"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= d {
			t.Errorf("the same config digest under another name took %s, want no pull", took)
		}
		if got := p.stored[digest('a')]; got != "pulled in this podVM" {
			t.Errorf("stored as %q", got)
		}
	})
	t.Run("the pre-unpacked store needs no pull", func(t *testing.T) {
		p := newPuller(time.Hour, map[string]string{"r/app:v1": digest('b')}, []string{digest('b')}, 0)
		ctx, cancel := context.WithTimeout(life, 5*time.Second)
		defer cancel()
		if err := p.pull(ctx, life, "c1", "r/app:v1"); err != nil {
			t.Fatalf("an image in the store: %v (want found, not an hour's pull)", err)
		}
	})
	t.Run("a failed pull keeps nothing and the next starts over", func(t *testing.T) {
		p := newPuller(d, nil, nil, 1)
		start := time.Now()
		err := p.pull(life, life, "c1", "r/app:v1")
		if err == nil || !strings.Contains(err.Error(), "recorded none of its layers") {
			t.Fatalf("first pull: %v, want the modelled failure", err)
		}
		if len(p.stored) != 0 {
			t.Errorf("a failed pull stored %v", p.stored)
		}
		again := time.Now()
		if err := p.pull(life, life, "c2", "r/app:v1"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(again); took < d {
			t.Errorf("the pull after a failure took %s, want the whole %s (it starts over)", took, d)
		}
		if first := again.Sub(start); first < d/2 {
			t.Errorf("the failed pull took %s, want half of %s", first, d)
		}
	})
	t.Run("a pull goes on after the caller gives up", func(t *testing.T) {
		p := newPuller(d, nil, nil, 0)
		req, cancel := context.WithCancel(life)
		cancel()
		if err := p.pull(life, req, "c1", "r/app:v1"); err != nil {
			t.Fatal(err)
		}
		if len(p.stored) != 1 {
			t.Errorf("stored %v after the caller gave up, want the image", p.stored)
		}
	})
	t.Run("flags refuse what is not a digest", func(t *testing.T) {
		if err := (imageFlag{}).Set("r/app:v1=sha256:abc"); err == nil {
			t.Error("-image with a short digest accepted")
		}
		var s digestsFlag
		if err := s.Set(digest('c') + ",nope"); err == nil {
			t.Error("-store with a non-digest accepted")
		}
	})
}
