// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// After CreateInstance returns, CAA waits for the podVM's agent and the
// provider hears nothing more until DeleteInstance. What happens in
// between (the boot, the GPU, a failure) is printed on the VM's serial
// console, which GCE keeps while the VM exists and which is gone with it.
// So for each podVM it created, the provider reads the console while the
// podVM starts (instances.getSerialPortOutput, from where it last read)
// and tells the pod what it finds; it watches the pod for the sandbox to
// become ready (CAA reached the agent), and then, while the agent pulls
// the pod's images, until every container has started, which ends the
// watch: a pull that fails part-way is only seen in the podVM (its
// sweep's line, docs/cache.md "A failed pull"). And when CAA
// deletes a podVM that never got that far, the provider reads the console
// once more first and keeps its last lines (an Event and its log), so
// nobody has to race the delete for them.

// Bounds of the watch: the first read is at once (a fast boot is seen
// fast), then the interval grows to at most bootPollMax, so a podVM costs
// a few dozen reads. bootWatchLimit ends a watch that saw nothing
// conclusive: the kubelet's longest wait for a sandbox is the kata-remote
// create budget (docs/startup.md), far below it.
const (
	bootPollFirst  = time.Second
	bootPollMax    = 10 * time.Second
	bootWatchLimit = 45 * time.Minute
	consoleTimeout = 20 * time.Second
)

// bootWatch is one podVM's watch.
type bootWatch struct {
	vm podVM
	// gpus is what the VM was created with (its shape's GPUs), which
	// gpu-init's count must match.
	gpus    int64
	zone    string
	ip      string
	created time.Time
	cancel  context.CancelFunc
	done    chan struct{}

	mu        sync.Mutex
	console   consoleReader
	booted    bool
	bootedAt  time.Time
	reachable bool
	failed    bool
	// noConsole is set once reading the console was refused (the IAM
	// permission is missing): said once, then only the pod is watched; and
	// when a VM past its agent stopped (consoleGone), whose loss the pod's
	// side tells.
	noConsole bool
	// cacheTold: the cache disk's line was told on the pod (once a boot).
	cacheTold bool
	// layersTold counts the sweep's lines told on the pod (at most
	// layersTellMax: the Event's count and message carry the rest).
	layersTold int
	// storeState is the cache disk's line's state: in-use, the miss, or
	// "" before (or without) one; pulls what the mirror said it served of
	// each image (imagesource.go); imageTold and imageWaits per container.
	storeState string
	pulls      map[string]string
	imageTold  map[string]bool
	imageWaits map[string]int
}

// layersTellMax bounds how often one podVM's sweep lines update its pod's
// Event: a pull failing in a loop for the watch's whole life is told, but
// not every 30 seconds for 45 minutes.
const layersTellMax = 10

// watchBoot starts the watch of a podVM CreateInstance returns. Without a
// cluster API (no Events to post) there is nothing to watch for.
func (p *Provider) watchBoot(vm podVM, inst *provider.Instance, gpus int64) {
	if p.events == nil || inst == nil {
		return
	}
	zone, name := parseInstanceID(inst.ID)
	w := &bootWatch{vm: vm, gpus: gpus, zone: zone, created: time.Now(), done: make(chan struct{})}
	if len(inst.IPs) > 0 {
		w.ip = inst.IPs[0].String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cancel()
		return
	}
	if p.watches == nil {
		p.watches = map[string]*bootWatch{}
	}
	if old := p.watches[name]; old != nil {
		// CAA retried the create of the same pod and sandbox and got the
		// same VM back: one watch is enough.
		p.mu.Unlock()
		cancel()
		return
	}
	p.watches[name] = w
	p.mu.Unlock()
	go p.runWatch(ctx, w)
}

func (p *Provider) runWatch(ctx context.Context, w *bootWatch) {
	defer close(w.done)
	interval := p.bootPoll
	if interval == 0 {
		interval = bootPollFirst
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if !w.isNoConsole() {
			p.readConsole(ctx, w)
		}
		if w.isFailed() || time.Since(w.created) > bootWatchLimit {
			return
		}
		if !w.isReachable() && p.checkSandbox(ctx, w) && !w.isReachable() {
			return // the pod is gone, or is another pod now
		}
		if w.isReachable() && (w.isNoConsole() || p.followContainers(ctx, w)) {
			return
		}
		timer.Reset(interval)
		interval = min(interval*3/2, max(p.bootPoll, bootPollMax))
	}
}

