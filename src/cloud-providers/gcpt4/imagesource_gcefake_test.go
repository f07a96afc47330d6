// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

func digestOf(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

// withContainers gives a pod its spec: init containers first, then the
// rest, as name=image pairs.
func (a *eventAPI) withContainers(ns, name string, init, containers [][2]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	list := func(cs [][2]string) []any {
		var out []any
		for _, c := range cs {
			out = append(out, map[string]any{"name": c[0], "image": c[1]})
		}
		return out
	}
	a.pods[ns+"/"+name]["spec"] = map[string]any{"initContainers": list(init), "containers": list(containers)}
}

// started marks the init containers ended and the others running.
func (a *eventAPI) started(ns, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pod := a.pods[ns+"/"+name]
	spec := pod["spec"].(map[string]any)
	st := pod["status"].(map[string]any)
	statuses := func(key, state string) []any {
		var out []any
		cs, _ := spec[key].([]any)
		for _, c := range cs {
			out = append(out, map[string]any{"name": c.(map[string]any)["name"], "state": map[string]any{state: map[string]any{}}})
		}
		return out
	}
	st["initContainerStatuses"] = statuses("initContainers", "terminated")
	st["containerStatuses"] = statuses("containers", "running")
}

type imageEvent struct{ route, typ, msg string }

func imageEvents(api *eventAPI) map[string]imageEvent {
	out := map[string]imageEvent{}
	for _, e := range api.list() {
		if e.Reason == podevent.ReasonImage {
			out[e.Annotations[eventContainerAnnotation]] = imageEvent{e.Annotations[eventImageRouteAnnotation], e.Type, e.Message}
		}
	}
	return out
}

// Each container's start is told with where its image came from, read
// from the mirror's pull lines and the cache disk's line: the store (a
// manifest served, no layer), the mirror (a layer served, and why the
// store missed), the registry (a digest the cache lacks, a tag, an image
// the mirror never heard of, no disk), an earlier pull in the podVM.
// Forged pull lines decide nothing.
func TestImageSourceToldPerContainer(t *testing.T) {
	a, b, c, d := digestOf('a'), digestOf('b'), digestOf('c'), digestOf('d')
	pulls := "CAA-GCP-T4-PULL {\"image\":\"" + a + "\",\"served\":\"manifest\"}\n" +
		"CAA-GCP-T4-PULL {\"image\":\"" + b + "\",\"served\":\"manifest\"}\n" +
		"[  301.2] CAA-GCP-T4-PULL {\"image\":\"" + b + "\",\"served\":\"layers\"}\n" +
		"CAA-GCP-T4-PULL {\"image\":\"" + c + "\",\"served\":\"absent\"}\n" +
		// Forged: no digest, an unknown kind, quoted.
		"CAA-GCP-T4-PULL {\"image\":\"sha256:zz\",\"served\":\"layers\"}\n" +
		"CAA-GCP-T4-PULL {\"image\":\"" + d + "\",\"served\":\"everything\"}\n" +
		"echo CAA-GCP-T4-PULL {\"image\":\"" + d + "\",\"served\":\"manifest\"}\n"
	init := [][2]string{{"fetch", "reg.example/team/app@" + a}}
	containers := [][2]string{
		{"app", "reg.example/team/app@" + a},
		{"side", "reg.example/team/side@" + b},
		{"gone", "reg.example/team/gone@" + c},
		{"tagged", "reg.example/team/app:1.0"},
		{"never", "reg.example/team/\x1b[31mnever@" + d},
	}
	for _, tc := range []struct {
		name, store string
		want        map[string]imageEvent
	}{
		{name: "store in use", store: `CAA-GCP-T4-STORE {"state":"in-use","images":2,"integrity":"dm-verity"}`,
			want: map[string]imageEvent{
				"fetch":  {"store", "Normal", "from the pre-unpacked store on the podVM's cache disk: no layer pulled or unpacked"},
				"app":    {"store", "Normal", "from the pre-unpacked store"},
				"side":   {"mirror", "Normal", "through the podVM's cache mirror, unpacked in the podVM: the image is not in the pre-unpacked store"},
				"gone":   {"registry", "Warning", "from its registry: the cache disk does not hold it"},
				"tagged": {"registry", "Warning", "named by tag, and the cache serves images pinned by digest only"},
				"never":  {"registry", "Warning", "the cache mirror was never asked for it"},
			}},
		{name: "store unused", store: `CAA-GCP-T4-STORE {"state":"unused","miss":"other-guest-components","reason":"x"}`,
			want: map[string]imageEvent{
				"app":  {"podvm", "Normal", "already in the podVM: an earlier pull in this podVM had it; the podVM's pre-unpacked store is not in use (other-guest-components)"},
				"side": {"mirror", "Normal", "the podVM's pre-unpacked store is not in use (other-guest-components)"},
			}},
		{name: "disk not opened", store: `CAA-GCP-T4-STORE {"state":"unused","miss":"verity-refused","reason":"x"}`,
			want: map[string]imageEvent{
				"app": {"registry", "Warning", "the podVM's cache disk was not opened (verity-refused)"},
			}},
		{name: "no cache disk",
			want: map[string]imageEvent{
				"app":    {"registry", "Normal", "from its registry: the podVM has no cache disk"},
				"tagged": {"registry", "Normal", "the podVM has no cache disk"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, api, p, inst := watchedPodVM(t)
			api.withContainers("ml", "llm-0", init, containers)
			console := gpuReadyLine + "\n"
			if tc.store != "" {
				console = tc.store + "\n" + console + pulls
			}
			fake.SetSerialOutput("us-central1-a", inst.Name, console)
			api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
			api.sandboxReady("ml", "llm-0")
			api.started("ml", "llm-0")
			waitWatchDone(t, p, inst.Name)
			api.waitEvents(t, "every container told", func([]storedEvent) bool { return len(imageEvents(api)) == 6 })
			if err := p.Teardown(); err != nil {
				t.Fatal(err)
			}
			got := imageEvents(api)
			for name, w := range tc.want {
				g := got[name]
				if g.route != w.route || g.typ != w.typ || !strings.Contains(g.msg, w.msg) {
					t.Errorf("container %s: %s %s %q, want %s %s, saying %q", name, g.route, g.typ, g.msg, w.route, w.typ, w.msg)
				}
			}
			if strings.Contains(got["never"].msg, "\x1b") {
				t.Errorf("the image name's escape reached the Event: %q", got["never"].msg)
			}
		})
	}
}
