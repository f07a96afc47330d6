package kuberay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// serveConfig is the part of Ray Serve's config schema the example uses,
// with Ray Serve LLM's LLMConfig under args.llm_configs. Decoded strictly:
// a key missing here is a typo, or a setting to add after checking it
// against Ray Serve LLM's LLMConfig (python/ray/llm/_internal/serve/core/
// configs/llm_config.py, Ray 2.52) and vLLM's engine arguments (vllm/
// engine/arg_utils.py, vllm/config/*.py, v0.11.0).
type serveConfig struct {
	Applications []struct {
		Name        string `json:"name"`
		RoutePrefix string `json:"route_prefix"`
		ImportPath  string `json:"import_path"`
		Args        struct {
			LLMConfigs []llmConfig `json:"llm_configs"`
		} `json:"args"`
	} `json:"applications"`
}

type llmConfig struct {
	ModelLoadingConfig struct {
		ModelID     string      `json:"model_id"`
		ModelSource modelSource `json:"model_source"`
	} `json:"model_loading_config"`
	AcceleratorType string `json:"accelerator_type,omitempty"`
	// DeploymentConfig is Serve's deployment options (LLMConfig validates
	// them as ray.serve._private.config.DeploymentConfig).
	DeploymentConfig struct {
		NumReplicas        *int `json:"num_replicas"`
		MaxOngoingRequests *int `json:"max_ongoing_requests"`
	} `json:"deployment_config"`
	LogEngineMetrics     *bool `json:"log_engine_metrics"`
	PlacementGroupConfig struct {
		Strategy string               `json:"strategy"`
		Bundles  []map[string]float64 `json:"bundles"`
	} `json:"placement_group_config"`
	EngineKwargs engineKwargs `json:"engine_kwargs"`
}

// modelSource is ModelLoadingConfig.model_source: a Hugging Face id or a
// local path (a string), or a CloudMirrorConfig {bucket_uri, extra_files}
// whose bucket_uri starts with s3:// or gs:// (python/ray/llm/_internal/
// common/utils/cloud_utils.py check_uri_format).
type modelSource struct {
	ID     string
	Mirror *cloudMirror
}

type cloudMirror struct {
	BucketURI  string `json:"bucket_uri"`
	ExtraFiles []struct {
		BucketURI       string `json:"bucket_uri"`
		DestinationPath string `json:"destination_path"`
	} `json:"extra_files,omitempty"`
}

func (m *modelSource) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte(`"`)) {
		return json.Unmarshal(b, &m.ID)
	}
	// The outer decoder's DisallowUnknownFields does not reach into an
	// UnmarshalJSON; this one refuses unknown keys itself.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c cloudMirror
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("model_source as a CloudMirrorConfig: %w", err)
	}
	if !strings.HasPrefix(c.BucketURI, "gs://") && !strings.HasPrefix(c.BucketURI, "s3://") {
		return fmt.Errorf("model_source.bucket_uri %q: Ray Serve LLM wants a URI that starts with gs:// or s3://", c.BucketURI)
	}
	m.Mirror = &c
	return nil
}

type engineKwargs struct {
	TensorParallelSize         int      `json:"tensor_parallel_size"`
	PipelineParallelSize       int      `json:"pipeline_parallel_size"`
	DistributedExecutorBackend string   `json:"distributed_executor_backend"`
	Dtype                      string   `json:"dtype"`
	MaxModelLen                int      `json:"max_model_len"`
	GPUMemoryUtilization       float64  `json:"gpu_memory_utilization"`
	EnforceEager               bool     `json:"enforce_eager"`
	MaxNumSeqs                 int      `json:"max_num_seqs"`
	MaxNumBatchedTokens        int      `json:"max_num_batched_tokens"`
	LoadFormat                 string   `json:"load_format"`
	IgnorePatterns             []string `json:"ignore_patterns"`
}

// theLLM decodes the RayService's serveConfigV2 (a YAML document inside a
// string) strictly and returns its one LLM.
func theLLM(t *testing.T, rs *rayv1.RayService) llmConfig {
	t.Helper()
	var sc serveConfig
	if err := decodeStrict([]byte(rs.Spec.ServeConfigV2), &sc); err != nil {
		t.Fatalf("serveConfigV2: %v", err)
	}
	if len(sc.Applications) != 1 || len(sc.Applications[0].Args.LLMConfigs) != 1 {
		t.Fatalf("serveConfigV2 has %d applications; want one with one LLM", len(sc.Applications))
	}
	app := sc.Applications[0]
	if app.ImportPath != "ray.serve.llm:build_openai_app" || app.RoutePrefix != "/" {
		t.Errorf("application imports %q at %q; want Ray Serve LLM's OpenAI app at /", app.ImportPath, app.RoutePrefix)
	}
	return app.Args.LLMConfigs[0]
}