func (w *bootWatch) isNoConsole() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.noConsole
}

func (w *bootWatch) isReachable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reachable
}

func (w *bootWatch) isFailed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// readConsole reads what the console printed since the last read and
// records the phases its lines tell.
func (p *Provider) readConsole(ctx context.Context, w *bootWatch) {
	ctx, cancel := context.WithTimeout(ctx, consoleTimeout)
	defer cancel()
	w.mu.Lock()
	start := w.console.next
	w.mu.Unlock()
	out, err := p.instances.GetSerialPortOutput(ctx, &computepb.GetSerialPortOutputInstanceRequest{
		Project: p.cfg.ProjectID, Zone: w.zone, Instance: w.vm.name, Port: proto.Int32(1), Start: proto.Int64(start),
	})
	if err != nil {
		var ge *googleapi.Error
		if errors.As(err, &ge) && ge.Code == http.StatusBadRequest && len(ge.Errors) > 0 && ge.Errors[0].Reason == "resourceNotReady" {
			p.consoleGone(ctx, w)
			return
		}
		if errors.As(err, &ge) && ge.Code == http.StatusForbidden {
			w.mu.Lock()
			w.noConsole = true
			w.mu.Unlock()
			p.log.Printf("%s, podVM %s: reading its serial console was refused (%v): grant compute.instances.getSerialPortOutput on podvm-* instances (gcp-t4 preflight prints the role); its boot is not reported on the pod", w.vm.podRef(), w.vm.name, err)
		}
		return
	}
	w.mu.Lock()
	lines := w.console.feed(out.GetStart(), out.GetNext(), out.GetContents())
	w.mu.Unlock()
	for _, l := range lines {
		p.consoleLineSeen(w, l)
	}
}

