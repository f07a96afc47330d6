// Package plan is `gcp-t4 plan`: from a workload manifest (or flags) it
// derives what the peer-pods webhook and CAA would pass to the provider,
// runs the provider's own selection and insert-building code, and shows
// the podVM that would be created with an hourly cost estimate. Nothing
// here calls a cloud API.
//
// The package is layered so other modes can reuse it: manifest.go turns
// YAML into pod groups, request.go turns a pod group into the provider's
// request, plan.go runs the provider, render.go prints. A sizing mode such
// as `gcp-t4 plan serve` adds a case in Main and works on the same Groups.
package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Workload is one object of a manifest that makes pods.
type Workload struct {
	Kind      string
	Name      string
	Namespace string
	// NamespaceAssumed: the object named no namespace, and Namespace is
	// defaultNamespace, as kubectl would use without -n.
	NamespaceAssumed bool
	Groups           []Group
	// Annotations are the object's own (KubeRay reads
	// ray.io/initializing-timeout there).
	Annotations map[string]string
	// Models are the checkpoints a RayService's Serve LLM applications
	// load (model_loading_config.model_source), each downloaded by every
	// pod of the cluster that holds a GPU.
	Models []string
}

// Group is one kind of pod a workload makes: a Pod's only pod, a
// Deployment's replicas, a Ray head or one worker group.
type Group struct {
	// Name is "pod", "head" or "worker/<groupName>".
	Name     string
	Replicas int64
	// Path is where the pod template sits in the object, for messages.
	Path        string
	Annotations map[string]string
	Spec        corev1.PodSpec
}

// defaultNamespace is where an object that names none is planned, as
// kubectl applies it without -n and a current context without one.
const defaultNamespace = "default"

// object is the generic form of one YAML document.
type object = map[string]any

// ParseManifests reads every document of a YAML or JSON stream. Kinds that
// make no pods (Services, ConfigMaps…) are returned in skipped.
func ParseManifests(r io.Reader) (workloads []Workload, skipped []string, err error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(r, 4096)
	for doc := 0; ; doc++ {
		var obj object
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if obj == nil {
			continue
		}
		w, ok, err := workloadOf(obj)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d (%s %s): %w", doc, str(obj, "kind"), str(obj, "metadata", "name"), err)
		}
		if !ok {
			skipped = append(skipped, fmt.Sprintf("%s %s", str(obj, "kind"), str(obj, "metadata", "name")))
			continue
		}
		workloads = append(workloads, w)
	}
	if len(workloads) == 0 {
		return nil, skipped, fmt.Errorf("no Pod, Deployment, StatefulSet, ReplicaSet, DaemonSet, Job, CronJob, RayService, RayCluster or RayJob in the manifest")
	}
	return workloads, skipped, nil
}

func workloadOf(obj object) (Workload, bool, error) {
	w := Workload{Kind: str(obj, "kind"), Name: str(obj, "metadata", "name"), Namespace: str(obj, "metadata", "namespace")}
	if w.Namespace == "" {
		w.Namespace, w.NamespaceAssumed = defaultNamespace, true
	}
	if ann, ok := get(obj, "metadata", "annotations").(map[string]any); ok {
		w.Annotations = map[string]string{}
		for k, v := range ann {
			w.Annotations[k] = fmt.Sprint(v)
		}
	}
	var err error
	add := func(name, path string, template any, replicas int64) {
		if err != nil {
			return
		}
		var g Group
		g, err = groupOf(name, path, template, replicas)
		w.Groups = append(w.Groups, g)
	}
	switch w.Kind {
	case "Pod":
		add("pod", "", obj, 1)
	case "Deployment", "StatefulSet", "ReplicaSet":
		add("pod", "spec.template", get(obj, "spec", "template"), intOr(get(obj, "spec", "replicas"), 1))
	case "DaemonSet":
		add("pod", "spec.template", get(obj, "spec", "template"), 1)
	case "Job":
		add("pod", "spec.template", get(obj, "spec", "template"), intOr(get(obj, "spec", "parallelism"), 1))
	case "CronJob":
		add("pod", "spec.jobTemplate.spec.template", get(obj, "spec", "jobTemplate", "spec", "template"), intOr(get(obj, "spec", "jobTemplate", "spec", "parallelism"), 1))
	case "RayService":
		err = addRayCluster(add, get(obj, "spec", "rayClusterConfig"), "spec.rayClusterConfig")
		if err == nil {
			w.Models, err = serveModels(str(obj, "spec", "serveConfigV2"))
		}
	case "RayCluster":
		err = addRayCluster(add, get(obj, "spec"), "spec")
	case "RayJob":
		err = addRayCluster(add, get(obj, "spec", "rayClusterSpec"), "spec.rayClusterSpec")
	default:
		return Workload{}, false, nil
	}
	return w, true, err
}

