package kuberay

import (
	"errors"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

func TestNCCLCheckDecodesStrictly(t *testing.T) {
	objs := ncclCheck(t)
	var names []string
	for _, o := range objs {
		names = append(names, o.kind+"/"+o.name)
	}
	slices.Sort(names)
	// The generated ConfigMap carries a content hash.
	if len(names) != 4 || !strings.HasPrefix(names[0], "ConfigMap/nccl-check-") ||
		!slices.Equal(names[1:], []string{"Pod/nccl-check-0", "Pod/nccl-check-1", "Service/nccl-check"}) {
		t.Errorf("rendered %v", names)
	}
}

// The check proves the path the RayService will use only if its pods are
// the same: image, podVM shape, GPU, and every NCCL/Gloo setting.
func TestNCCLCheckMatchesTheRayService(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	head := rs.Spec.RayClusterSpec.HeadGroupSpec.Template
	rayEnv := envMap(t, "head", head.Spec.Containers[0])
	for _, o := range ncclCheck(t) {
		pod, ok := o.typed.(*corev1.Pod)
		if !ok {
			continue
		}
		c := pod.Spec.Containers[0]
		if c.Image != head.Spec.Containers[0].Image {
			t.Errorf("%s: image %s, RayService %s", pod.Name, c.Image, head.Spec.Containers[0].Image)
		}
		// The same podVM annotations; the initdata is each pod's own, for
		// its images (the check's pods have no model image), and held to
		// what gcp-t4 cache initdata writes for them by
		// gcp-t4/internal/cachebuild's TestExampleCarriesTheGeneratedInitdata.
		const initdata = "io.katacontainers.config.hypervisor.cc_init_data"
		others := func(m map[string]string) map[string]string {
			m = maps.Clone(m)
			delete(m, initdata)
			return m
		}
		if !maps.Equal(others(pod.Annotations), others(head.Annotations)) || pod.Annotations[initdata] == "" {
			t.Errorf("%s: annotations %v, RayService pods %v", pod.Name, pod.Annotations, head.Annotations)
		}
		if !equalResources(c.Resources, head.Spec.Containers[0].Resources) {
			t.Errorf("%s: resources %v, RayService pods %v", pod.Name, c.Resources, head.Spec.Containers[0].Resources)
		}
		if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != "kata-remote" {
			t.Errorf("%s: runtimeClassName %v, want kata-remote", pod.Name, rc)
		}
		env := envMap(t, pod.Name, c)
		for k, v := range rayEnv {
			if strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "GLOO_") {
				if env[k] != v {
					t.Errorf("%s: %s=%q, RayService %q", pod.Name, k, env[k], v)
				}
			}
		}
		for k := range env {
			if (strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "GLOO_")) && rayEnv[k] == "" {
				t.Errorf("%s: %s is set only in the check", pod.Name, k)
			}
		}
		if want := strings.TrimPrefix(pod.Name, "nccl-check-"); env["NODE_RANK"] != want {
			t.Errorf("%s: NODE_RANK %q, want %q", pod.Name, env["NODE_RANK"], want)
		}
	}
}

func equalResources(a, b corev1.ResourceRequirements) bool {
	eq := func(x, y corev1.ResourceList) bool {
		return maps.EqualFunc(x, y, func(p, q resource.Quantity) bool { return p.Cmp(q) == 0 })
	}
	return eq(a.Limits, b.Limits) && eq(a.Requests, b.Requests)
}