// consoleGone: GCE serves a console only while its VM runs. A podVM that
// stopped before its agent was reached either powered itself off (its
// boot failed: podvm's boot-failed) or was preempted (Spot); either way
// what the console said so far is all there will be.
func (p *Provider) consoleGone(ctx context.Context, w *bootWatch) {
	// Past the agent, the watch reads the console only to follow the
	// containers: a VM that stopped now is a lost podVM, which the pod's
	// side tells (tellIfLost), not a boot that failed. Read no more of it.
	w.mu.Lock()
	if w.reachable {
		w.noConsole = true
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	inst, err := p.getInstance(ctx, w.zone, w.vm.name)
	if err != nil || inst.GetStatus() == "RUNNING" || inst.GetStatus() == "PROVISIONING" || inst.GetStatus() == "STAGING" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed {
		return
	}
	w.failed = true
	msg := fmt.Sprintf("%s (podVM %s is %s): a Spot preemption, or its boot failed and it powered itself off; GCE serves no console of a stopped VM, so %s",
		failureTitle(podevent.FailureStopped), w.vm.name, inst.GetStatus(), consoleFacts(w.console.lastLines()))
	p.log.Printf("%s, podVM %s: %s", w.vm.podRef(), w.vm.name, msg)
	p.events.record(podEvent{namespace: w.vm.namespace, pod: w.vm.podName, podVM: w.vm.name, phase: podevent.PhaseFailed, warning: true, at: time.Now(),
		annotations: map[string]string{podevent.FailureAnnotation: podevent.FailureStopped, podevent.ZoneAnnotation: w.zone}, message: msg})
}

// gpuMismatch says that the guest found other GPUs than the VM was created
// with: the pod gets what the guest has, not what it was granted.
func gpuMismatch(found int, created int64) string {
	return fmt.Sprintf("; but the podVM was created with %d GPU(s): the pod sees %d, not what it asked for (a GPU that did not come up, or a podVM image that misreports them)", created, found)
}

// consoleLineSeen records the phase a console line tells, once.
func (p *Provider) consoleLineSeen(w *bootWatch, l consoleLine) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed {
		return
	}
	now := time.Now()
	ev := podEvent{namespace: w.vm.namespace, pod: w.vm.podName, podVM: w.vm.name, at: now}
	switch {
	case l.gpu != nil && l.gpu.State == "ready" && !w.booted:
		w.booted, w.bootedAt = true, now
		ev.phase = podevent.PhaseBooted
		ev.annotations = map[string]string{podevent.DriverAnnotation: l.gpu.Driver, podevent.GPUCountAnnotation: strconv.Itoa(l.gpu.GPUs), podevent.ZoneAnnotation: w.zone}
		ev.message = fmt.Sprintf("podVM %s booted, GPU ready: %d GPU(s), NVIDIA driver %s (gpu-init took %s), %s after it was created", w.vm.name, l.gpu.GPUs, l.gpu.Driver, (time.Duration(l.gpu.Ms) * time.Millisecond).Round(100*time.Millisecond), now.Sub(w.created).Round(time.Second))
		if int64(l.gpu.GPUs) != w.gpus {
			ev.warning = true
			ev.message += gpuMismatch(l.gpu.GPUs, w.gpus)
		}
	case l.gpu != nil && l.gpu.State == "no-gpu" && !w.booted:
		w.booted, w.bootedAt = true, now
		ev.phase = podevent.PhaseBooted
		ev.annotations = map[string]string{podevent.GPUCountAnnotation: "0", podevent.ZoneAnnotation: w.zone}
		ev.message = fmt.Sprintf("podVM %s booted without a GPU, %s after it was created", w.vm.name, now.Sub(w.created).Round(time.Second))
		if w.gpus != 0 {
			ev.warning = true
			ev.message += gpuMismatch(0, w.gpus)
		}
	case l.gpu != nil && l.gpu.State == "failed":
		w.failed = true
		ev.phase, ev.warning = podevent.PhaseFailed, true
		ev.annotations = map[string]string{podevent.FailureAnnotation: podevent.FailureGPU}
		ev.message = fmt.Sprintf("%s: gpu-init failed at %s: %s; %s", failureTitle(podevent.FailureGPU), l.gpu.Step, l.gpu.Reason, consoleFacts(w.console.lastLines()))
	case l.pull != nil:
		w.notePull(l.pull)
		return
	case l.store != nil && !w.cacheTold:
		w.cacheTold = true
		w.storeState = cmp.Or(l.store.Miss, l.store.State)
		ev.phase = podevent.PhaseCache
		ev.annotations = map[string]string{eventCacheStateAnnotation: l.store.State}
		switch {
		case l.store.State == "in-use":
			ev.message = fmt.Sprintf("podVM %s: its cache disk's pre-unpacked images are in use (%d, read through %s): a cached image starts without a pull", w.vm.name, l.store.Images, cmp.Or(l.store.Integrity, "the disk"))
		case l.store.diskUnused():
			// The disk is not the one the admin's root hash names, or
			// the podVM has no hash: nothing on it is used.
			ev.warning = true
			ev.annotations[eventCacheMissAnnotation] = l.store.Miss
			ev.message = fmt.Sprintf("podVM %s: its cache disk is not used (%s): %s; images come from their registries: check GCP_CACHE_VERITY (or the profile's cacheVerity) against the .verity file gcp-t4 cache build wrote for the cache image", w.vm.name, l.store.Miss, l.store.Reason)
		default:
			// A disk with a layout only (no-store) is a setting, not a
			// fault: said, not warned.
			ev.warning = l.store.Miss != "no-store"
			ev.annotations[eventCacheMissAnnotation] = l.store.Miss
			ev.message = fmt.Sprintf("podVM %s: its cache disk's pre-unpacked images are not used (%s): %s; images come through the podVM's cache mirror, else their registries", w.vm.name, l.store.Miss, l.store.Reason)
		}
	case l.layers != nil:
		if !l.layers.tell() || w.layersTold >= layersTellMax {
			return
		}
		w.layersTold++
		ev.phase = podevent.PhaseLayers
		r := l.layers
		if r.Removed > 0 {
			ev.message = fmt.Sprintf("podVM %s: removed %d layer director%s (%s) that failed image pulls left unpacked (a pull that fails part-way starts from zero); %s left on its disk",
				w.vm.name, r.Removed, plural(r.Removed, "y", "ies"), byteSize(r.RemovedBytes), byteSize(r.FreeBytes))
		} else {
			ev.warning = true
			ev.message = fmt.Sprintf("podVM %s: its disk is filling: %d unpacked layer director%s of image pulls in flight or failed hold %s, more than the %s left; a pull that fails part-way starts from zero, and its layers are removed once a later pull succeeds (docs/cache.md)",
				w.vm.name, r.Pending, plural(r.Pending, "y", "ies"), byteSize(r.PendingBytes), byteSize(r.FreeBytes))
		}
	case l.failure != "":
		w.failed = true
		ev.phase, ev.warning = podevent.PhaseFailed, true
		ev.annotations = map[string]string{podevent.FailureAnnotation: l.failure}
		// The line itself first: readers that show one line (gcp-t4
		// status, kubectl get events) show the cause.
		ev.message = fmt.Sprintf("%s (podVM %s): %s; %s", failureTitle(l.failure), w.vm.name, l.text, consoleFacts(w.console.lastLines()))
	default:
		return
	}
	if ev.phase == podevent.PhaseFailed {
		p.log.Printf("%s, podVM %s: %s", w.vm.podRef(), w.vm.name, ev.message)
	}
	p.events.record(ev)
}

