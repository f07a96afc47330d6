package kuberay

import (
	"maps"
	"reflect"
	"strconv"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// singleDir is the one-podVM layout: both T4s in one VM (the t4-2
// profile), beside the two-podVM layout of exampleDir.
const singleDir = exampleDir + "/single-podvm"

func singlePodVM(t *testing.T) []object { return fromDisk(t, singleDir) }

// It renders to a RayService and its OpenAI Service only (the namespace
// and token Secret come from runbook step 5), each decoded strictly into
// KubeRay's and Kubernetes' Go types, and KubeRay's own validation passes.
func TestSinglePodVMDecodesAndValidates(t *testing.T) {
	objs := singlePodVM(t)
	if len(objs) != 2 {
		t.Fatalf("rendered %d objects, want a RayService and a Service", len(objs))
	}
	rs := only[*rayv1.RayService](t, objs)
	if err := utils.ValidateRayServiceMetadata(rs.ObjectMeta); err != nil {
		t.Errorf("ValidateRayServiceMetadata: %v", err)
	}
	if err := utils.ValidateRayServiceSpec(rs); err != nil {
		t.Errorf("ValidateRayServiceSpec: %v", err)
	}
	two := only[*rayv1.RayService](t, example(t))
	if rs.Name == two.Name || rs.Namespace != two.Namespace {
		t.Errorf("RayService %s/%s beside %s/%s: want the same namespace and another name, so both can be tried in turn", rs.Namespace, rs.Name, two.Namespace, two.Name)
	}
	checkOpenAIService(t, rs, only[*corev1.Service](t, objs))
}

// The engine is the same as the two-podVM layout's (what `gcp-t4 plan
// serve` was run with); only the placement differs: both bundles on the
// one node.
func TestSinglePodVMServesTheSameEngine(t *testing.T) {
	rs := only[*rayv1.RayService](t, singlePodVM(t))
	llm := theLLM(t, rs)
	two := theLLM(t, only[*rayv1.RayService](t, example(t)))
	if !reflect.DeepEqual(llm.EngineKwargs, planned) || !reflect.DeepEqual(llm.ModelLoadingConfig, two.ModelLoadingConfig) ||
		!reflect.DeepEqual(llm.DeploymentConfig, two.DeploymentConfig) {
		t.Errorf("engine %+v, model %+v; want the two-podVM layout's", llm.EngineKwargs, llm.ModelLoadingConfig)
	}
	pg := llm.PlacementGroupConfig
	if pg.Strategy != "STRICT_PACK" || len(pg.Bundles) != llm.EngineKwargs.TensorParallelSize {
		t.Errorf("placement %s with %d bundles; want STRICT_PACK with one per GPU", pg.Strategy, len(pg.Bundles))
	}
	for i, b := range pg.Bundles {
		if !maps.Equal(b, map[string]float64{"GPU": 1}) {
			t.Errorf("bundle %d is %v, want {GPU: 1}", i, b)
		}
	}
}

// One Ray node with all the GPUs: the pod asks for tensor_parallel_size
// GPUs (the webhook turns that into the podVM's GPU count), Ray is told the
// same, and the t4-2 profile makes the VM an n1-standard-8 with two T4s
// (src/cloud-providers/gcpt4/catalog/profiles.go). The environment, image and
// probes are the two-podVM head's.
func TestSinglePodVMIsOneVMWithBothGPUs(t *testing.T) {
	rs := only[*rayv1.RayService](t, singlePodVM(t))
	tp := theLLM(t, rs).EngineKwargs.TensorParallelSize
	c := rs.Spec.RayClusterSpec
	if len(c.WorkerGroupSpecs) != 0 {
		t.Fatalf("%d worker groups; the one-podVM layout has the head only", len(c.WorkerGroupSpecs))
	}
	head := c.HeadGroupSpec
	ctr := head.Template.Spec.Containers[0]
	want := resource.MustParse(strconv.Itoa(tp))
	for name, rl := range map[string]corev1.ResourceList{"limits": ctr.Resources.Limits, "requests": ctr.Resources.Requests} {
		if q := rl["nvidia.com/gpu"]; q.Cmp(want) != 0 {
			t.Errorf("%s nvidia.com/gpu = %v, want %d", name, rl["nvidia.com/gpu"], tp)
		}
	}
	if head.RayStartParams["num-gpus"] != strconv.Itoa(tp) {
		t.Errorf("num-gpus %q, want %d", head.RayStartParams["num-gpus"], tp)
	}
	if mt := head.Template.Annotations["io.katacontainers.config.hypervisor.machine_type"]; mt != "t4-2" {
		t.Errorf("machine_type %q, want the t4-2 profile", mt)
	}
	if rc := head.Template.Spec.RuntimeClassName; rc == nil || *rc != "kata-remote" {
		t.Errorf("runtimeClassName %v", rc)
	}
	twoHead := only[*rayv1.RayService](t, example(t)).Spec.RayClusterSpec.HeadGroupSpec
	tc := twoHead.Template.Spec.Containers[0]
	if got, want := envMap(t, "single head", ctr), envMap(t, "head", tc); !maps.Equal(got, want) {
		t.Errorf("env %v, the two-podVM head's %v", got, want)
	}
	if ctr.Image != tc.Image || c.RayVersion != "2.52.0" {
		t.Errorf("image %s, rayVersion %s", ctr.Image, c.RayVersion)
	}
	if !reflect.DeepEqual(ctr.ReadinessProbe, tc.ReadinessProbe) || !reflect.DeepEqual(ctr.LivenessProbe, tc.LivenessProbe) {
		t.Error("probes differ from the two-podVM head's")
	}
	if head.RayStartParams["object-store-memory"] != twoHead.RayStartParams["object-store-memory"] {
		t.Errorf("object store %s, the two-podVM head's %s", head.RayStartParams["object-store-memory"], twoHead.RayStartParams["object-store-memory"])
	}
}