// The settings `gcp-t4 plan serve` was run with (gcp-t4/internal/fit's
// TestExampleModelFitsTwoT4s asserts its verdict for exactly these).
var planned = engineKwargs{
	TensorParallelSize: 2, PipelineParallelSize: 1, DistributedExecutorBackend: "ray",
	Dtype: "half", MaxModelLen: 8192, GPUMemoryUtilization: 0.95, EnforceEager: true, MaxNumSeqs: 8,
	MaxNumBatchedTokens: 2048, LoadFormat: "safetensors",
	IgnorePatterns: []string{"consolidated.safetensors", "original/**/*"},
}

const (
	// modelSourceID is the checkpoint served; modelImage the image of it
	// the pods name as committed (a name that never resolves, RFC 6761),
	// which runbook step 4 makes with gcp-t4 cache model and pins.
	modelSourceID = "mistralai/Mistral-Nemo-Instruct-2407"
	modelImage    = "models.invalid/mistral-nemo-instruct-2407"
	image         = "rayproject/ray-llm:2.52.0-py311-cu128"
)

func TestServeConfig(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	llm := theLLM(t, rs)
	if !reflect.DeepEqual(llm.EngineKwargs, planned) {
		t.Errorf("engine_kwargs %+v, want the planned %+v", llm.EngineKwargs, planned)
	}
	// The weights are the model image's, read where they lie, never
	// downloaded; the image's name is the checkpoint's it holds.
	if src := llm.ModelLoadingConfig.ModelSource; src.ID != modelPath || src.Mirror != nil {
		t.Errorf("model_source %+v, want the model image's files at %s", src, modelPath)
	}
	if want := strings.ToLower(modelSourceID[strings.Index(modelSourceID, "/")+1:]); !strings.HasSuffix(modelImage, "/"+want) {
		t.Errorf("model image %s does not name %s (%s)", modelImage, modelSourceID, want)
	}
	if n := llm.DeploymentConfig.NumReplicas; n == nil || *n != 1 {
		t.Errorf("num_replicas %v, want 1: one engine over both GPUs", n)
	}
	pg := llm.PlacementGroupConfig
	if pg.Strategy != "SPREAD" {
		t.Errorf("placement strategy %q, want SPREAD (never STRICT_PACK: no podVM has two GPUs)", pg.Strategy)
	}
	if len(pg.Bundles) != llm.EngineKwargs.TensorParallelSize {
		t.Errorf("%d bundles for tensor_parallel_size %d", len(pg.Bundles), llm.EngineKwargs.TensorParallelSize)
	}
	for i, b := range pg.Bundles {
		if !maps.Equal(b, map[string]float64{"GPU": 1}) {
			t.Errorf("bundle %d is %v, want {GPU: 1}", i, b)
		}
	}
}

// rayPod is one Ray node's pod template with its group's settings.
type rayPod struct {
	group          string
	replicas       int32
	rayStartParams map[string]string
	tpl            corev1.PodTemplateSpec
}

func rayPods(t *testing.T, rs *rayv1.RayService) []rayPod {
	t.Helper()
	c := rs.Spec.RayClusterSpec
	pods := []rayPod{{"head", 1, c.HeadGroupSpec.RayStartParams, c.HeadGroupSpec.Template}}
	for _, w := range c.WorkerGroupSpecs {
		if w.Replicas == nil || w.MinReplicas == nil || w.MaxReplicas == nil {
			t.Fatalf("worker group %s: replicas, minReplicas and maxReplicas must all be set", w.GroupName)
		}
		if *w.MinReplicas != *w.Replicas || *w.MaxReplicas != *w.Replicas {
			t.Errorf("worker group %s: min %d, replicas %d, max %d; a tensor-parallel group has a fixed size",
				w.GroupName, *w.MinReplicas, *w.Replicas, *w.MaxReplicas)
		}
		pods = append(pods, rayPod{w.GroupName, *w.Replicas, w.RayStartParams, w.Template})
	}
	return pods
}