// checkSandbox reads the pod; true ends the watch: the sandbox is ready
// (CAA reached the agent), or the pod is gone or is another pod now.
func (p *Provider) checkSandbox(ctx context.Context, w *bootWatch) bool {
	pod, gone, ok := p.watchedPod(ctx, w)
	if gone || !ok {
		return gone
	}
	at, ready := pod.sandboxReady()
	if !ready {
		return false
	}
	w.mu.Lock()
	w.reachable = true
	// The condition's time has one-second resolution and the console is
	// read every few seconds: a boot seen after the condition's second
	// still came first, and a sandbox ready within the podVM's first
	// second is not ready before it was created (a real CAA run showed
	// "-1s after the podVM was created").
	if at.IsZero() || at.Before(w.bootedAt) || at.Before(w.created) {
		at = w.created
		if w.bootedAt.After(at) {
			at = w.bootedAt
		}
	}
	w.mu.Unlock()
	p.events.record(podEvent{
		namespace: w.vm.namespace, pod: w.vm.podName, podVM: w.vm.name, phase: podevent.PhaseReachable, at: at,
		annotations: map[string]string{podevent.IPAnnotation: w.ip, podevent.ZoneAnnotation: w.zone},
		message:     fmt.Sprintf("the adaptor reached the agent of podVM %s at %s: the pod's sandbox is ready, %s after the podVM was created", w.vm.name, w.ip, at.Sub(w.created).Round(time.Second)),
	})
	return true
}

// followContainers reads the pod and tells, for each container that has
// started, where its image came from; true ends the watch: every
// container has started and been told, or the pod is gone. Until then the
// agent may be pulling, and the console is still read for the mirror's
// and the sweep's lines.
func (p *Provider) followContainers(ctx context.Context, w *bootWatch) bool {
	pod, gone, ok := p.watchedPod(ctx, w)
	if gone || !ok {
		return gone
	}
	started := map[string]bool{}
	for _, c := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if c.started() {
			started[c.Name] = true
		}
	}
	specs := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	all := len(specs) > 0
	for i, c := range specs {
		if !started[c.Name] || !p.tellImage(w, i, c.Name, c.Image) {
			all = false
		}
	}
	return all
}

