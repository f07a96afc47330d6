// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// Where each container's image came from (docs/cache.md, "Where each
// image came from"). The podVM's cache mirror prints a CAA-GCP-T4-PULL
// line the first time it serves an image's manifest and the first time it
// serves one of its layers, and one for a manifest digest it does not
// hold. image-rs at guest-components dcd55ea1 always fetches the manifest
// and config first, then looks the config digest up in its store and
// fetches no layer on a hit (image.rs:385-401). So when a container has
// started:
//   - its manifest served and no layer: the pre-unpacked store;
//   - a layer served: the mirror (the image unpacked in the podVM), and
//     why the store missed it;
//   - a manifest the cache does not hold, an image named by tag, no cache
//     disk: its registry, and why.
// One Event per container start (reason PodVMImageSource, phase label
// image), told once the container has started.

const (
	// eventImageRouteAnnotation is store, mirror, podvm (an earlier pull
	// in the same podVM) or registry; eventContainerAnnotation the
	// container's name.
	eventImageRouteAnnotation = "caa-gcp-t4/image-route"
	eventContainerAnnotation  = "caa-gcp-t4/container"
)

// What the mirror says it served of an image (cachemirror's Served*).
const (
	servedManifest = "manifest"
	servedLayers   = "layers"
	servedAbsent   = "absent"
)

// pullsMax bounds the images one podVM's watch remembers: the mirror
// prints at most its own images' lines and 32 for digests it lacks.
const pullsMax = 256

// imageRouteWaits is how many more console reads a started container's
// image waits for the mirror's line before it is told without one (the
// serial console can lag the container's start by a read or two).
const imageRouteWaits = 2

var (
	imageDigestRE   = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	containerNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// pullReport is the mirror's line.
type pullReport struct {
	Image  string `json:"image"`
	Served string `json:"served"`
}

func parsePullLine(body string) *pullReport {
	var r pullReport
	if json.Unmarshal([]byte(strings.TrimSpace(body)), &r) != nil || !imageDigestRE.MatchString(r.Image) {
		return nil
	}
	switch r.Served {
	case servedManifest, servedLayers, servedAbsent:
		return &r
	}
	return nil
}

// notePull records a pull line (w.mu held): layers outrank a manifest,
// and either outranks absent.
func (w *bootWatch) notePull(r *pullReport) {
	if w.pulls == nil {
		w.pulls = map[string]string{}
	}
	old, seen := w.pulls[r.Image]
	if !seen && len(w.pulls) >= pullsMax {
		return
	}
	rank := map[string]int{"": 0, servedAbsent: 1, servedManifest: 2, servedLayers: 3}
	if rank[r.Served] > rank[old] {
		w.pulls[r.Image] = r.Served
	}
}

// imageRoute says where an image came from, why, and whether the console
// had what it needed to say so (w.mu held).
func (w *bootWatch) imageRoute(image string) (route, why string, known bool) {
	_, digest, pinned := strings.Cut(image, "@")
	pinned = pinned && imageDigestRE.MatchString(digest)
	diskSeen := w.storeState != "" || len(w.pulls) > 0
	switch {
	case !diskSeen:
		return "registry", "the podVM has no cache disk", true
	case w.storeState == "no-verity" || w.storeState == "verity-refused":
		return "registry", "the podVM's cache disk was not opened (" + w.storeState + ")", true
	case !pinned:
		return "registry", "the image is named by tag, and the cache serves images pinned by digest only", true
	}
	storeWhy := "the image is not in the pre-unpacked store (another config digest, or not a linux image)"
	if w.storeState != "in-use" {
		storeWhy = "the podVM's pre-unpacked store is not in use (" + w.storeState + ")"
	}
	switch w.pulls[digest] {
	case servedLayers:
		return "mirror", storeWhy, true
	case servedManifest:
		if w.storeState == "in-use" {
			return "store", "", true
		}
		return "podvm", "an earlier pull in this podVM had it; " + storeWhy, true
	case servedAbsent:
		return "registry", "the cache disk does not hold it", true
	}
	return "registry", "the cache mirror was never asked for it (is it in the pod's initdata registries.conf? gcp-t4 cache initdata writes it)", false
}

// tellImage tells the pod where a started container's image came from,
// once; false while it waits for the mirror's line (w.mu not held).
func (p *Provider) tellImage(w *bootWatch, i int, name, image string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.imageTold == nil {
		w.imageTold, w.imageWaits = map[string]bool{}, map[string]int{}
	}
	if w.imageTold[name] {
		return true
	}
	route, why, known := w.imageRoute(image)
	if !known && w.imageWaits[name] < imageRouteWaits {
		w.imageWaits[name]++
		return false
	}
	w.imageTold[name] = true
	// Both are the pod author's: shown only when they are what the API
	// server admits, the image cleaned and cut.
	shown := name
	if !containerNameRE.MatchString(name) {
		shown = fmt.Sprintf("#%d", i+1)
	}
	img := cleanConsoleLine(image)
	if len(img) > 200 {
		img = img[:200] + "…"
	}
	var says string
	switch route {
	case "store":
		says = "from the pre-unpacked store on the podVM's cache disk: no layer pulled or unpacked"
	case "mirror":
		says = "through the podVM's cache mirror, unpacked in the podVM: " + why
	case "podvm":
		says = "already in the podVM: " + why
	default:
		says = "from its registry: " + why
	}
	p.events.record(podEvent{
		namespace: w.vm.namespace, pod: w.vm.podName, podVM: w.vm.name, at: time.Now(),
		phase: podevent.PhaseImage, part: shown, warning: route == "registry" && (w.storeState != "" || len(w.pulls) > 0),
		annotations: map[string]string{eventImageRouteAnnotation: route, eventContainerAnnotation: shown},
		message:     fmt.Sprintf("container %s (image %q) on podVM %s: %s", shown, img, w.vm.name, says),
	})
	return true
}

// started says whether a container has run: running or ended now, or an
// earlier run ended (a container waiting to restart).
func (c containerStatus) started() bool {
	return c.State["running"] != nil || c.State["terminated"] != nil || c.LastState["terminated"] != nil
}
