package kuberay

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
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
		if !maps.Equal(pod.Annotations, head.Annotations) {
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
	for _, dir := range []string{exampleDir, checkDir} {
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
