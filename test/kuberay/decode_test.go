package kuberay

import (
	"errors"
	"strings"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"sigs.k8s.io/yaml"
)

// Every manifest the kustomization renders decodes strictly into its
// KubeRay or Kubernetes Go type.
func TestExampleDecodesStrictly(t *testing.T) {
	objs := example(t)
	kinds := map[string]string{}
	for _, o := range objs {
		kinds[o.kind] = o.name
	}
	want := map[string]string{"Namespace": "mistral-tp2", "RayService": "mistral-tp2", "Service": "mistral-tp2-openai",
		"ConfigMap": "drain-on-notice"}
	if len(kinds) != len(want) || len(objs) != len(want) {
		t.Errorf("rendered %v, want exactly %v", kinds, want)
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%s is %q, want %q", k, kinds[k], n)
		}
	}
}

// KubeRay's own admission rules, beyond the CRD schema: the operator runs
// these before it creates anything and reports a failure only as an event.
func TestExamplePassesKubeRayValidation(t *testing.T) {
	rs := only[*rayv1.RayService](t, example(t))
	if err := utils.ValidateRayServiceMetadata(rs.ObjectMeta); err != nil {
		t.Errorf("ValidateRayServiceMetadata: %v", err)
	}
	if err := utils.ValidateRayServiceSpec(rs); err != nil {
		t.Errorf("ValidateRayServiceSpec: %v", err)
	}
}

// The decoder must catch what the API server would reject; each mutation is
// one typo a person could make in the example.
func TestStrictDecodingRejects(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"number for a rayStartParams string", "rayservice.yaml",
			"          num-gpus: \"1\"\n", "          num-gpus: 1\n",
			"rayStartParams of type string"},
		{"string for replicas", "rayservice.yaml",
			"groupName: gpu\n        replicas: 1\n", "groupName: gpu\n        replicas: \"1\"\n", "of type int32"},
		{"misspelt minReplicas", "rayservice.yaml",
			"minReplicas: 1", "minReplica: 1", `unknown field "minReplica"`},
		{"RayJob's field in a RayService", "rayservice.yaml",
			"rayClusterConfig:", "rayClusterSpec:", `unknown field "rayClusterSpec"`},
		{"misspelt runtimeClassName", "rayservice.yaml",
			"          runtimeClassName: kata-remote\n          # The model's processes",
			"          runtimeClass: kata-remote\n          # The model's processes",
			`unknown field "runtimeClass"`},
		{"string for a port", "service.yaml", "port: 8000", `port: "8000"`, "of type int32"},
		{"misspelt labels on the Namespace", "namespace.yaml", "name: mistral-tp2", "name: mistral-tp2\n  lables: {}", `unknown field "lables"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mutated(t, tc.file, tc.old, tc.new)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Why the test goes through YAMLToJSON: sigs.k8s.io/yaml.UnmarshalStrict
// converts YAML using the Go target's types, so it accepts the unquoted
// number the API server refuses.
func TestUnmarshalStrictIsNotEnough(t *testing.T) {
	doc := []byte("groupName: gpu\nrayStartParams:\n  num-gpus: 1\ntemplate: {}\n")
	var g rayv1.WorkerGroupSpec
	if err := yaml.UnmarshalStrict(doc, &g); err != nil {
		t.Fatalf("UnmarshalStrict now rejects it (%v): the YAMLToJSON detour may no longer be needed", err)
	}
	if g.RayStartParams["num-gpus"] != "1" {
		t.Fatalf("UnmarshalStrict produced %q", g.RayStartParams["num-gpus"])
	}
	if err := decodeStrict(doc, &g); err == nil {
		t.Fatal("decodeStrict accepted num-gpus: 1")
	}
}

// The operator-level rules catch what the schema allows.
func TestKubeRayValidationRejects(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"no minReplicas with autoscaling off",
			"        minReplicas: 1\n", "", "minReplicas"},
		{"RayService name over 47 characters",
			"  name: mistral-tp2\n  annotations:", "  name: mistral-tp2-" + strings.Repeat("x", 40) + "\n  annotations:", "no more than 47 characters"},
		{"initializing timeout in words",
			`ray.io/initializing-timeout: "60m"`, `ray.io/initializing-timeout: "an hour"`, "ray.io/initializing-timeout has invalid format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := mutated(t, "rayservice.yaml", tc.old, tc.new)
			if err != nil {
				t.Fatal(err)
			}
			rs := only[*rayv1.RayService](t, objs)
			err = errors.Join(utils.ValidateRayServiceMetadata(rs.ObjectMeta), utils.ValidateRayServiceSpec(rs))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validation error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// serveConfigV2 is a string to the API server; the test decodes it as its
// own document with the same strictness.
func TestServeConfigTyposRejected(t *testing.T) {
	for _, tc := range []struct{ name, old, new, want string }{
		{"misspelt engine argument", "tensor_parallel_size: 2", "tensor_parralel_size: 2", `unknown field "tensor_parralel_size"`},
		{"string for a number", "max_model_len: 8192", `max_model_len: "8192"`, "of type int"},
		{"misspelt LLMConfig key", "placement_group_config:", "placement_groups_config:", `unknown field "placement_groups_config"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := mutated(t, "rayservice.yaml", tc.old, tc.new)
			if err != nil {
				t.Fatal(err)
			}
			rs := only[*rayv1.RayService](t, objs)
			var sc serveConfig
			err = decodeStrict([]byte(rs.Spec.ServeConfigV2), &sc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