// byteSize is n bytes for a person: MiB, or GiB from 10 GiB.
func byteSize(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// watchedPod reads the watch's pod: gone when the API server says it is
// not there, ok when it was read.
func (p *Provider) watchedPod(ctx context.Context, w *bootWatch) (pod podState, gone, ok bool) {
	pod, status, err := p.events.pod(ctx, w.vm.namespace, w.vm.podName)
	if err != nil {
		return pod, false, false
	}
	return pod, status == http.StatusNotFound, status == http.StatusOK
}

// podState is the part of a pod the watch reads.
type podState struct {
	Metadata struct {
		DeletionTimestamp string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type               string `json:"type"`
			Status             string `json:"status"`
			LastTransitionTime string `json:"lastTransitionTime"`
		} `json:"conditions"`
		ContainerStatuses     []containerStatus `json:"containerStatuses"`
		InitContainerStatuses []containerStatus `json:"initContainerStatuses"`
	} `json:"status"`
	Spec struct {
		Containers     []containerSpec `json:"containers"`
		InitContainers []containerSpec `json:"initContainers"`
	} `json:"spec"`
}

type containerStatus struct {
	Name      string                     `json:"name"`
	State     map[string]json.RawMessage `json:"state"`
	LastState map[string]json.RawMessage `json:"lastState"`
}

type containerSpec struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// sandboxReady: the kubelet sets PodReadyToStartContainers once the
// sandbox is created and its network configured (on by default since
// Kubernetes 1.29); for kata-remote that is after CAA's StartVM returned,
// which is when CAA reached the agent. A container already started or
// ended says the same on clusters without the condition.
func (ps podState) sandboxReady() (time.Time, bool) {
	for _, c := range ps.Status.Conditions {
		if c.Type == "PodReadyToStartContainers" && c.Status == "True" {
			at, _ := time.Parse(time.RFC3339, c.LastTransitionTime)
			return at, true
		}
	}
	for _, cs := range ps.Status.ContainerStatuses {
		if cs.State["running"] != nil || cs.State["terminated"] != nil {
			return time.Time{}, true
		}
	}
	return time.Time{}, false
}

