package node

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// longPull is the modelled in-guest pull of the second scenario: twice
// kubelet's runtimeRequestTimeout (2 minutes, the default this node's
// kubelet runs with), which bounds each CreateContainer it sends.
const longPull = 4 * time.Minute

// TestKataRemoteLongPull is issue 54's second scenario: the GPU pod of
// TestKataRemotePodThroughCAA, its image taking 4 minutes to pull in the
// podVM (the stand-in agent's model: one pull at a time, going on after
// the caller gives up), once with kata's own create_container_timeout (60
// s) and once with the remediation sidecar's drop-in (1200 s). It asserts
// that the pod goes Running and that nothing is left after it is deleted;
// it records what the bounds do: the CreateContainer calls the agent saw,
// the containers it made that nobody started (orphans), kubelet's
// Failed Events and RunContainerError/CreateContainerError waits, whether
// the sandbox's shim survived (its pid), and the time to Running.
func TestKataRemoteLongPull(t *testing.T) {
	k := kataOrSkip(t)
	for _, v := range []struct {
		name   string
		dropIn bool
	}{{"kata-default-60s", false}, {"sidecar-1200s", true}} {
		t.Run(v.name, func(t *testing.T) {
			vk := k // each variant its own copy
			vk.AgentPull = longPull
			vk.NoTimeoutDropIn = !v.dropIn
			longPullRun(t, &vk)
		})
	}
}

var (
	agentCreate = regexp.MustCompile(`\[stand-in kata-agent\] CreateContainer (\S+) \(sandbox container: false`)
	agentOrphan = regexp.MustCompile(`CreateContainer (\S+) done in .*the caller gave up`)
	agentStart  = regexp.MustCompile(`\[stand-in kata-agent\] StartContainer (\S+) `)
)

func longPullRun(t *testing.T, k *Kata) {
	ks := startKata(t, k)
	ph, ctx, cs, n := ks.ph, ks.ctx, ks.cs, ks.n
	const name = "vllm"
	created := time.Now()
	if _, err := cs.CoreV1().Pods(gpuNamespace).Create(ctx, gpuPod(n.Name, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The sandbox's shim: kata runs one per sandbox. Its pid is taken
	// once the app container's first create reached the agent (the
	// sandbox is up; containerd's short-lived `start` and `delete`
	// invocations of the shim binary, which name the same socket, are
	// not it) and again at Running: the same pid, it lived through the
	// give-ups.
	var shimAtStart []int
	if err := poll(ctx, "the app container's first CreateContainer in the agent", func() (bool, string) {
		for i := range n.PodVMLogs() {
			for _, l := range n.LogLines(fmt.Sprintf("podvm-%d", i+1), "sandbox container: false") {
				if agentCreate.MatchString(l) {
					shimAtStart = shimDaemons(n)
					return true, ""
				}
			}
		}
		return false, "not yet"
	}); err != nil {
		t.Fatal(err)
	}

	// Every wait reason the container shows on the way, as they change.
	var waits []string
	var running time.Time
	// Bounded well past what either variant needs (the pull, kubelet's
	// back-off after each failure), so a hung chain fails this run
	// rather than go test's whole budget.
	runCtx, cancel := context.WithTimeout(ctx, 12*time.Minute)
	defer cancel()
	if err := poll(runCtx, "pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil {
				at := fmt.Sprintf("%s at %.0fs", w.Reason, time.Since(created).Seconds())
				if len(waits) == 0 || !strings.HasPrefix(waits[len(waits)-1], w.Reason+" ") {
					waits = append(waits, at)
				}
			}
		}
		if containersRunning(p) {
			running = time.Now()
			return true, ""
		}
		return false, string(p.Status.Phase) + " " + containerState(p)
	}); err != nil {
		t.Error(err)
	}
	shimAtRunning := shimDaemons(n)
	ph.done("pod created → Running (or the bound)")

	// The record.
	t.Logf("modelled pull %s; create_container_timeout %s; kubelet runtimeRequestTimeout 2m (default)",
		longPull, map[bool]string{true: "60 s (kata's default)", false: "1200 s (the sidecar's drop-in)"}[k.NoTimeoutDropIn])
	if !running.IsZero() {
		t.Logf("time to Running: %.1fs", running.Sub(created).Seconds())
	}
	t.Logf("container waits, in order: %s", strings.Join(waits, "; "))
	evs, err := cs.CoreV1().Events(gpuNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, e := range evs.Items {
		t.Logf("event %s %s/%s x%d: %s", e.Type, e.Source.Component, e.Reason, e.Count, clip(e.Message))
		if e.Source.Component == "kubelet" && e.Reason == "Failed" {
			failed += int(e.Count)
		}
	}
	var creates, orphans, started []string
	for i := range n.PodVMLogs() {
		log := fmt.Sprintf("podvm-%d", i+1)
		for _, l := range n.LogLines(log, "CreateContainer", "StartContainer", "pull ") {
			if strings.Contains(l, "[stand-in kata-agent]") {
				t.Logf("podVM %d: %s", i+1, clip(l))
			}
			if m := agentCreate.FindStringSubmatch(l); m != nil {
				creates = append(creates, m[1])
			}
			if m := agentOrphan.FindStringSubmatch(l); m != nil {
				orphans = append(orphans, m[1])
			}
			if m := agentStart.FindStringSubmatch(l); m != nil {
				started = append(started, m[1])
			}
		}
	}
	leftUnstarted := 0
	for _, c := range creates {
		if !slices.Contains(started, c) {
			leftUnstarted++
		}
	}
	for _, l := range n.LogLines("containerd", "CreateContainer within sandbox", "failed to create containerd container", "level=error") {
		t.Logf("containerd: %s", clip(l))
	}
	for _, l := range n.LogLines("kata-shim", "level=error", "level=warn", "timeout", "Timeout") {
		t.Logf("kata shim: %s", clip(l))
	}
	t.Logf("agent: %d CreateContainer calls for the app container, %d finished after their caller gave up, %d made but never started (orphaned in the agent)",
		len(creates), len(orphans), leftUnstarted)
	t.Logf("kubelet: %d Failed (x count) Events; the sandbox's shim pids %v at the start, %v at Running (%s)", failed, shimAtStart, shimAtRunning,
		map[bool]string{true: "survived", false: "changed"}[len(shimAtStart) > 0 && slices.Contains(shimAtRunning, shimAtStart[0])])
	t.Logf("podVMs booted: %d", len(n.PodVMLogs()))
	// With NODE_KATA_RACE=1 the shim runs built with -race: what it
	// found is recorded (kata's code, not ours to fail on).
	races := n.RaceReports()
	t.Logf("shim data race report files: %d, %d races in them", len(races), strings.Count(strings.Join(races, ""), "WARNING: DATA RACE"))
	for _, r := range races {
		t.Logf("shim race report:\n%s", r[:min(len(r), 4000)])
	}

	ks.deleteLeavingNoVMs(t, name)
	for _, e := range n.PodVMEvents() {
		t.Logf("podVM event %s: %s %s %s", e.At.Format("15:04:05.000"), e.Name, e.IP, e.What)
	}
	stopAndCheck(t, n, ph)
}

// shimDaemons are the node's running shims, without containerd's
// short-lived `start` and `delete` invocations of the shim binary.
func shimDaemons(n *Node) []int {
	var out []int
	for _, pid := range processesNaming(n.Socket) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if last := args[len(args)-1]; last != "start" && last != "delete" {
			out = append(out, pid)
		}
	}
	return out
}
