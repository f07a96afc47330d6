package kuberay

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

const kuberayModule = "github.com/ray-project/kuberay/ray-operator"

// kuberayCRD reads a CRD as KubeRay ships it in the ray-operator module at
// the version this test module pins (config/crd/bases), from the module
// cache: the same module the Go types come from.
func kuberayCRD(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	// The module's directory at the version go.mod pins (test binaries
	// carry no module build info to ask instead).
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", kuberayModule)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", kuberayModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatalf("%s is not downloaded: run `go mod download %s` in test/kuberay", kuberayModule, kuberayModule)
	}
	path := filepath.Join(dir, "config", "crd", "bases", file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("KubeRay CRD: %v", err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &unstructured.Unstructured{Object: obj}
}

var (
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	// resources maps the kinds the example and its prerequisites apply.
	resources = map[string]schema.GroupVersionResource{
		"Namespace":      {Version: "v1", Resource: "namespaces"},
		"Service":        {Version: "v1", Resource: "services"},
		"Pod":            {Version: "v1", Resource: "pods"},
		"ConfigMap":      {Version: "v1", Resource: "configmaps"},
		"ServiceAccount": {Version: "v1", Resource: "serviceaccounts"},
		"RuntimeClass":   {Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"},
		"RayService":     {Group: "ray.io", Version: "v1", Resource: "rayservices"},
	}
)

// apply server-side applies one manifest with strict field validation, as
// `kubectl apply --server-side --validate=strict` does.
func apply(ctx context.Context, dyn dynamic.Interface, doc []byte) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(j, &u.Object); err != nil {
		return err
	}
	gvr, ok := resources[u.GetKind()]
	if !ok {
		return fmt.Errorf("no resource known for kind %s", u.GetKind())
	}
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if u.GetNamespace() != "" {
		ri = dyn.Resource(gvr).Namespace(u.GetNamespace())
	}
	force := true
	_, err = ri.Patch(ctx, u.GetName(), types.ApplyPatchType, j, metav1.PatchOptions{
		FieldManager: "caa-gcp-t4-test", FieldValidation: "Strict", Force: &force,
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// installCRD creates a CRD and waits until the API server serves it.
func installCRD(t *testing.T, dyn dynamic.Interface, crd *unstructured.Unstructured) {
	t.Helper()
	ctx := t.Context()
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("create CRD %s: %v", crd.GetName(), err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get CRD %s: %v", crd.GetName(), err)
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not Established after a minute: %v", crd.GetName(), conds)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The example, and its NCCL check, are accepted by a real kube-apiserver
// with KubeRay's CRDs: server-side apply with strict field validation, as
// the runbook applies them. Mutations the API server must refuse show the
// path is really validated.
func TestAPIServerAcceptsTheExample(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	installCRD(t, dyn, kuberayCRD(t, "ray.io_rayservices.yaml"))

	// What a cluster provides before the example: the kata-remote
	// RuntimeClass (this project's component; the RuntimeClass admission
	// plugin refuses pods naming a missing one), the namespace (runbook
	// step 5) and its default ServiceAccount (normally made by the
	// controller manager, which this control plane does not run).
	rc, err := os.ReadFile(filepath.Join(repoRoot, "install/components/runtimeclass/runtimeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range [][]byte{
		rc,
		[]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: mistral-tp2\n"),
		[]byte("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: mistral-tp2\n"),
	} {
		if err := apply(ctx, dyn, doc); err != nil {
			t.Fatalf("prerequisite: %v", err)
		}
	}

	for _, set := range []struct {
		name string
		objs []object
	}{{"nccl-check", ncclCheck(t)}, {"mistral-tp2", example(t)}, {"single-podvm", singlePodVM(t)}} {
		for _, o := range set.objs {
			if err := apply(ctx, dyn, o.yaml); err != nil {
				t.Errorf("%s: %v", set.name, err)
			}
		}
	}
	got, err := dyn.Resource(resources["RayService"]).Namespace("mistral-tp2").Get(ctx, "mistral-tp2", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read back the RayService: %v", err)
	}
	if v, _, _ := unstructured.NestedString(got.Object, "spec", "rayClusterConfig", "headGroupSpec", "rayStartParams", "num-gpus"); v != "1" {
		t.Errorf("stored head num-gpus %q, want \"1\"", v)
	}
	one, err := dyn.Resource(resources["RayService"]).Namespace("mistral-tp2").Get(ctx, "mistral-tp2-1vm", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read back the one-podVM RayService: %v", err)
	}
	if v, _, _ := unstructured.NestedString(one.Object, "spec", "rayClusterConfig", "headGroupSpec", "rayStartParams", "num-gpus"); v != "2" {
		t.Errorf("stored one-podVM head num-gpus %q, want \"2\"", v)
	}

	// Built-in kinds too: strict validation names the unknown field rather
	// than dropping it.
	svc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: typo\n  namespace: mistral-tp2\nspec:\n  selectr: {a: b}\n  ports: [{port: 8000}]\n"
	if err := apply(ctx, dyn, []byte(svc)); err == nil || !strings.Contains(err.Error(), "selectr") {
		t.Errorf("Service with spec.selectr: error %v, want the unknown field named", err)
	}

	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"unknown field", "minReplicas: 1", "minReplica: 1", ".spec.rayClusterConfig.workerGroupSpecs[0].minReplica: field not declared in schema"},
		{"number for a string", "          num-gpus: \"1\"\n", "          num-gpus: 1\n", ".spec.rayClusterConfig.workerGroupSpecs[0].rayStartParams.num-gpus: expected string"},
		{"string for an integer", "groupName: gpu\n        replicas: 1\n", "groupName: gpu\n        replicas: \"1\"\n", ".spec.rayClusterConfig.workerGroupSpecs[0].replicas: expected numeric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(exampleDir, "rayservice.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(string(raw), tc.old) != 1 {
				t.Fatalf("rayservice.yaml holds %q %d times, want once", tc.old, strings.Count(string(raw), tc.old))
			}
			doc := strings.Replace(string(raw), tc.old, tc.new, 1)
			doc = strings.Replace(doc, "  name: mistral-tp2\n", "  name: mistral-tp2\n  namespace: mistral-tp2\n", 1)
			err = apply(ctx, dyn, []byte(doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("apply error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