// pod reads a pod with the adaptor's ServiceAccount (RBAC get on pods,
// which CAA has for its PeerPods).
func (r *eventRecorder) pod(ctx context.Context, namespace, name string) (podState, int, error) {
	var ps podState
	status, body, err := r.do(ctx, http.MethodGet, strings.TrimSuffix(r.api.URL, "/")+"/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), "", nil)
	if err != nil || status != http.StatusOK {
		return ps, status, err
	}
	if err := json.Unmarshal(body, &ps); err != nil {
		return ps, status, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	return ps, status, nil
}

// stopWatch ends a podVM's watch and returns it (nil if none).
func (p *Provider) stopWatch(name string) *bootWatch {
	p.mu.Lock()
	w := p.watches[name]
	delete(p.watches, name)
	p.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
	return w
}

// beforeDelete runs before CAA's delete of a podVM: a podVM whose agent
// was never reached failed to start (or its pod went away first), and its
// console is read once more so that its last lines outlive it, in an
// Event on the pod and the adaptor's log.
func (p *Provider) beforeDelete(ctx context.Context, zone, name string) {
	w := p.stopWatch(name)
	if w == nil {
		return
	}
	defer p.events.record(podEvent{podVM: name, namespace: w.vm.namespace, pod: w.vm.podName}) // forget it
	if w.isReachable() {
		if zone == "" {
			zone = w.zone
		}
		p.tellIfLost(ctx, w, zone, name)
		return
	}
	if zone == "" {
		zone = w.zone
	}
	if !w.noConsole {
		p.readConsole(ctx, w)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tail := w.console.lastLines()
	p.log.Printf("%s, podVM %s is deleted before its agent was reached; %s", w.vm.podRef(), name, consoleFacts(tail))
	if w.failed {
		return
	}
	w.failed = true
	class, probe := podevent.FailureNotReady, ""
	if w.booted {
		// A booted podVM CAA deletes unreached is blamed on the network
		// only when the node cannot open the agent's port now: CAA also
		// gives up for its own reasons (its socket, TLS, the kata-remote
		// deadline), and a firewall hint then sends the admin the wrong way.
		class, probe = p.probeAgent(ctx, w.ip)
	}
	msg := fmt.Sprintf("%s (podVM %s in %s, deleted %s after it was created", failureTitle(class), name, zone, time.Since(w.created).Round(time.Second))
	if w.booted && !w.bootedAt.IsZero() {
		msg += fmt.Sprintf(", %s after it booted", time.Since(w.bootedAt).Round(time.Second))
	}
	msg += ")"
	switch class {
	case podevent.FailureAgentUnreachable:
		msg += fmt.Sprintf("; %s: check that the firewall lets the nodes reach podVMs on tcp:15150 and udp:4789 (gcp-t4 preflight checks it) and the adaptor's log on %s", probe, p.nodeRef())
	case podevent.FailureAdaptor:
		msg += fmt.Sprintf("; %s, so the network is not the cause: the adaptor's log on %s says why it gave up (a TLS or protocol error with the agent, its own socket, the pod's kata-remote deadline, or its own shutdown (SIGTERM: a rolling update of its DaemonSet or a node drain cancels the starts in flight, and kubelet retries the sandbox once the adaptor is back); see the pod's other Events)", probe, p.nodeRef())
	default:
		msg += "; if the pod was not deleted, the adaptor gave up waiting for it (see the pod's other Events and the kata-remote timeouts in docs/startup.md)"
	}
	p.events.record(podEvent{
		namespace: w.vm.namespace, pod: w.vm.podName, podVM: name, phase: podevent.PhaseFailed, warning: true, at: time.Now(),
		annotations: map[string]string{podevent.FailureAnnotation: class, podevent.ZoneAnnotation: zone},
		message:     msg + "; " + consoleFacts(tail),
	})
}

// stopWatches ends every watch (Teardown).
func (p *Provider) stopWatches() {
	p.mu.Lock()
	names := make([]string, 0, len(p.watches))
	for n := range p.watches {
		names = append(names, n)
	}
	p.mu.Unlock()
	for _, n := range names {
		p.stopWatch(n)
	}
}

// podRef names the pod in log lines: namespace/name, or the name alone
// when CAA's cloud-config did not say the namespace.
func (vm podVM) podRef() string {
	if vm.namespace == "" {
		return "pod " + vm.podName
	}
	return "pod " + vm.namespace + "/" + vm.podName
}

// agentPort is the agent-protocol-forwarder's port CAA dials on a podVM:
// its FORWARDER_PORT setting, upstream's default 15150 when unset
// (pkg/forwarder/forwarder.go DefaultListenPort, cmd/cloud-api-adaptor
// main.go's forwarder-port flag, at v0.22.0).
func agentPort() string {
	if v, ok := osLookup("FORWARDER_PORT"); ok && v != "" {
		return v
	}
	return "15150"
}

// agentProbeTimeout bounds the probe: a dropped SYN (a firewall) shows
// as a timeout, and the delete it runs before waits no longer.
const agentProbeTimeout = 3 * time.Second

// probeAgent opens, and at once closes, a TCP connection from the node to
// the podVM's agent port, as CAA's proxy does before its TLS handshake:
// podevent.FailureAgentUnreachable with what failed when it cannot, podevent.FailureAdaptor
// when it can. Without an address there is nothing to probe and the
// network is not ruled out.
func (p *Provider) probeAgent(ctx context.Context, ip string) (class, what string) {
	if ip == "" {
		return podevent.FailureAgentUnreachable, "the podVM's address is unknown, so the node's reach to it was not checked"
	}
	addr := net.JoinHostPort(ip, agentPort())
	ctx, cancel := context.WithTimeout(ctx, agentProbeTimeout)
	defer cancel()
	dial := p.dialAgent
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return podevent.FailureAgentUnreachable, fmt.Sprintf("the node cannot open tcp %s now (%s)", addr, cleanConsoleLine(err.Error()))
	}
	_ = conn.Close()
	return podevent.FailureAdaptor, fmt.Sprintf("the node opens tcp %s now", addr)
}

// nodeRef names the adaptor's node in a message: CAA's NODE_NAME, or the
// pod's node when the adaptor was not told its own.
func (p *Provider) nodeRef() string {
	if p.cfg.NodeName == "" {
		return "the pod's node"
	}
	return "node " + p.cfg.NodeName
}
