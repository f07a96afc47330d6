package node

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestKataRemoteCAARestart is issue 54's adaptor-restarted scenario: the
// GPU pod of TestKataRemotePodThroughCAA is being started when CAA's
// process is killed (SIGKILL: a crash, an OOM kill) and started again at
// once with the same flags and environment, as the DaemonSet's container
// restarts. Two moments:
//
//   - at-insert: the podVM's instance has just appeared in GCE (CAA is in
//     the shim's CreateVM/StartVM: waiting for the insert, the boot, the
//     agent);
//   - mid-pull: the app container's CreateContainer is in the podVM's
//     agent, pulling its image (a 60 s modelled pull; CAA proxies that
//     call for the shim).
//
// It records what the shim, kubelet, containerd and the new CAA do, the
// pod's state, the instances and the harness's podVM boots and shutdowns
// as they change, with times from the kill; it asserts that the pod ends
// Running (within 8 minutes). The VM of the sandbox the kill ended is
// known to no live CAA (its sandbox table died with the old process), so
// nothing deletes it but the reaper (docs/reaper.md): one pass of it,
// gcp-t4 gc -delete with no grace, must delete exactly the VMs from
// before the kill and leave the pod's podVM and the pod running; then no
// VM is left after the pod's delete, and nothing of the node.
func TestKataRemoteCAARestart(t *testing.T) {
	k := kataOrSkip(t)
	for _, v := range []struct {
		name string
		pull time.Duration
	}{{"at-insert", 5 * time.Second}, {"mid-pull", time.Minute}} {
		t.Run(v.name, func(t *testing.T) {
			vk := k
			vk.AgentPull = v.pull
			restartRun(t, &vk, v.name, false)
		})
	}
}

// TestKataRemoteCAARollingUpdate is the adaptor-restarted scenario with
// CAA stopped as a rolling update of its DaemonSet stops it: kubelet
// sends its container SIGTERM and kills it only after the DaemonSet's
// 960 s grace (Node.TermCAA); the new pod's CAA starts once the old one
// has exited (maxUnavailable 1: the old pod goes first). The same two
// moments as TestKataRemoteCAARestart, the same assertions, and a third,
// running: the pod Running when CAA stops, which ends when the pod runs
// a new container or has kept its own for 75 s; the reaper's pass must
// then delete exactly the VMs of sandboxes that ended. It also
// records how long CAA took to exit, its lines on the way out, and the
// Node's kata.peerpods.io/vm, which CAA's shutdown removes (upstream
// pkg/adaptor/server.go Shutdown, RemoveExtendedResources). The peer-pods
// webhook runs (Kata.Webhook), so the pod asks for that resource, as on
// a cluster installed per docs/install.md.
func TestKataRemoteCAARollingUpdate(t *testing.T) {
	k := kataOrSkip(t)
	for _, v := range []struct {
		name string
		pull time.Duration
	}{{"at-insert", 5 * time.Second}, {"mid-pull", time.Minute}, {"running", 5 * time.Second}} {
		t.Run(v.name, func(t *testing.T) {
			vk := k
			vk.AgentPull = v.pull
			vk.Webhook = true
			restartRun(t, &vk, v.name, true)
		})
	}
}

