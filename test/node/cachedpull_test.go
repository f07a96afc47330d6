package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// imageConfig is the modelled registry's config digest of the harness's
// image (the stand-in's -image): what image-rs looks a stored image up by.
const imageConfig = "sha256:" + "c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1c0f1"

// TestKataRemoteCachedPull is issue 54's cached-image scenario and the
// stand-in's two further image-rs behaviours, each on the GPU pod of the
// first scenario through the whole chain:
//
//   - store: the 4-minute image of TestKataRemoteLongPull, with the
//     provider configured with a cache disk (GCP_CACHE_IMAGE): the podVM
//     CAA creates has the disk and its dm-verity value, so its stand-in
//     starts with the image's config digest in image_db (the pre-unpacked
//     store, modelled: the disk holds no bytes here), and the pod goes
//     Running with no pull and no kubelet failure;
//   - failed-pull: a 40-second pull whose first attempt fails halfway:
//     image-rs keeps nothing of it, so kubelet's retry pulls all over
//     again; the pod goes Running after both.
func TestKataRemoteCachedPull(t *testing.T) {
	k := kataOrSkip(t)
	t.Run("store", func(t *testing.T) {
		vk := k
		vk.AgentPull = longPull
		vk.AgentImages = map[string]string{Image: imageConfig}
		vk.Cache = []string{imageConfig}
		r := imageRun(t, &vk)
		if r.pulls != 0 || r.found == 0 {
			t.Errorf("the agent pulled %d times and found the image stored %d times; want it found in the pre-unpacked store, no pull", r.pulls, r.found)
		}
		if r.failed != 0 {
			t.Errorf("kubelet recorded %d Failed Events; want none with the image in the store", r.failed)
		}
		if !r.cacheDisk {
			t.Error("the podVM CAA created has no cache disk with its dm-verity value")
		}
	})
	t.Run("failed-pull", func(t *testing.T) {
		vk := k
		vk.AgentPull = 40 * time.Second
		vk.AgentPullFailures = 1
		r := imageRun(t, &vk)
		if r.pullFailures != 1 || r.pulls < 2 {
			t.Errorf("%d modelled failures and %d pulls begun; want 1 failure and a second whole pull", r.pullFailures, r.pulls)
		}
		if r.failed == 0 {
			t.Error("kubelet recorded no Failed Event for the failed pull")
		}
	})
}

// imageResult is what one image scenario saw.
type imageResult struct {
	running                    time.Duration
	pulls, found, pullFailures int // the agent's pulls begun, stored finds, modelled failures
	failed                     int // kubelet's Failed Events (× count)
	cacheDisk                  bool
}

func imageRun(t *testing.T, k *Kata) imageResult {
	ks := startKata(t, k)
	ph, ctx, cs, n := ks.ph, ks.ctx, ks.cs, ks.n
	const name = "vllm"
	created := time.Now()
	if _, err := cs.CoreV1().Pods(gpuNamespace).Create(ctx, gpuPod(n.Name, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var r imageResult
	var waits []string
	if err := poll(ctx, "pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && (len(waits) == 0 || !strings.HasPrefix(waits[len(waits)-1], w.Reason+" ")) {
				waits = append(waits, fmt.Sprintf("%s at %.0fs", w.Reason, time.Since(created).Seconds()))
			}
		}
		return containersRunning(p), string(p.Status.Phase) + " " + containerState(p)
	}); err != nil {
		t.Error(err)
	}
	r.running = time.Since(created)
	ph.done("pod created → Running")
	running, err := listGCE(ctx, ks.pp.GCE, ks.pp.Project)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range running {
		r.cacheDisk = r.cacheDisk || vm.hasCache()
	}

	t.Logf("modelled pull %s, %d failing first; cache disk: %t, store %v", k.AgentPull, k.AgentPullFailures, r.cacheDisk, k.Cache)
	t.Logf("time to Running: %.1fs", r.running.Seconds())
	t.Logf("container waits, in order: %s", strings.Join(waits, "; "))
	evs, err := cs.CoreV1().Events(gpuNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		t.Logf("event %s %s/%s x%d: %s", e.Type, e.Source.Component, e.Reason, e.Count, clip(e.Message))
		if e.Source.Component == "kubelet" && e.Reason == "Failed" {
			r.failed += int(e.Count)
		}
	}
	for i := range n.PodVMLogs() {
		for _, l := range n.LogLines(fmt.Sprintf("podvm-%d", i+1), "pull ", "listening on") {
			if !strings.Contains(l, "[stand-in kata-agent]") {
				continue
			}
			t.Logf("podVM %d: %s", i+1, clip(l))
			switch {
			case strings.Contains(l, "not stored; pulling"):
				r.pulls++
			case strings.Contains(l, "found in image_db"):
				r.found++
			case strings.Contains(l, "failed after"):
				r.pullFailures++
			}
		}
	}
	for _, l := range n.LogLines("containerd", "CreateContainer within sandbox", "failed to create containerd container") {
		t.Logf("containerd: %s", clip(l))
	}
	t.Logf("agent: %d pulls begun, %d found stored, %d failed; kubelet: %d Failed (x count) Events", r.pulls, r.found, r.pullFailures, r.failed)

	ks.deleteLeavingNoVMs(t, name)
	stopAndCheck(t, n, ph)
	return r
}
