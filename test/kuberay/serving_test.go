package kuberay

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/common"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// catalogued is the served model's entry in gcp-t4 plan serve's catalogue:
// the fields of its config.json the manifests are sized from.
type catalogued struct {
	Parameters int64 `json:"_parameters"`
	Layers     int   `json:"num_hidden_layers"`
	Hidden     int   `json:"hidden_size"`
	Heads      int   `json:"num_attention_heads"`
	KVHeads    int   `json:"num_key_value_heads"`
	HeadDim    int   `json:"head_dim"`
}

func servedModel(t *testing.T) catalogued {
	t.Helper()
	name := strings.Replace(modelSourceID, "/", "--", 1) + ".json"
	b, err := os.ReadFile(filepath.Join(repoRoot, "gcp-t4/internal/fit/models", name))
	if err != nil {
		t.Fatal(err)
	}
	var c catalogued
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// vLLM's default loader (load_format "auto") downloads every *.safetensors
// (vllm/model_executor/model_loader/default_loader.py _prepare_weights at
// v0.11.0), which for Mistral-Nemo is the five Hugging Face shards and the
// 24.5 GB consolidated.safetensors. The example downloads the shards only:
// safetensors, with consolidated.safetensors ignored, and vLLM's own default
// ignore pattern kept (vllm/config/load.py: a set ignore_patterns replaces
// ["original/**/*"]).
func TestModelDownloadsOnlyTheShards(t *testing.T) {
	ek := theLLM(t, only[*rayv1.RayService](t, example(t))).EngineKwargs
	if ek.LoadFormat != "safetensors" {
		t.Errorf("load_format %q, want safetensors (auto also takes *.bin; mistral takes consolidated*.safetensors only)", ek.LoadFormat)
	}
	for _, p := range []string{"consolidated.safetensors", "original/**/*"} {
		if !slices.Contains(ek.IgnorePatterns, p) {
			t.Errorf("ignore_patterns %v lacks %q", ek.IgnorePatterns, p)
		}
	}
	for _, p := range ek.IgnorePatterns {
		if matched, _ := filepath.Match(p, "model-00001-of-00005.safetensors"); matched {
			t.Errorf("ignore pattern %q would drop the Hugging Face shards too", p)
		}
	}
}

// modelPath is where the model sidecar links the model image's files in
// every Ray pod (gcp-t4/internal/modelcar's Link), and the model_source.
const modelPath = "/mnt/model/weights"

// Every Ray pod of both layouts reads the weights from the model image
// (docs/cache.md, "Weights"): one process namespace; a model sidecar
// that starts before the Ray container, runs as Ray's user (1000:100,
// which reading /proc/PID/root needs), asks for no CPU, and is started
// only once its probe finds the link; the link's volume mounted in the
// sidecar and, read-only, in the Ray container; no download cache and no
// Hub token left, and the Hub switched off.
func TestModelSidecar(t *testing.T) {
	for _, dir := range []string{exampleDir, singleDir} {
		for _, p := range rayPods(t, only[*rayv1.RayService](t, fromDisk(t, dir))) {
			spec := p.tpl.Spec
			where := dir + " " + p.group
			if spec.ShareProcessNamespace == nil || !*spec.ShareProcessNamespace {
				t.Errorf("%s: shareProcessNamespace is not true", where)
			}
			if len(spec.InitContainers) != 1 {
				t.Fatalf("%s: %d init containers, want the model sidecar", where, len(spec.InitContainers))
			}
			m := spec.InitContainers[0]
			sc := m.SecurityContext
			switch {
			case m.Name != "model" || m.Image != modelImage:
				t.Errorf("%s: init container %s %s, want model %s", where, m.Name, m.Image, modelImage)
			case m.RestartPolicy == nil || *m.RestartPolicy != corev1.ContainerRestartPolicyAlways:
				t.Errorf("%s: the model container is not a sidecar (restartPolicy: Always)", where)
			case sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1000 || sc.RunAsGroup == nil || *sc.RunAsGroup != 100:
				t.Errorf("%s: the model sidecar does not run as Ray's 1000:100: %+v", where, sc)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s: the model sidecar may escalate or write its root: %+v", where, sc)
			case m.StartupProbe == nil || m.StartupProbe.Exec == nil || strings.Join(m.StartupProbe.Exec.Command, " ") != "/modelcar -check":
				t.Errorf("%s: the model sidecar's startup probe %+v, want /modelcar -check", where, m.StartupProbe)
			case !m.Resources.Requests.Cpu().IsZero() || !m.Resources.Limits.Cpu().IsZero():
				t.Errorf("%s: the model sidecar asks for CPU (%v), which would size the podVM up", where, m.Resources)
			}
			mounted := func(c corev1.Container, readOnly bool) string {
				for _, vm := range c.VolumeMounts {
					if vm.MountPath == filepath.Dir(modelPath) && vm.ReadOnly == readOnly {
						return vm.Name
					}
				}
				return ""
			}
			vol := mounted(m, false)
			ray := spec.Containers[0]
			if vol == "" || mounted(ray, true) != vol {
				t.Errorf("%s: the sidecar (%q) and the Ray container (%q, read-only) do not share %s", where, vol, mounted(ray, true), filepath.Dir(modelPath))
			}
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
			if i < 0 || spec.Volumes[i].EmptyDir == nil || spec.Volumes[i].EmptyDir.Medium != corev1.StorageMediumDefault {
				t.Errorf("%s: volume %q is not an emptyDir", where, vol)
			}
			for _, v := range spec.Volumes {
				if v.Name == "hf-cache" {
					t.Errorf("%s: a download cache is left (%s)", where, v.Name)
				}
			}
			env := envMap(t, where, ray)
			if _, ok := env["HF_TOKEN"]; ok || env["HF_HUB_OFFLINE"] != "1" {
				t.Errorf("%s: HF_TOKEN %q, HF_HUB_OFFLINE %q: want no token and the Hub off", where, env["HF_TOKEN"], env["HF_HUB_OFFLINE"])
			}
		}
	}
}

// Ray's default object store is 30 % of the memory it sees, capped at 95 %
// of /dev/shm (python/ray/_private/resource_spec.py); set explicitly larger
// than /dev/shm, Ray moves it to /tmp with a warning. The example sets it
// well below /dev/shm on every node.
func TestObjectStoreFitsSharedMemory(t *testing.T) {
	for _, p := range rayPods(t, only[*rayv1.RayService](t, example(t))) {
		v, ok := p.rayStartParams["object-store-memory"]
		if !ok {
			t.Errorf("%s: no object-store-memory", p.group)
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Errorf("%s: object-store-memory %q is not bytes: %v", p.group, v, err)
			continue
		}
		var shm *resource.Quantity
		for _, vol := range p.tpl.Spec.Volumes {
			if vol.EmptyDir != nil && vol.EmptyDir.Medium == corev1.StorageMediumMemory {
				shm = vol.EmptyDir.SizeLimit
			}
		}
		if shm == nil || n < 75<<20 || n > shm.Value()/2 {
			t.Errorf("%s: object store %d B with /dev/shm %v; want at least Ray's 75 MiB minimum and at most half of /dev/shm", p.group, n, shm)
		}
	}
}

// max_ongoing_requests is Serve's per-replica admission limit (Ray Serve
// LLM's default is 1e9, python/ray/llm/_internal/serve/constants.py): at
// least one full vLLM batch, at most a few waiting behind it.
func TestServeAdmissionMatchesTheBatch(t *testing.T) {
	llm := theLLM(t, only[*rayv1.RayService](t, example(t)))
	mor := llm.DeploymentConfig.MaxOngoingRequests
	seqs := llm.EngineKwargs.MaxNumSeqs
	if mor == nil || *mor < seqs || *mor > 4*seqs {
		t.Errorf("max_ongoing_requests %v with max_num_seqs %d; want between %d and %d", mor, seqs, seqs, 4*seqs)
	}
	if llm.LogEngineMetrics == nil || !*llm.LogEngineMetrics {
		t.Error("log_engine_metrics is not true: vLLM's engine metrics stay off Ray's metrics port")
	}
}

// KubeRay's own pod builder (controllers/ray/common/pod.go at v1.6.2) on
// the example's templates: the ray start command carries the object store
// and the metrics port, the pods keep the example's probes, and without
// them KubeRay would add exec probes (Ray below 2.53) that go through the
// peer-pod exec path every period, 2 s timeout, one failure for a worker.
func TestKubeRayBuildsThePodsAsIntended(t *testing.T) {
	t.Setenv(utils.ENABLE_PROBES_INJECTION, "true")
	rs := only[*rayv1.RayService](t, example(t))
	cluster := rayv1.RayCluster{Spec: *rs.Spec.RayClusterSpec.DeepCopy()}
	cluster.Name, cluster.Namespace = "mistral-tp2-raycluster", "mistral-tp2"
	ctx := t.Context()
	spec := cluster.Spec
	build := func(strip bool) []corev1.Pod {
		head := spec.HeadGroupSpec.DeepCopy()
		worker := spec.WorkerGroupSpecs[0].DeepCopy()
		if strip {
			for _, c := range []*corev1.Container{&head.Template.Spec.Containers[0], &worker.Template.Spec.Containers[0]} {
				c.ReadinessProbe, c.LivenessProbe = nil, nil
			}
		}
		ht := common.DefaultHeadPodTemplate(ctx, cluster, *head, "head", "6379")
		hp := common.BuildPod(ctx, ht, rayv1.HeadNode, head.RayStartParams, "6379", false, utils.RayServiceCRD, "", nil, spec.RayVersion)
		fqdn := "mistral-tp2-raycluster-head-svc.mistral-tp2.svc.cluster.local"
		wt := common.DefaultWorkerPodTemplate(ctx, cluster, *worker, "worker", fqdn, "6379", worker.GroupName, 0, 0)
		wp := common.BuildPod(ctx, wt, rayv1.WorkerNode, worker.RayStartParams, "6379", false, utils.RayServiceCRD, fqdn, nil, spec.RayVersion)
		return []corev1.Pod{hp, wp}
	}
	for _, pod := range build(false) {
		// KubeRay keeps the shared process namespace and the model
		// sidecar first among the init containers, so it starts before
		// anything of KubeRay's (the worker's wait-gcs-ready) and the Ray
		// container.
		if sp := pod.Spec.ShareProcessNamespace; sp == nil || !*sp || len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != "model" ||
			pod.Spec.InitContainers[0].RestartPolicy == nil {
			var names []string
			for _, ic := range pod.Spec.InitContainers {
				names = append(names, ic.Name)
			}
			t.Errorf("%s: shareProcessNamespace %v, init containers %v: want the model sidecar kept first", pod.Spec.Containers[0].Name, sp, names)
		}
		c := pod.Spec.Containers[0]
		cmd := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
		for _, want := range []string{"--object-store-memory=2147483648", "--metrics-export-port=8080", "--num-gpus=1"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s: ray start lacks %s: %s", c.Name, want, cmd)
			}
		}
		if i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == utils.MetricsPortName }); i < 0 || c.Ports[i].ContainerPort != utils.DefaultMetricsPort {
			t.Errorf("%s: ports %v, want %s/%d", c.Name, c.Ports, utils.MetricsPortName, utils.DefaultMetricsPort)
		}
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.Exec != nil {
				t.Errorf("%s: %s probe %+v, want the example's HTTP probe kept", c.Name, name, p)
			}
		}
	}
	// The OpenAI Service against the labels KubeRay really puts on the
	// pods: the head (once the controller has seen its proxy healthy and
	// set ray.io/serve=true) is selected, the worker (labelled
	// ray.io/serve=true by BuildPod, proxy or not) is not.
	svc := only[*corev1.Service](t, example(t))
	built := build(false)
	built[0].Labels["ray.io/serve"] = "true"
	for i, pod := range built {
		selected := true
		for k, v := range svc.Spec.Selector {
			if pod.Labels[k] != v {
				selected = false
			}
		}
		if selected != (i == 0) {
			t.Errorf("%s (labels %v) selected by %s: %v; want the head only", pod.Spec.Containers[0].Name, pod.Labels, svc.Name, selected)
		}
	}
	if built[1].Labels["ray.io/serve"] != "true" {
		t.Errorf("KubeRay labels the worker ray.io/serve=%q; the head-only selector's reason has changed", built[1].Labels["ray.io/serve"])
	}
	worker := build(true)[1].Spec.Containers[0]
	if p := worker.ReadinessProbe; p == nil || p.Exec == nil || p.TimeoutSeconds != utils.DefaultReadinessProbeTimeoutSeconds || p.FailureThreshold != utils.ServeReadinessProbeFailureThreshold {
		t.Errorf("KubeRay's own worker readiness probe is %+v; the example's reason for its own probes has changed", p)
	}
}

