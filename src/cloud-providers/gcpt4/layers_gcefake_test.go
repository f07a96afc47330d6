// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// containersRunning marks every container of a pod as started, as the
// kubelet does once the agent's CreateContainer and StartContainer return.
func (a *eventAPI) containersRunning(ns, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pod := a.pods[ns+"/"+name]
	if _, ok := pod["spec"]; !ok {
		pod["spec"] = map[string]any{"containers": []any{map[string]any{"name": "c", "image": "registry.example/app:1"}}}
	}
	st := pod["status"].(map[string]any)
	var cs []any
	for _, c := range pod["spec"].(map[string]any)["containers"].([]any) {
		cs = append(cs, map[string]any{"name": c.(map[string]any)["name"], "state": map[string]any{"running": map[string]any{"startedAt": "2026-12-07T10:00:00Z"}}})
	}
	st["containerStatuses"] = cs
}

// waitWatchDone waits until the podVM's watch has ended on its own.
func waitWatchDone(t *testing.T, p *Provider, name string) {
	t.Helper()
	p.mu.Lock()
	w := p.watches[name]
	p.mu.Unlock()
	if w == nil {
		t.Fatalf("no watch of %s", name)
	}
	<-w.done
}

// watchedPodVM creates the podVM of pod ml/llm-0 with the provider's
// watch on: the emulator, the API server's stand-in, the provider and the
// instance.
func watchedPodVM(t *testing.T) (*gcefake.Server, *eventAPI, *Provider, *provider.Instance) {
	t.Helper()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, nil)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	return fake, api, p, inst
}

func layersEvents(api *eventAPI) []storedEvent {
	var out []storedEvent
	for _, e := range api.list() {
		if e.Reason == podevent.ReasonLayers {
			out = append(out, e)
		}
	}
	return out
}