// Each Ray node is a podVM with one T4, and together they hold exactly the
// GPUs the engine is split over.
func TestEachRayNodeIsAOneT4PodVM(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	tp := theLLM(t, rs).EngineKwargs.TensorParallelSize
	one := resource.MustParse("1")
	var gpus int32
	for _, p := range rayPods(t, rs) {
		spec := p.tpl.Spec
		if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "kata-remote" {
			t.Errorf("%s: runtimeClassName %v, want kata-remote", p.group, spec.RuntimeClassName)
		}
		if len(spec.Containers) == 0 {
			t.Fatalf("%s: no containers", p.group)
		}
		c := spec.Containers[0] // KubeRay's Ray container index
		for name, rl := range map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests} {
			if q, ok := rl["nvidia.com/gpu"]; !ok || q.Cmp(one) != 0 {
				t.Errorf("%s: %s nvidia.com/gpu = %v, want 1", p.group, name, rl["nvidia.com/gpu"])
			}
		}
		if p.rayStartParams["num-gpus"] != "1" {
			t.Errorf("%s: rayStartParams num-gpus %q, want \"1\" (the webhook strips container resources)", p.group, p.rayStartParams["num-gpus"])
		}
		if c.Image != image {
			t.Errorf("%s: image %q, want %q", p.group, c.Image, image)
		}
		gpus += p.replicas
	}
	if int(gpus) != tp {
		t.Errorf("%d GPU pods for tensor_parallel_size %d", gpus, tp)
	}
	// The image tag starts with the Ray version KubeRay is told about.
	tag := image[strings.LastIndex(image, ":")+1:]
	if v := rs.Spec.RayClusterSpec.RayVersion; !strings.HasPrefix(tag, v+"-") {
		t.Errorf("rayVersion %q does not match image tag %q", v, tag)
	}
}

func envMap(t *testing.T, group string, c corev1.Container) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			m[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			m[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.SecretKeyRef != nil:
			m[e.Name] = fmt.Sprintf("secret:%s/%s", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		default:
			t.Errorf("%s: env %s has an unexpected source", group, e.Name)
		}
	}
	return m
}

// NCCL and Gloo settings for the tunnel, the Hub switched off (the weights
// are the model image's), the same on every node; /dev/shm sized in memory.
func TestNetworkEnvAndSharedMemory(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	want := map[string]string{
		"NCCL_SOCKET_IFNAME":     "eth0",
		"GLOO_SOCKET_IFNAME":     "eth0",
		"NCCL_IB_DISABLE":        "1",
		"NCCL_SOCKET_NTHREADS":   "4",
		"NCCL_NSOCKS_PERTHREAD":  "1",
		"NCCL_DEBUG":             "INFO",
		"VLLM_ATTENTION_BACKEND": "FLEX_ATTENTION",
		"RAY_CGRAPH_get_timeout": "1800",
		"VLLM_HOST_IP":           "field:status.podIP",
		"HF_HUB_OFFLINE":         "1",
	}
	minShm := resource.MustParse("1Gi")
	for _, p := range rayPods(t, rs) {
		c := p.tpl.Spec.Containers[0]
		if got := envMap(t, p.group, c); !maps.Equal(got, want) {
			t.Errorf("%s: env %v, want %v", p.group, got, want)
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m.Name
		}
		shm, ok := mounts["/dev/shm"]
		if !ok {
			t.Errorf("%s: nothing mounted at /dev/shm", p.group)
			continue
		}
		i := slices.IndexFunc(p.tpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == shm })
		if i < 0 {
			t.Fatalf("%s: /dev/shm volume %q not defined", p.group, shm)
		}
		ed := p.tpl.Spec.Volumes[i].EmptyDir
		if ed == nil || ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Cmp(minShm) < 0 {
			t.Errorf("%s: /dev/shm is %+v, want an emptyDir in Memory of at least %s", p.group, ed, minShm.String())
		}
		if ed != nil && ed.SizeLimit != nil {
			if mem := c.Resources.Limits.Memory(); ed.SizeLimit.Cmp(*mem) >= 0 {
				t.Errorf("%s: /dev/shm %s is not below the memory limit %s", p.group, ed.SizeLimit, mem)
			}
		}
	}
}

func TestInitializingTimeoutCoversPodVMStartUp(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	v, ok := rs.Annotations["ray.io/initializing-timeout"]
	if !ok {
		t.Fatal("no ray.io/initializing-timeout annotation: KubeRay's default gives up during image pull and model load")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("ray.io/initializing-timeout %q: %v", v, err)
	}
	if d < 45*time.Minute {
		t.Errorf("initializing timeout %s is under 45m (podVM boot, multi-GB image pull, 24.5 GB download and load)", d)
	}
}

// The OpenAI Service selects the head only, once KubeRay has labelled it
// ray.io/serve=true (its proxy answers): Serve starts proxies only on the
// head and on nodes with a replica, and the worker holds none. KubeRay
// labels workers ray.io/serve=true unconditionally (common/pod.go BuildPod
// at v1.6.2), so a selector without the node type would send requests to
// the worker, where nothing listens on 8000.
func TestOpenAIServiceSelectsTheHead(t *testing.T) {
	objs := example(t)
	rs := only[*rayv1.RayService](t, objs)
	svc := only[*corev1.Service](t, objs)
	checkOpenAIService(t, rs, svc)
}