// The probes are HTTP from the kubelet to the pod IP (no exec through the
// kata shim, CAA and the podVM agent), with timeouts and thresholds that
// ride out a slow tunnel, on the ports Ray listens on (KubeRay's constants
// for them, controllers/ray/utils/constant.go at v1.6.2).
func TestProbesTolerateThePeerPodPath(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	for _, p := range rayPods(t, rs) {
		c := p.tpl.Spec.Containers[0]
		for _, k := range []string{"dashboard-port", "dashboard-agent-listen-port"} {
			if _, ok := p.rayStartParams[k]; ok {
				t.Errorf("%s: rayStartParams %s moves a port the probes use", p.group, k)
			}
		}
		// The worker runs no Serve proxy (Serve starts proxies on the head
		// and on nodes with a replica; the worker holds only a vLLM
		// tensor-parallel worker), so its readiness is its raylet's; the
		// head's is GCS.
		wantReady := httpProbe{"/" + utils.RayAgentRayletHealthPath, utils.DefaultDashboardAgentListenPort}
		if p.group == "head" {
			wantReady = httpProbe{"/" + utils.RayDashboardGCSHealthPath, utils.DefaultDashboardPort}
		}
		wantLive := httpProbe{"/" + utils.RayAgentRayletHealthPath, utils.DefaultDashboardAgentListenPort}
		for name, tc := range map[string]struct {
			probe     *corev1.Probe
			want      httpProbe
			minWindow int32
		}{
			"readiness": {c.ReadinessProbe, wantReady, 30},
			// KubeRay's own liveness window: 120 x 5 s.
			"liveness": {c.LivenessProbe, wantLive, utils.DefaultLivenessProbeFailureThreshold * utils.DefaultLivenessProbePeriodSeconds},
		} {
			pr := tc.probe
			if pr == nil || pr.HTTPGet == nil || pr.Exec != nil {
				t.Errorf("%s: %s probe %+v, want httpGet", p.group, name, pr)
				continue
			}
			got := httpProbe{pr.HTTPGet.Path, pr.HTTPGet.Port.IntVal}
			if got != tc.want || pr.HTTPGet.Port.Type != intstr.Int {
				t.Errorf("%s: %s probe %+v, want %+v", p.group, name, got, tc.want)
			}
			if pr.TimeoutSeconds < 5 || pr.FailureThreshold < 3 || pr.PeriodSeconds*pr.FailureThreshold < tc.minWindow {
				t.Errorf("%s: %s probe timeout %d s, %d x %d s; want a timeout of 5 s or more and a window of %d s or more",
					p.group, name, pr.TimeoutSeconds, pr.FailureThreshold, pr.PeriodSeconds, tc.minWindow)
			}
		}
	}
}

