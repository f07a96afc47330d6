package kuberay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// exampleDir is the example under test, from this module's directory, and
// checkDir its bring-up check.
const (
	exampleDir    = "../../install/examples/mistral-tp2"
	checkDir      = exampleDir + "/nccl-check"
	monitoringDir = exampleDir + "/monitoring"
)

// object is one rendered manifest, as YAML and as the typed value it
// decoded into.
type object struct {
	kind, name string
	yaml       []byte
	typed      any
}

// render builds the kustomization in dir of fsys, as `kubectl apply -k`
// would.
func render(fsys filesys.FileSystem, dir string) ([][]byte, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var docs [][]byte
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s/%s as YAML: %w", r.GetKind(), r.GetName(), err)
		}
		docs = append(docs, y)
	}
	return docs, nil
}

// decodeStrict decodes one manifest the way the API server reads it: YAML
// to JSON without a target type (so `1` stays a number and "1" a string),
// then JSON into the Go type with unknown fields refused. yaml.UnmarshalStrict
// would convert scalars to the target's types and accept `num-gpus: 1`.
func decodeStrict(doc []byte, into any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("YAML to JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

// typeFor is the Go type each kind of the example decodes into; a kind not
// listed is an error, so nothing in the example goes unchecked.
func typeFor(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "ray.io/v1 RayService":
		return &rayv1.RayService{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 Pod":
		return &corev1.Pod{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "monitoring.googleapis.com/v1 PodMonitoring":
		return &podMonitoring{}, nil
	}
	return nil, fmt.Errorf("no Go type registered for %s %s: add it to typeFor", apiVersion, kind)
}

// decodeAll renders dir and strictly decodes every manifest.
func decodeAll(fsys filesys.FileSystem, dir string) ([]object, error) {
	docs, err := render(fsys, dir)
	if err != nil {
		return nil, err
	}
	var objs []object
	for _, d := range docs {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(d, &meta); err != nil {
			return nil, fmt.Errorf("reading apiVersion/kind: %w", err)
		}
		typed, err := typeFor(meta.APIVersion, meta.Kind)
		if err != nil {
			return nil, err
		}
		if err := decodeStrict(d, typed); err != nil {
			return nil, fmt.Errorf("%s %s: %w", meta.Kind, meta.Metadata.Name, err)
		}
		objs = append(objs, object{kind: meta.Kind, name: meta.Metadata.Name, yaml: d, typed: typed})
	}
	return objs, nil
}

// example renders and decodes the example from disk, failing the test on
// any error.
func example(t *testing.T) []object { return fromDisk(t, exampleDir) }

// ncclCheck does the same for the bring-up check.
func ncclCheck(t *testing.T) []object { return fromDisk(t, checkDir) }

// monitoring does the same for the scrape config.
func monitoring(t *testing.T) []object { return fromDisk(t, monitoringDir) }

// podMonitoring is Google Cloud Managed Service for Prometheus's
// PodMonitoring as its operator defines it (GoogleCloudPlatform/
// prometheus-engine pkg/operator/apis/monitoring/v1/pod_types.go at
// v0.17.2), less the HTTP client settings the example does not use. That
// module is not served by the module proxy, hence this copy of the field
// names, decoded as strictly as the rest.
type podMonitoring struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     intstr.IntOrString  `json:"port"`
			Scheme   string              `json:"scheme,omitempty"`
			Path     string              `json:"path,omitempty"`
			Params   map[string][]string `json:"params,omitempty"`
			Interval string              `json:"interval"`
			Timeout  string              `json:"timeout,omitempty"`
		} `json:"endpoints"`
		TargetLabels struct {
			Metadata *[]string `json:"metadata,omitempty"`
			FromPod  []struct {
				From string `json:"from"`
				To   string `json:"to,omitempty"`
			} `json:"fromPod,omitempty"`
		} `json:"targetLabels,omitempty"`
		FilterRunning *bool `json:"filterRunning,omitempty"`
	} `json:"spec"`
}

func fromDisk(t *testing.T, dir string) []object {
	t.Helper()
	objs, err := decodeAll(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// mutated renders the example from an in-memory copy of its tree (the
// image component with it) in which file name, relative to the example,
// has had old replaced by new (exactly once).
func mutated(t *testing.T, name, old, new string) ([]object, error) {
	t.Helper()
	return decodeAll(mutatedTree(t, name, old, new), "/example")
}

// mutatedTree is that in-memory copy, rooted at /example, for rendering
// any of its kustomizations.
func mutatedTree(t *testing.T, name, old, new string) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	found := false
	err := filepath.WalkDir(exampleDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(exampleDir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == name {
			if n := bytes.Count(b, []byte(old)); n != 1 {
				t.Fatalf("%s holds %q %d times; the mutation needs exactly one", name, old, n)
			}
			b = bytes.Replace(b, []byte(old), []byte(new), 1)
			found = true
		}
		return fsys.WriteFile(filepath.Join("/example", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no file %s in the example", name)
	}
	return fsys
}

func only[T any](t *testing.T, objs []object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.typed.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T in the example, found %d", zero, len(found))
	}
	return found[0]
}