// addRayCluster adds a KubeRay cluster spec's head and worker groups.
func addRayCluster(add func(name, path string, template any, replicas int64), spec any, path string) error {
	if spec == nil {
		return fmt.Errorf("%s: missing; a Ray workload needs a cluster spec with headGroupSpec", path)
	}
	add("head", path+".headGroupSpec.template", get(spec, "headGroupSpec", "template"), 1)
	workers, _ := get(spec, "workerGroupSpecs").([]any)
	for i, wg := range workers {
		name := str(wg, "groupName")
		if name == "" {
			name = fmt.Sprint(i)
		}
		replicas := intOr(get(wg, "replicas"), intOr(get(wg, "minReplicas"), 1))
		add("worker/"+name, fmt.Sprintf("%s.workerGroupSpecs[%d].template", path, i), get(wg, "template"), replicas)
	}
	return nil
}

// groupOf decodes a pod (template) into a Group through JSON, so resource
// quantities parse exactly as the API server parses them.
func groupOf(name, path string, template any, replicas int64) (Group, error) {
	where := path
	if where == "" {
		where = "spec"
	}
	if template == nil {
		return Group{}, fmt.Errorf("%s: missing pod template", where)
	}
	g := Group{Name: name, Path: path, Replicas: replicas, Annotations: map[string]string{}}
	if ann, ok := get(template, "metadata", "annotations").(map[string]any); ok {
		for k, v := range ann {
			g.Annotations[k] = fmt.Sprint(v)
		}
	}
	raw, err := json.Marshal(get(template, "spec"))
	if err != nil {
		return Group{}, fmt.Errorf("%s.spec: %w", where, err)
	}
	if err := json.Unmarshal(raw, &g.Spec); err != nil {
		return Group{}, fmt.Errorf("%s.spec: %w", joinPath(path, "spec"), err)
	}
	if len(g.Spec.Containers) == 0 {
		return Group{}, fmt.Errorf("%s.containers: a pod needs at least one container", joinPath(path, "spec"))
	}
	return g, nil
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// get walks nested maps; a missing key gives nil.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := get(v, keys...).(string)
	return s
}

// intOr reads a YAML number (float64 or int64 after decoding), else def.
func intOr(v any, def int64) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	case int:
		return int64(n)
	}
	return def
}

// serveModels reads the model sources of Serve LLM applications in a
// RayService's serveConfigV2 (a YAML document in a string):
// applications[].args.llm_configs[].model_loading_config.model_source,
// written as a string, as {id: ...}, or as {bucket_uri: ...} (a mirror in
// object storage).
func serveModels(serve string) ([]string, error) {
	if strings.TrimSpace(serve) == "" {
		return nil, nil
	}
	var doc object
	if err := k8syaml.Unmarshal([]byte(serve), &doc); err != nil {
		return nil, fmt.Errorf("spec.serveConfigV2: %w", err)
	}
	var models []string
	apps, _ := get(doc, "applications").([]any)
	for _, app := range apps {
		cfgs, _ := get(app, "args", "llm_configs").([]any)
		for _, c := range cfgs {
			src := get(c, "model_loading_config", "model_source")
			if id := str(src, "id"); id != "" {
				src = id
			} else if uri := str(src, "bucket_uri"); uri != "" {
				src = uri
			}
			if s, ok := src.(string); ok && s != "" {
				models = append(models, s)
			}
		}
	}
	return models, nil
}