type httpProbe struct {
	path string
	port int32
}

// NCCL's socket transport: at most 16 threads and 64 sockets in all
// (src/transport/net_socket.cc at v2.27.3: MAX_THREADS, MAX_SOCKETS); the
// example sets what NCCL picks on its own for a gVNIC (4 x 1).
func TestNCCLSocketThreads(t *testing.T) {
	for _, p := range rayPods(t, only[*rayv1.RayService](t, example(t))) {
		env := envMap(t, p.group, p.tpl.Spec.Containers[0])
		nt, err1 := strconv.Atoi(env["NCCL_SOCKET_NTHREADS"])
		ns, err2 := strconv.Atoi(env["NCCL_NSOCKS_PERTHREAD"])
		if err1 != nil || err2 != nil || nt < 1 || nt > 16 || ns < 1 || nt*ns > 64 {
			t.Errorf("%s: NCCL_SOCKET_NTHREADS %q x NCCL_NSOCKS_PERTHREAD %q; want 1-16 threads and at most 64 sockets", p.group, env["NCCL_SOCKET_NTHREADS"], env["NCCL_NSOCKS_PERTHREAD"])
		}
	}
}

// VLLM_ATTENTION_BACKEND takes a name of vLLM's _Backend enum
// (vllm/platforms/interface.py at v0.11.0); on compute capability 7.5 the
// V1 engine's choices are FlexAttention (the default there), Triton,
// FlashInfer and XFormers (vllm/platforms/cuda.py get_attn_backend_cls):
// FLASH_ATTN needs 8.0.
func TestAttentionBackendRunsOnT4(t *testing.T) {
	for _, p := range rayPods(t, only[*rayv1.RayService](t, example(t))) {
		b := envMap(t, p.group, p.tpl.Spec.Containers[0])["VLLM_ATTENTION_BACKEND"]
		if !slices.Contains([]string{"FLEX_ATTENTION", "TRITON_ATTN", "FLASHINFER", "XFORMERS"}, b) {
			t.Errorf("%s: VLLM_ATTENTION_BACKEND %q is not one vLLM 0.11 runs on a T4", p.group, b)
		}
	}
}