// restartRun is one moment (when) of CAA's restart: killed outright, or,
// with sigterm, stopped as kubelet stops a deleted pod's container.
func restartRun(t *testing.T, k *Kata, when string, sigterm bool) {
	ks := startKata(t, k)
	ph, ctx, cs, n, pp := ks.ph, ks.ctx, ks.cs, ks.n, ks.pp
	const name = "vllm"
	created := time.Now()
	if _, err := cs.CoreV1().Pods(gpuNamespace).Create(ctx, gpuPod(n.Name, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The moment.
	trigCtx, trigCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer trigCancel()
	var firstContainer string
	err := poll(trigCtx, "the moment to kill CAA ("+when+")", func() (bool, string) {
		if when == "running" {
			p, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if containersRunning(p) {
				firstContainer = p.Status.ContainerStatuses[0].ContainerID
				return true, ""
			}
			return false, string(p.Status.Phase) + " " + containerState(p)
		}
		if when == "at-insert" {
			vms, err := gceInstances(ctx, pp)
			if err != nil {
				return false, err.Error()
			}
			return len(vms) > 0, fmt.Sprintf("%d instances", len(vms))
		}
		for i := range n.PodVMLogs() {
			for _, l := range n.LogLines(fmt.Sprintf("podvm-%d", i+1), "sandbox container: false") {
				if agentCreate.MatchString(l) {
					return true, ""
				}
			}
		}
		return false, "no app container CreateContainer in the agent yet"
	})
	if err != nil {
		t.Fatal(err)
	}
	vmsAtKill, _ := gceInstances(ctx, pp)
	shimsAtKill := shimDaemons(n)
	seen := map[string]int{}
	for _, l := range []string{"kubelet", "containerd", "kata-shim"} {
		seen[l] = len(n.LogLines(l, ""))
	}
	killAt := time.Now()
	how := "killed (SIGKILL)"
	if sigterm {
		took, killed, err := n.TermCAA(caaGrace)
		if err != nil {
			t.Fatal(err)
		}
		how = fmt.Sprintf("sent SIGTERM; exited %.2fs later%s", took.Seconds(), map[bool]string{true: ", killed at the end of its grace", false: " on its own"}[killed])
		if vm, ok := podVMCapacity(ctx, cs, n.Name); ok {
			t.Logf("the Node's %s after CAA's exit: %s", podVMResource, vm)
		} else {
			t.Logf("the Node's %s after CAA's exit: gone from its capacity", podVMResource)
		}
	} else if err := n.KillCAA(); err != nil {
		t.Fatal(err)
	}
	t.Logf("CAA %s, %.1fs after the pod was created (%s), at %s; instances then: %s; the shim pids %v",
		how, killAt.Sub(created).Seconds(), when, killAt.Format("15:04:05.000"), vmList(vmsAtKill), shimsAtKill)
	newLog, err := n.StartCAAAgain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the new CAA accepts on its socket %.1fs after the kill (log %s)", time.Since(killAt).Seconds(), newLog)
	ph.done("stop CAA → the new one serving")

	var timeline []string
	mark := func(what string) {
		s := fmt.Sprintf("%6.1fs %s", time.Since(killAt).Seconds(), what)
		timeline = append(timeline, s)
		t.Logf("after the kill: %s", s)
	}
	var lastPod, lastVMs, lastCap string
	seenEvents := map[string]bool{}
	var runningAt time.Time
	// survived: the pod kept its container through CAA's restart (the
	// running moment), so its podVM is from before the stop and in use.
	survived := false
	waitCtx, waitCancel := context.WithTimeout(ctx, 8*time.Minute)
	defer waitCancel()
	err = poll(waitCtx, "the pod Running after CAA's restart", func() (bool, string) {
		p, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		restarts := int32(0)
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		if s := fmt.Sprintf("pod %s, %s, restarts %d", p.Status.Phase, containerState(p), restarts); s != lastPod {
			mark(s)
			lastPod = s
		}
		if vms, err := gceInstances(ctx, pp); err == nil {
			if j := "instances: " + vmList(vms); j != lastVMs {
				mark(j)
				lastVMs = j
			}
		}
		vm, ok := podVMCapacity(ctx, cs, n.Name)
		if c := "the Node's " + podVMResource + ": " + map[bool]string{true: vm, false: "not in its capacity"}[ok]; c != lastCap {
			mark(c)
			lastCap = c
		}
		for _, e := range n.PodVMEvents() {
			key := e.Name + " " + e.What + e.At.String()
			if e.At.Before(killAt) || seenEvents[key] {
				continue
			}
			seenEvents[key] = true
			mark(fmt.Sprintf("podVM %s %s (harness, at %.1fs)", e.Name, e.What, e.At.Sub(killAt).Seconds()))
		}
		if evs, err := cs.CoreV1().Events(gpuNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
			for i := range evs.Items {
				e := &evs.Items[i]
				key := e.Name + fmt.Sprint(e.Count)
				if seenEvents[key] {
					continue
				}
				seenEvents[key] = true
				if e.LastTimestamp.Time.Before(killAt.Truncate(time.Second)) && e.EventTime.Time.Before(killAt) {
					continue
				}
				mark(fmt.Sprintf("Event %s %s/%s x%d: %s", e.Type, e.Source.Component, e.Reason, e.Count, clip(e.Message)))
			}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			mark("outcome: pod " + string(p.Status.Phase))
			return true, ""
		}
		if containersRunning(p) && when == "running" {
			// The pod was Running when CAA stopped: done once it runs a
			// new container (its sandbox ended and was made again), or
			// once it has kept its container past kata's agent check (5 s
			// period, a 30 s bound) with a margin.
			switch {
			case p.Status.ContainerStatuses[0].ContainerID != firstContainer:
				runningAt = time.Now()
				mark("outcome: Running again, a new container")
				return true, ""
			case time.Since(killAt) > 75*time.Second:
				runningAt = time.Now()
				survived = true
				mark("outcome: still Running, the same container, 75 s after CAA stopped")
				return true, ""
			}
			return false, lastPod + "; " + lastVMs
		}
		if containersRunning(p) {
			runningAt = time.Now()
			mark("outcome: Running")
			return true, ""
		}
		return false, lastPod + "; " + lastVMs
	})
	if err != nil {
		t.Error(err)
	}
	ph.done("kill → " + map[bool]string{true: "Running", false: "the bound or a failed pod"}[!runningAt.IsZero()])
	if runningAt.IsZero() {
		t.Errorf("the pod did not go Running after CAA's restart (%s)", when)
	} else {
		t.Logf("time to Running: %.1fs from the pod's create, %.1fs from the kill", runningAt.Sub(created).Seconds(), runningAt.Sub(killAt).Seconds())
	}
	vmsAtRunning, _ := gceInstances(ctx, pp)
	shimsAtRunning := shimDaemons(n)

	t.Logf("— the record of the restart (%s) —", when)
	for _, s := range timeline {
		t.Logf("timeline %s", s)
	}
	logEvents(ctx, t, cs, gpuNamespace, name)
	logNew := func(log, prefix string, subs ...string) {
		all := n.LogLines(log, "")
		for _, l := range all[min(seen[log], len(all)):] {
			keep := len(subs) == 0
			for _, s := range subs {
				keep = keep || strings.Contains(l, s)
			}
			if keep && !strings.Contains(l, "failed to dial remote sock") && !strings.Contains(l, "Dialing remote sock") {
				t.Logf("%s: %s", prefix, clip(l))
			}
		}
		seen[log] = len(all)
	}
	logNew("kubelet", "kubelet", "kata-remote", "Sandbox", "sandbox", "Killing", "error", "Error", "CreateContainer", "StartContainer")
	logNew("containerd", "containerd", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer", "StartContainer", "TaskExit", "level=error", "level=warn")
	logNew("kata-shim", "kata shim")
	t.Logf("kata shim: %d `failed to dial remote sock` lines in the run so far", len(n.LogLines("kata-shim", "failed to dial remote sock")))
	old := n.LogLines("cloud-api-adaptor", "")
	for _, l := range old[max(0, len(old)-25):] {
		t.Logf("CAA (the stopped one), its last lines: %s", clip(l))
	}
	for _, l := range n.LogLines(newLog, "") {
		t.Logf("CAA (restarted): %s", clip(l))
	}
	for i := range n.PodVMLogs() {
		for _, l := range n.LogLines(fmt.Sprintf("podvm-%d", i+1), "[stand-in kata-agent]", "Shutting down", "error") {
			t.Logf("podVM %d: %s", i+1, clip(l))
		}
	}
	t.Logf("the sandbox shims: %v at the kill, %v at Running (the first %s)", shimsAtKill, shimsAtRunning,
		map[bool]string{true: "still runs", false: "exited"}[len(shimsAtKill) > 0 && slices.Contains(shimsAtRunning, shimsAtKill[0])])
	t.Logf("instances: at the kill %s; at Running %s; podVMs booted %d", vmList(vmsAtKill), vmList(vmsAtRunning), len(n.PodVMLogs()))

	// The product's answer to a VM no live CAA knows of is the reaper
	// (docs/reaper.md): gcp-t4 gc is one pass of it. Run with no grace
	// (its default is 10 minutes), it must judge the VMs left from before
	// the kill orphans and delete them, and leave the pod's podVM and the
	// pod running.
	if !runningAt.IsZero() {
		gc := func(args ...string) {
			args = append([]string{"gc", "-kubeconfig", ks.kubeconfig, "-grace", "0"}, args...)
			start := time.Now()
			out, err := exec.CommandContext(ctx, k.GcpT4, args...).CombinedOutput()
			t.Logf("gcp-t4 %s (%.1fs, %v):\n%s", strings.Join(args, " "), time.Since(start).Seconds(), err, out)
		}
		gc()
		gc("-delete")
		after, err := gceInstances(ctx, pp)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("instances after gcp-t4 gc -delete: %s", vmList(after))
		for _, v := range vmsAtRunning {
			old := slices.ContainsFunc(vmsAtKill, func(o instance) bool { return o.Name == v.Name })
			still := slices.ContainsFunc(after, func(a instance) bool { return a.Name == v.Name })
			switch {
			case old && still && !survived:
				t.Errorf("VM %s, from the sandbox CAA's kill ended, outlived gcp-t4 gc -delete -grace 0", v.Name)
			case old && !still && survived, !old && !still:
				t.Errorf("gcp-t4 gc -delete deleted VM %s, the running pod's podVM", v.Name)
			}
		}
		p, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !containersRunning(p) {
			t.Errorf("the pod after gcp-t4 gc -delete: %s %s", p.Status.Phase, containerState(p))
		}
	}

	if err := cs.CoreV1().Pods(gpuNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delAt := time.Now()
	if err := poll(ctx, "pod gone", func() (bool, string) {
		_, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	}); err != nil {
		t.Error(err)
	}
	t.Logf("delete → pod gone %.1fs", time.Since(delAt).Seconds())
	// What CAA deletes on the pod's delete, it deletes at once (0.0 s in
	// every other scenario); what is left 30 s on, no CAA will.
	var left []instance
	leftCtx, leftCancel := context.WithTimeout(ctx, 30*time.Second)
	defer leftCancel()
	_ = poll(leftCtx, "0 VMs left", func() (bool, string) {
		left, err = gceInstances(ctx, pp)
		return err == nil && len(left) == 0, fmt.Sprint(len(left))
	})
	t.Logf("delete → %d VMs left %.1fs after the delete: %s", len(left), time.Since(delAt).Seconds(), vmList(left))
	for _, v := range left {
		t.Errorf("VM %s (%s, labels %v) outlived its pod and the reaper's pass", v.Name, v.Status, v.Labels)
	}
	ph.done("delete → pod gone, VMs counted")
	for _, e := range n.PodVMEvents() {
		t.Logf("podVM event %s: %s %s %s", e.At.Format("15:04:05.000"), e.Name, e.IP, e.What)
	}
	for _, l := range n.LogLines(newLog, "") {
		if strings.Contains(l, "Delet") || strings.Contains(l, "delet") || strings.Contains(l, "StopVM") {
			t.Logf("CAA (restarted), all its delete lines: %s", clip(l))
		}
	}
	stopAndCheck(t, n, ph)
}

// podVMCapacity is the Node's kata.peerpods.io/vm capacity, which CAA
// advertises at start and removes at shutdown.
func podVMCapacity(ctx context.Context, cs kubernetes.Interface, node string) (string, bool) {
	nd, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err.Error(), true
	}
	q, ok := nd.Status.Capacity[podVMResource]
	return q.String(), ok
}

// vmList is the instances' names and states, sorted.
func vmList(vms []instance) string {
	var s []string
	for _, v := range vms {
		s = append(s, v.Name+" "+v.Status)
	}
	slices.Sort(s)
	return "[" + strings.Join(s, ", ") + "]"
}