// After the agent is reached the watch goes on reading the console while
// the pod's images are pulled: the sweep's line that layers of a failed
// pull were removed, or that pulls hold more than the disk has left, is
// told on the pod (one Event, its count and message updated); a pull that
// is merely unpacking, a forged or quoted line, is not. Once every
// container has started the watch ends, and a later line is not read.
func TestLayersLineToldOnThePod(t *testing.T) {
	fake, api, p, inst := watchedPodVM(t)
	fake.SetSerialOutput("us-central1-a", inst.Name, gpuReadyLine+"\n")
	api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
	api.sandboxReady("ml", "llm-0")
	api.waitEvents(t, "reachable", hasReason(podevent.ReasonReachable))

	const gib = 1 << 30
	lines := []string{
		// Unpacking, with room: not news.
		fmt.Sprintf(`CAA-GCP-T4-LAYERS {"removed":0,"removed_bytes":0,"pending":3,"pending_bytes":%d,"free_bytes":%d}`, 2*gib, 20*gib),
		// Quoted by a program, not at a line's start: decides nothing.
		fmt.Sprintf(`echo CAA-GCP-T4-LAYERS {"removed":9,"removed_bytes":%d,"pending":0,"free_bytes":1}`, gib),
		// Forged numbers: bounded, nothing negative told.
		`CAA-GCP-T4-LAYERS {"removed":-5,"removed_bytes":-1,"pending":-2,"pending_bytes":-9,"free_bytes":-1}`,
	}
	fake.AppendSerialOutput("us-central1-a", inst.Name, strings.Join(lines, "\n")+"\n")
	// A failed pull's layers removed: told.
	fake.AppendSerialOutput("us-central1-a", inst.Name, fmt.Sprintf(`CAA-GCP-T4-LAYERS {"removed":3,"removed_bytes":%d,"pending":0,"pending_bytes":0,"free_bytes":%d,"error":"\u001b[31mx"}`+"\n", 3*gib/2, 18*gib))
	evs := api.waitEvents(t, "layers removed", hasReason(podevent.ReasonLayers))
	l := layersEvents(api)
	if len(l) != 1 || l[0].Type != "Normal" || !strings.Contains(l[0].Message, "removed 3 layer directories (1536.0 MiB) that failed image pulls left") ||
		!strings.Contains(l[0].Message, "18.0 GiB left") || l[0].Labels[podevent.PhaseLabel] != podevent.PhaseLayers || l[0].Labels[podevent.PodVMLabel] != inst.Name {
		t.Fatalf("layers Event %+v (all: %v)", l, reasons(evs))
	}
	// Pulls in flight or failed hold more than is left: a warning, the
	// same Event counted again.
	fake.AppendSerialOutput("us-central1-a", inst.Name, fmt.Sprintf(`[  812.5] CAA-GCP-T4-LAYERS {"removed":0,"removed_bytes":0,"pending":7,"pending_bytes":%d,"free_bytes":%d}`+"\n", 6*gib, gib))
	api.waitEvents(t, "disk filling", func(evs []storedEvent) bool {
		l := layersEvents(api)
		return len(l) == 1 && l[0].Count == 2
	})
	l = layersEvents(api)
	if l[0].Type != "Warning" || !strings.Contains(l[0].Message, "its disk is filling: 7 unpacked layer directories") || !strings.Contains(l[0].Message, "6144.0 MiB, more than the 1024.0 MiB left") {
		t.Fatalf("disk-filling Event %s %q", l[0].Type, l[0].Message)
	}
	// The raw Event for the escape (its signature is base64url, which can
	// hold "-5"); the message for the forged negative counts.
	if strings.Contains(string(l[0].raw), "\u001b") || strings.Contains(l[0].Message, "-5") || strings.Contains(l[0].Message, " -") {
		t.Errorf("Event carries what the forged lines held: %s", l[0].raw)
	}
	// Every container started: the watch ends on its own, and reads no
	// more of the console.
	api.containersRunning("ml", "llm-0")
	waitWatchDone(t, p, inst.Name)
	reads := fake.CountCalls("instances.getSerialPortOutput")
	fake.AppendSerialOutput("us-central1-a", inst.Name, fmt.Sprintf(`CAA-GCP-T4-LAYERS {"removed":1,"removed_bytes":%d,"pending":0,"free_bytes":%d}`+"\n", gib, gib))
	if err := p.Teardown(); err != nil {
		t.Fatal(err)
	}
	if n := fake.CountCalls("instances.getSerialPortOutput"); n != reads {
		t.Errorf("the console was read %d more times after every container started", n-reads)
	}
	if l := layersEvents(api); len(l) != 1 || l[0].Count != 2 {
		t.Errorf("after the watch ended: %+v", l)
	}
}

// A podVM whose sweep keeps reporting (a pull failing in a loop) updates
// its pod's Event at most layersTellMax times.
func TestLayersLinesBounded(t *testing.T) {
	fake, api, p, inst := watchedPodVM(t)
	var b strings.Builder
	b.WriteString(gpuReadyLine + "\n")
	for i := range 3 * layersTellMax {
		fmt.Fprintf(&b, `CAA-GCP-T4-LAYERS {"removed":%d,"removed_bytes":4096,"pending":0,"free_bytes":4096}`+"\n", i+1)
	}
	fake.SetSerialOutput("us-central1-a", inst.Name, b.String())
	api.waitEvents(t, "told", func([]storedEvent) bool {
		l := layersEvents(api)
		return len(l) == 1 && l[0].Count == layersTellMax
	})
	api.sandboxReady("ml", "llm-0")
	api.containersRunning("ml", "llm-0")
	waitWatchDone(t, p, inst.Name)
	if err := p.Teardown(); err != nil {
		t.Fatal(err)
	}
	if l := layersEvents(api); len(l) != 1 || l[0].Count != layersTellMax || !strings.Contains(l[0].Message, fmt.Sprintf("removed %d layer", layersTellMax)) {
		t.Fatalf("layers Event %+v, want one, counted %d times", l, layersTellMax)
	}
}