func checkOpenAIService(t *testing.T, rs *rayv1.RayService, svc *corev1.Service) {
	t.Helper()
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != 8000 {
		t.Fatalf("service ports %+v, want one to 8000 (Ray Serve's HTTP proxy)", svc.Spec.Ports)
	}
	for _, p := range rayPods(t, rs) {
		labels := maps.Clone(p.tpl.Labels)
		// What KubeRay sets on the pods it creates: the node type, and
		// ray.io/serve (true on workers; on the head once its proxy is
		// healthy).
		labels["ray.io/serve"] = "true"
		labels["ray.io/node-type"] = "worker"
		if p.group == "head" {
			labels["ray.io/node-type"] = "head"
		}
		selected := true
		for k, v := range svc.Spec.Selector {
			if labels[k] != v {
				selected = false
			}
		}
		if selected != (p.group == "head") {
			t.Errorf("%s pod selected by %s: %v; want the head only", p.group, svc.Name, selected)
		}
		c := p.tpl.Spec.Containers[0]
		if p.group == "head" && !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == 8000 && cp.Name == "serve" }) {
			t.Errorf("%s: no container port serve/8000", p.group)
		}
	}
	if svc.Spec.Selector["ray.io/serve"] != "true" {
		t.Errorf("selector %v lacks ray.io/serve=true: the head would get traffic before its proxy is up", svc.Spec.Selector)
	}
}

// The first real request compiles FlexAttention inside vLLM's compiled Ray
// graph; Ray's compiled-graph get() times out after RAY_CGRAPH_get_timeout
// (python/ray/dag/context.py: default 10 s; vLLM 0.11 sets 300 with
// os.environ.setdefault in executor/ray_distributed_executor.py, which a
// value in the pod's environment overrides). The example allows far more
// than vLLM's 300 s, on every Ray node.
func TestCompiledGraphTimeoutCoversTheFirstRequest(t *testing.T) {
	for _, rs := range []*rayv1.RayService{only[*rayv1.RayService](t, example(t)), only[*rayv1.RayService](t, singlePodVM(t))} {
		for _, p := range rayPods(t, rs) {
			v := envMap(t, p.group, p.tpl.Spec.Containers[0])["RAY_CGRAPH_get_timeout"]
			n, err := strconv.Atoi(v)
			if err != nil || n < 900 {
				t.Errorf("%s %s: RAY_CGRAPH_get_timeout %q; want whole seconds, at least 900 (vLLM's own 300 is what the first FlexAttention compile overruns)", rs.Name, p.group, v)
			}
		}
	}
}

// The image component sets the Ray image of every pod of the example: the
// RayService's, the NCCL check's and the one-podVM layout's. Pinned to a
// digest, as runbook step 4 pins it for the cache, every container of
// every one of them names that digest, and nothing else changes.
func TestImageComponentPinsEveryRayPod(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const modelDigest = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	const modelRepo = "us-central1-docker.pkg.dev/example-project/models/mistral-nemo-instruct-2407"
	// Both pins, as step 4's two kustomize edit set image write them.
	fsys := mutatedTree(t, "image/kustomization.yaml", "  newTag: 2.52.0-py311-cu128\n",
		"  digest: "+digest+"\n- name: "+modelImage+"\n  newName: "+modelRepo+"\n  digest: "+modelDigest+"\n")
	containers := 0
	for _, dir := range []string{"/example", "/example/nccl-check", "/example/single-podvm"} {
		objs, err := decodeAll(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			var specs []corev1.PodSpec
			switch v := o.typed.(type) {
			case *corev1.Pod:
				specs = append(specs, v.Spec)
			case *rayv1.RayService:
				for _, p := range rayPods(t, v) {
					specs = append(specs, p.tpl.Spec)
				}
			}
			for _, s := range specs {
				for _, c := range append(slices.Clone(s.InitContainers), s.Containers...) {
					containers++
					want := "rayproject/ray-llm@" + digest
					if c.Name == "model" {
						want = modelRepo + "@" + modelDigest
					}
					if c.Image != want {
						t.Errorf("%s %s %s: image %s, want the pinned %s", dir, o.name, c.Name, c.Image, want)
					}
				}
			}
		}
	}
	// Head, worker and its drain sidecar, a model sidecar each; two check
	// pods; the one-podVM head and its model sidecar.
	if containers != 9 {
		t.Errorf("%d containers; want 9", containers)
	}
}