// The weights' local path, as committed, decodes as Ray Serve LLM's
// model_source string; so do the Hugging Face form the manifest's comment
// gives instead and a CloudMirrorConfig; a wrong scheme or key does not.
func TestModelSource(t *testing.T) {
	local := "                model_source: " + modelPath + "\n"
	hf := "                model_source: " + modelSourceID + "\n"
	mirror := "                model_source:\n                  bucket_uri: gs://BUCKET/mistral-nemo-instruct-2407\n"
	for _, dir := range []string{exampleDir, singleDir} {
		b, err := os.ReadFile(filepath.Join(dir, "rayservice.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if commented := strings.ReplaceAll(hf, "                ", "                #   "); !strings.Contains(string(b), commented) {
			t.Errorf("%s/rayservice.yaml does not show the Hugging Face form as the comment %q", dir, commented)
		}
	}
	for _, tc := range []struct {
		name, new, want string
	}{
		{"local path", local, ""},
		{"hugging face", hf, ""},
		{"bucket", mirror, ""},
		{"not a bucket URI", strings.Replace(mirror, "gs://", "https://storage.googleapis.com/", 1), "gs:// or s3://"},
		{"misspelt key", strings.Replace(mirror, "bucket_uri", "bucket", 1), `unknown field "bucket"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := mutated(t, "rayservice.yaml", local, tc.new)
			if err != nil {
				t.Fatal(err)
			}
			var sc serveConfig
			err = decodeStrict([]byte(only[*rayv1.RayService](t, objs).Spec.ServeConfigV2), &sc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				src := sc.Applications[0].Args.LLMConfigs[0].ModelLoadingConfig.ModelSource
				if tc.new == local && (src.ID != modelPath || src.Mirror != nil) {
					t.Errorf("model_source %+v, want %s", src, modelPath)
				}
				if tc.new == hf && (src.ID != modelSourceID || src.Mirror != nil) {
					t.Errorf("model_source %+v, want %s", src, modelSourceID)
				}
				if tc.new == mirror && (src.Mirror == nil || src.ID != "") {
					t.Errorf("model_source %+v, want the bucket", src)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		})
	}
}

// The scrape config selects the Ray pods' metrics port by name.
func TestScrapeConfigSelectsTheMetricsPort(t *testing.T) {
	pm := only[*podMonitoring](t, monitoring(t))
	rs := only[*rayv1.RayService](t, example(t))
	if len(pm.Spec.Endpoints) != 1 {
		t.Fatalf("endpoints %+v, want one", pm.Spec.Endpoints)
	}
	ep := pm.Spec.Endpoints[0]
	for _, p := range rayPods(t, rs) {
		for k, v := range pm.Spec.Selector.MatchLabels {
			if p.tpl.Labels[k] != v {
				t.Errorf("%s pods lack %s=%s", p.group, k, v)
			}
		}
		c := p.tpl.Spec.Containers[0]
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == ep.Port.StrVal && cp.ContainerPort == utils.DefaultMetricsPort
		}) {
			t.Errorf("%s: no port %q = %d (KubeRay's --metrics-export-port)", p.group, ep.Port.StrVal, utils.DefaultMetricsPort)
		}
		if v, ok := p.rayStartParams["metrics-export-port"]; ok && v != strconv.Itoa(utils.DefaultMetricsPort) {
			t.Errorf("%s: metrics-export-port %s, the scrape config expects %d", p.group, v, utils.DefaultMetricsPort)
		}
	}
	// The CRD's rule (pod_types.go ScrapeEndpoint): timeout <= interval.
	interval, err1 := time.ParseDuration(ep.Interval)
	timeout, err2 := time.ParseDuration(ep.Timeout)
	if err1 != nil || err2 != nil || timeout > interval {
		t.Errorf("endpoint interval %q, timeout %q: want durations with the timeout no longer than the interval", ep.Interval, ep.Timeout)
	}
}

// The worker's drain-on-notice sidecar reaches what it names: the GCS and
// the dashboard on the Service KubeRay makes for the RayService's head,
// with the ports that Service has; its script is the ConfigMap the
// kustomization generates (under its hashed name); it runs the Ray
// container's image, so the podVM pulls nothing more for it; and it takes
// the pod's IP, which is the Ray node's. The head has none (its podVM's
// loss ends the cluster: nothing to drain to).
func TestWorkerDrainSidecar(t *testing.T) {
	objs := example(t)
	rs := only[*rayv1.RayService](t, objs)
	cm := only[*corev1.ConfigMap](t, objs)
	if _, ok := cm.Data["drain-on-notice.py"]; !ok {
		t.Fatalf("ConfigMap %s holds %v, want drain-on-notice.py", cm.Name, slices.Collect(maps.Keys(cm.Data)))
	}
	if n := len(rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers); n != 1 {
		t.Errorf("the head has %d containers, want the Ray container alone", n)
	}
	w := rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].Template.Spec
	i := slices.IndexFunc(w.Containers, func(c corev1.Container) bool { return c.Name == "drain-on-notice" })
	if i < 1 {
		t.Fatalf("worker containers %d, want the Ray container first and a drain-on-notice sidecar", len(w.Containers))
	}
	side := w.Containers[i]
	if side.Image != w.Containers[0].Image {
		t.Errorf("sidecar image %s, Ray container %s: the podVM would pull a second image", side.Image, w.Containers[0].Image)
	}

	cluster := rayv1.RayCluster{Spec: *rs.Spec.RayClusterSpec.DeepCopy()}
	cluster.Name, cluster.Namespace = "mistral-tp2-raycluster-x", rs.Namespace
	svc, err := common.BuildHeadServiceForRayService(t.Context(), *rs, cluster)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	args := strings.Join(side.Command, " ")
	for _, want := range []string{
		"python3 /opt/caa-gcp-t4/drain-on-notice.py",
		"--gcs=" + svc.Name + ":" + strconv.Itoa(int(ports[utils.GcsServerPortName])),
		"--dashboard=http://" + svc.Name + ":" + strconv.Itoa(int(ports[utils.DashboardPortName])),
	} {
		if !strings.Contains(args, want) {
			t.Errorf("sidecar command %q lacks %q (KubeRay's head Service %s has ports %v)", args, want, svc.Name, ports)
		}
	}
	if len(side.Env) != 1 || side.Env[0].Name != "POD_IP" || side.Env[0].ValueFrom == nil ||
		side.Env[0].ValueFrom.FieldRef == nil || side.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("sidecar env %+v, want POD_IP from status.podIP", side.Env)
	}
	if len(side.VolumeMounts) != 1 || side.VolumeMounts[0].MountPath != "/opt/caa-gcp-t4" {
		t.Fatalf("sidecar mounts %+v, want its script at /opt/caa-gcp-t4", side.VolumeMounts)
	}
	v := slices.IndexFunc(w.Volumes, func(v corev1.Volume) bool { return v.Name == side.VolumeMounts[0].Name })
	if v < 0 || w.Volumes[v].ConfigMap == nil || w.Volumes[v].ConfigMap.Name != cm.Name {
		t.Errorf("sidecar volume %s does not name the generated ConfigMap %s", side.VolumeMounts[0].Name, cm.Name)
	}
}