// Every manifest file in the example directories is rendered (so strictly
// decoded), and every file a kustomization names exists.
func TestEveryFileIsInTheKustomization(t *testing.T) {
	for _, dir := range []string{exampleDir, checkDir, monitoringDir, singleDir, exampleDir + "/image"} {
		b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources          []string `json:"resources"`
			ConfigMapGenerator []struct {
				Files []string `json:"files"`
			} `json:"configMapGenerator"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		listed := slices.Clone(k.Resources)
		for _, g := range k.ConfigMapGenerator {
			listed = append(listed, g.Files...)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() || e.Name() == "kustomization.yaml" {
				continue
			}
			if !slices.Contains(listed, e.Name()) {
				t.Errorf("%s/%s is not in its kustomization.yaml: it would go untested and unapplied", dir, e.Name())
			}
		}
	}
}

// torchrun's static rendezvous waits 600 s unless told otherwise
// (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py reads
// "timeout" from --rdzv-conf); each podVM pulls the image on its own, so
// the check waits an hour for its peer.
func TestNCCLCheckWaitsForItsPeer(t *testing.T) {
	for _, o := range ncclCheck(t) {
		pod, ok := o.typed.(*corev1.Pod)
		if !ok {
			continue
		}
		var timeout int
		for _, a := range pod.Spec.Containers[0].Command {
			if v, ok := strings.CutPrefix(a, "--rdzv-conf=timeout="); ok {
				timeout, _ = strconv.Atoi(v)
			}
		}
		if timeout < 3600 {
			t.Errorf("%s: rendezvous timeout %d s, want --rdzv-conf=timeout=3600 or more", pod.Name, timeout)
		}
		if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %s; a failed check must stay visible", pod.Name, pod.Spec.RestartPolicy)
		}
	}
}

// The check measures for the model the RayService serves: its MODEL_*
// settings are the catalogued config.json's, split by the tensor-parallel
// size.
func TestNCCLCheckSizedForTheServedModel(t *testing.T) {
	m := servedModel(t)
	tp := theLLM(t, only[*rayv1.RayService](t, example(t))).EngineKwargs.TensorParallelSize
	want := map[string]string{
		"MODEL_LAYERS":            strconv.Itoa(m.Layers),
		"MODEL_HIDDEN":            strconv.Itoa(m.Hidden),
		"MODEL_HEADS_PER_RANK":    strconv.Itoa(m.Heads / tp),
		"MODEL_KV_HEADS_PER_RANK": strconv.Itoa(max(1, m.KVHeads/tp)),
		"MODEL_HEAD_DIM":          strconv.Itoa(m.HeadDim),
	}
	for _, o := range ncclCheck(t) {
		if pod, ok := o.typed.(*corev1.Pod); ok {
			env := envMap(t, pod.Name, pod.Spec.Containers[0])
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s: %s=%q, the served model gives %q", pod.Name, k, env[k], v)
				}
			}
		}
	}
}

// nccl_check.py runs here without a GPU or torch in --dry-run, with the
// pods' environment: every step, the summary line, the arithmetic of the
// network floor (collectives per token = 2 x layers + 2, as gcp-t4 plan
// serve counts them), and a failure at each step ending in a FAIL line
// and exit 1.
func TestNCCLCheckScriptDryRun(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to run nccl_check.py --dry-run (apt-get install python3): %v", err)
	}
	script := filepath.Join(checkDir, "nccl_check.py")
	// Compiled in memory: py_compile would write __pycache__ into the example.
	if out, err := exec.Command(python, "-c", `import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")`, script).CombinedOutput(); err != nil {
		t.Fatalf("compiling %s: %v\n%s", script, err, out)
	}
	var pod *corev1.Pod
	for _, o := range ncclCheck(t) {
		if p, ok := o.typed.(*corev1.Pod); ok && p.Name == "nccl-check-1" {
			pod = p
		}
	}
	if pod == nil {
		t.Fatal("no pod nccl-check-1")
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1", "RANK=1", "WORLD_SIZE=2"}
	for k, v := range envMap(t, pod.Name, pod.Spec.Containers[0]) {
		env = append(env, k+"="+v)
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(python, append([]string{script}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("running %s: %v", script, err)
		return "", -1
	}
	out, rc := run("--dry-run")
	if rc != 0 {
		t.Fatalf("dry run exit %d:\n%s", rc, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	summary := lines[len(lines)-1]
	fields := map[string]string{}
	for _, f := range strings.Fields(summary) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	if !strings.HasPrefix(summary, "NCCL-CHECK PASS rank=1 world=2 ") {
		t.Fatalf("last line %q, want the PASS summary", summary)
	}
	// 40 layers: 2 x 40 + 2 = 82; one decode step's hidden state is 5120 x 2 bytes.
	if fields["collectives_per_token"] != "82" || fields["allreduce_10240B_p50_us"] == "" {
		t.Errorf("summary %q: want 82 collectives and a 10240 B latency", summary)
	}
	p50, _ := strconv.ParseFloat(fields["allreduce_10240B_p50_us"], 64)
	floor, _ := strconv.ParseFloat(fields["floor_ms_per_token"], 64)
	if want := 82 * p50 / 1000; p50 <= 0 || math.Abs(floor-want) > 0.06 {
		t.Errorf("floor %.2f ms, want 82 x %.0f us = %.2f ms", floor, p50, want)
	}
	if !strings.Contains(summary, `plan_flags="--nccl-latency `+fields["allreduce_10240B_p50_us"]+"us --nccl-bandwidth ") {
		t.Errorf("summary %q does not give the gcp-t4 plan serve flags", summary)
	}
	for _, want := range []string{"FlexAttention", "warm-up:", "all_reduce 10240 B x 200:", "network floor: 82 collectives per token", "all_reduce 268435456 B x 5:", "gloo",
		"driver 570.195.03 supports CUDA 12.8; torch is built for CUDA 12.8: native", "UDP 1450 B echoed", "TCP 4194304 B"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"driver", "driver_cuda", "torch_cuda", "cuda_compat", "mtu_probe"} {
		if fields[f] == "" {
			t.Errorf("summary %q lacks %s=", summary, f)
		}
	}
	for _, step := range []string{"device", "versions", "kernel", "flex_attention", "init", "mtu", "warmup", "latency", "bandwidth", "gloo"} {
		out, rc := run("--dry-run", "--dry-run-fail", step)
		last := strings.TrimSpace(out)
		last = last[strings.LastIndex(last, "\n")+1:]
		if rc != 1 || !strings.HasPrefix(last, "NCCL-CHECK FAIL rank=1 step="+step+": ") {
			t.Errorf("failing %s: exit %d, last line %q; want 1 and a FAIL line naming the step", step, rc, last)
		}
	}
}

// The versions step: the driver's CUDA version against the one the image's
// torch was built for. Same major version, older minor: CUDA minor-version
// compatibility (Debian bookworm's 535 driver supports CUDA 12.2, the cu128
// image's torch wants 12.8), reported as such; an older major version, or
// a driver below the major version's minimum: refused before the GPU is
// used, with what to change. And a message larger than one MTU that does
// not cross: the FAIL line carries the MTU hint.
func TestNCCLCheckVersionsAndMTU(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed (apt-get install python3): %v", err)
	}
	script := filepath.Join(checkDir, "nccl_check.py")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(python, append([]string{script, "--dry-run"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1", "RANK=1", "WORLD_SIZE=2"}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("running %s: %v", script, err)
		return "", -1
	}
	last := func(out string) string {
		out = strings.TrimSpace(out)
		return out[strings.LastIndex(out, "\n")+1:]
	}
	for _, tc := range []struct {
		versions string
		rc       int
		want     string
	}{
		{"535.247.01:12020:12.8", 0, "driver=535.247.01 driver_cuda=12.2 torch_cuda=12.8 cuda_compat=minor-version"},
		{"570.195.03:12080:12.8", 0, "cuda_compat=native"},
		{"580.95.05:13000:12.8", 0, "driver_cuda=13.0 torch_cuda=12.8 cuda_compat=native"},
		{"535.247.01:12020:13.0", 1, "step=versions: CheckError: driver 535.247.01 supports CUDA 12.2; torch is built for CUDA 13.0: incompatible hint: a CUDA 13.x image needs a driver that supports CUDA 13"},
		{"520.61.05:12000:12.8", 1, "step=versions: CheckError: driver 520.61.05 supports CUDA 12.0; torch is built for CUDA 12.8: incompatible hint: a CUDA 12.x image needs a driver that supports CUDA 12 (>= 525.60.13)"},
		{"470.256.02:11040:12.8", 1, "step=versions"},
	} {
		out, rc := run("--dry-run-versions", tc.versions)
		if rc != tc.rc || !strings.Contains(last(out), tc.want) {
			t.Errorf("versions %s: exit %d, last line %q; want %d and %q", tc.versions, rc, last(out), tc.rc, tc.want)
		}
	}
	if out, rc := run("--dry-run-versions", "535:12.2"); rc != 2 || !strings.Contains(out, "DRIVER:DRIVER_CUDA:TORCH_CUDA") {
		t.Errorf("malformed --dry-run-versions: exit %d, %s", rc, out)
	}
	out, rc := run("--dry-run-fail", "mtu")
	if l := last(out); rc != 1 || !strings.Contains(l, "step=mtu: ") || !strings.Contains(l, "VXLAN adds 50 bytes") || !strings.Contains(l, "at least 1500") {
		t.Errorf("mtu failure: exit %d, last line %q; want the MTU hint", rc, l)
	}
}

// test/device/gpu_figures.py, the driver-only measurement of the figures
// plan serve assumes, checks its own arithmetic without a GPU, and where
// there is no driver it says so on one FAIL line and exits 1.
func TestGPUFiguresScript(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed (apt-get install python3): %v", err)
	}
	script := filepath.Join(repoRoot, "test/device/gpu_figures.py")
	cmd := exec.Command(python, script, "--self-test")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1"}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "self-test ok") {
		t.Fatalf("--self-test: %v\n%s", err, out)
	}
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		return // a GPU machine: serving-check.sh measures there
	}
	cmd = exec.Command(python, script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONDONTWRITEBYTECODE=1", "LD_LIBRARY_PATH=/nonexistent"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.HasPrefix(strings.TrimSpace(string(out)), "GPU-FIGURES FAIL: ") {
		t.Errorf("without a GPU: %v, %q; want exit 1 and one GPU-FIGURES FAIL line", err, out)
	}
}
