package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kata's hypervisor annotations the peer-pods webhook writes
// (src/webhook/pkg/mutating/remove-resourcespec.go at CAA v0.22.0) and
// kata's shim forwards to CAA's CreateVM (virtcontainers/remote.go at
// kata cf82bb35).
const (
	annotGPUs   = "io.katacontainers.config.hypervisor.default_gpus"
	annotVCPUs  = "io.katacontainers.config.hypervisor.default_vcpus"
	annotMemory = "io.katacontainers.config.hypervisor.default_memory"
	// podVMResource is the extended resource CAA advertises on the Node
	// and the webhook gives the pod's first container.
	podVMResource = "kata.peerpods.io/vm"
)

// TestKataRemoteGPUPodThroughWebhook is the GPU pod of
// TestKataRemotePodThroughCAA with CAA's real peer-pods webhook in the
// API server's admission chain (Node.StartWebhook: upstream src/webhook
// at v0.22.0, registered by a MutatingWebhookConfiguration with
// clientConfig.url and the harness's caBundle). It asserts the chain's
// every hand-off of the pod's one GPU: the stored pod carries
// default_gpus "1" and asks for kata.peerpods.io/vm instead of
// nvidia.com/gpu (the webhook); the sandbox's OCI spec carries the
// annotation (containerd's pod_annotations, to kata's shim); and the
// podVM the provider creates is an N1 with one T4 (the shim's CreateVM
// request, CAA's InstanceTypeSpec.GPUs, the provider's profile), told in
// PodVMRequested; then the pod Running, deleted, 0 VMs, nothing left.
func TestKataRemoteGPUPodThroughWebhook(t *testing.T) {
	k := kataOrSkip(t)
	k.AgentPull = 5 * time.Second
	k.Webhook = true
	ks := startKata(t, &k)
	ph, ctx, cs, n, pp := ks.ph, ks.ctx, ks.cs, ks.n, ks.pp
	const name = "vllm"
	created := time.Now()
	if _, err := cs.CoreV1().Pods(gpuNamespace).Create(ctx, gpuPod(n.Name, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ph.done("pod created (through the webhook)")

	// The webhook's mutation, as stored.
	p, err := cs.CoreV1().Pods(gpuNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{annotGPUs, annotVCPUs, annotMemory} {
		if v, ok := p.Annotations[a]; ok {
			t.Logf("stored pod: annotation %s=%q", a, v)
		}
	}
	res := p.Spec.Containers[0].Resources
	t.Logf("stored pod: container %s requests %v, limits %v", p.Spec.Containers[0].Name, res.Requests, res.Limits)
	if p.Annotations[annotGPUs] != "1" {
		t.Errorf("stored pod: %s=%q, want \"1\" (the webhook's count of nvidia.com/gpu)", annotGPUs, p.Annotations[annotGPUs])
	}
	if q, ok := res.Requests[podVMResource]; !ok || q.Value() != 1 {
		t.Errorf("stored pod: requests %v, want %s: 1", res.Requests, podVMResource)
	}
	if _, ok := res.Requests["nvidia.com/gpu"]; ok {
		t.Errorf("stored pod: still requests nvidia.com/gpu: %v", res.Requests)
	}
	for _, l := range n.LogLines("peer-pods-webhook", "pod-mutator") {
		t.Logf("webhook: %s", clip(l))
	}

	recorded := false
	record := func(stage string) {
		t.Logf("— the record %s —", stage)
		logEvents(ctx, t, cs, gpuNamespace, name)
		for _, l := range n.LogLines("kubelet", "kata-remote", "RunPodSandbox", "Error", "error") {
			t.Logf("kubelet: %s", clip(l))
		}
		for _, l := range n.LogLines("containerd", "RunPodSandbox", "level=error") {
			t.Logf("containerd: %s", clip(l))
		}
		for _, l := range n.LogLines("kata-shim", "level=error", "level=warn", "StartVM", "CreateVM") {
			if !strings.Contains(l, "failed to dial remote sock") {
				t.Logf("kata shim: %s", clip(l))
			}
		}
		for _, l := range n.LogLines("cloud-api-adaptor", "") {
			t.Logf("CAA: %s", clip(l))
		}
		for i := range n.PodVMLogs() {
			for _, l := range n.LogLines(fmt.Sprintf("podvm-%d", i+1), "[stand-in kata-agent]", "error") {
				t.Logf("podVM %d: %s", i+1, clip(l))
			}
		}
	}
	defer func() {
		if !recorded {
			record("(the test stopped early)")
		}
	}()

	if _, err := waitPodRunning(ctx, cs, gpuNamespace, name, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod Running %.1fs after it was created", time.Since(created).Seconds())
	ph.done("→ pod Running")

	// What containerd handed kata's shim: the sandbox's OCI spec, its
	// annotations filtered by the handler's pod_annotations.
	bundles, _ := filepath.Glob(filepath.Join(n.path("containerd/state"), "io.containerd.runtime.v2.task", "k8s.io", "*", "config.json"))
	sawSandbox := false
	for _, b := range bundles {
		data, err := os.ReadFile(b)
		if err != nil {
			continue
		}
		var spec struct {
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(data, &spec) != nil || spec.Annotations["io.kubernetes.cri.container-type"] != "sandbox" {
			continue
		}
		sawSandbox = true
		var kataAnnots []string
		for key, v := range spec.Annotations {
			if strings.HasPrefix(key, "io.katacontainers.") {
				kataAnnots = append(kataAnnots, key+"="+v)
			}
		}
		slices.Sort(kataAnnots)
		t.Logf("the sandbox's OCI spec (%s), kata's annotations: %v", filepath.Base(filepath.Dir(b)), kataAnnots)
		if spec.Annotations[annotGPUs] != "1" {
			t.Errorf("the sandbox's OCI spec has %s=%q, want \"1\": containerd did not pass it to kata's shim", annotGPUs, spec.Annotations[annotGPUs])
		}
	}
	if !sawSandbox {
		t.Errorf("no sandbox bundle under containerd's state (%d bundles)", len(bundles))
	}

	// The podVM: an N1 with one T4.
	vms, err := gceInstances(ctx, pp)
	if err != nil || len(vms) != 1 {
		t.Fatalf("at Running: %d instances (%v), want 1", len(vms), err)
	}
	vm := vms[0]
	var accels []string
	t4s := int64(0)
	for _, a := range vm.GuestAccelerators {
		accels = append(accels, fmt.Sprintf("%d × %s", a.AcceleratorCount, path.Base(a.AcceleratorType)))
		if path.Base(a.AcceleratorType) == "nvidia-tesla-t4" {
			t4s += a.AcceleratorCount
		}
	}
	restart := "unset"
	if vm.Scheduling.AutomaticRestart != nil {
		restart = fmt.Sprint(*vm.Scheduling.AutomaticRestart)
	}
	t.Logf("podVM %s: machine type %s, guest accelerators %v, scheduling onHostMaintenance %q automaticRestart %s, labels %v",
		vm.Name, path.Base(vm.MachineType), accels, vm.Scheduling.OnHostMaintenance, restart, vm.Labels)
	if !strings.HasPrefix(path.Base(vm.MachineType), "n1-") || t4s != 1 || len(vm.GuestAccelerators) != 1 {
		t.Errorf("podVM %s is %s with %v; want an N1 machine with one nvidia-tesla-t4", vm.Name, path.Base(vm.MachineType), accels)
	}
	evs, err := cs.CoreV1().Events(gpuNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	sawRequested := false
	for _, e := range evs.Items {
		if e.Reason == reasonRequested {
			sawRequested = true
			t.Logf("%s: %s", reasonRequested, e.Message)
			if !strings.Contains(e.Message, "T4") && !strings.Contains(e.Message, "t4") {
				t.Errorf("%s names no T4: %s", reasonRequested, e.Message)
			}
		}
	}
	if !sawRequested {
		t.Errorf("no %s Event on the pod", reasonRequested)
	}
	statusTimeline(ctx, t, k.GcpT4, ks.kubeconfig, name)
	installRefusesToRoll(ctx, t, k.GcpT4, n.InstallArgs(&k, pp), name)
	record("at Running")
	recorded = true

	ks.deleteLeavingNoVMs(t, name)
	for _, l := range n.LogLines("peer-pods-webhook", "pod-mutator", "error", "ERROR") {
		t.Logf("webhook, the whole run: %s", clip(l))
	}
	stopAndCheck(t, n, ph)
}

// statusTimeline runs `gcp-t4 status` as an operator would for the pod,
// against the harness's API server (GCE not asked: the emulator is not in
// peer-pods-cm's reach from here), and checks that its timeline tells the
// start the kubelet drove: the podVM's shape, each phase the provider
// posted up to its agent, and the bars.
func statusTimeline(ctx context.Context, t *testing.T, gcpT4, kubeconfig, pod string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, gcpT4, "status", "-kubeconfig", kubeconfig, "-n", gpuNamespace, "-gce=false", pod).CombinedOutput()
	t.Logf("gcp-t4 status -n %s %s:\n%s", gpuNamespace, pod, out)
	if err != nil {
		t.Errorf("gcp-t4 status: %v", err)
		return
	}
	for _, want := range []string{"n1-standard-4 + 1×nvidia-tesla-t4", "requested", "created", "booted", "reachable", "pod Running", "timeline ("} {
		if !strings.Contains(string(out), want) {
			t.Errorf("gcp-t4 status's timeline lacks %q", want)
		}
	}
}

// installRefusesToRoll changes a setting with `gcp-t4 install` while the
// GPU pod runs, as an admin would: the change would restart CAA, which
// ends the pod's sandbox (TestKataRemoteCAARollingUpdate), so install must
// refuse with exit 2, name the pod and write nothing; --dry-run lists it
// and exits 0.
func installRefusesToRoll(ctx context.Context, t *testing.T, gcpT4 string, args []string, pod string) {
	t.Helper()
	changed := append(slices.Clone(args), "--set", "GCP_ZONES=us-central1-b")
	for _, dry := range []bool{false, true} {
		a := changed
		if dry {
			a = append(slices.Clone(changed), "--dry-run")
		}
		out, err := exec.CommandContext(ctx, gcpT4, a...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gcp-t4 install: %v", err)
		}
		t.Logf("gcp-t4 install --set GCP_ZONES=us-central1-b (dry run %v) under the Running pod: exit %d\n%s", dry, code, lastLines(string(out), 8))
		want, wantCode := "refusing to restart CAA under running peer pods; nothing was changed", 2
		if dry {
			want, wantCode = "a real run refuses this change", 0
		}
		if code != wantCode || !strings.Contains(string(out), want) || !strings.Contains(string(out), "pod "+gpuNamespace+"/"+pod) {
			t.Errorf("gcp-t4 install under the Running pod (dry run %v): exit %d, want %d, %q and the pod named", dry, code, wantCode, want)
		}
	}
}

func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-k):], "\n")
}
