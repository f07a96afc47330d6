package plan

import (
	"fmt"
	"strconv"
	"strings"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The annotations the peer-pods webhook writes and the kata shim forwards
// to CAA, which maps them to the provider's InstanceTypeSpec, are named in
// the drop-in's annotations package; the webhook's own settings are here.
const (
	// GPUResource is the resource the webhook counts GPUs from.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// DefaultRuntimeClass is the webhook's TARGET_RUNTIMECLASS default.
	DefaultRuntimeClass = "kata-remote"
)

// PodRequest is what a pod group asks the provider for.
type PodRequest struct {
	// Annotations are the pod's hypervisor annotations after the webhook.
	Annotations map[string]string
	Spec        provider.InstanceTypeSpec
	// Warnings are things the user should know, e.g. a pod that is not a
	// peer pod at all.
	Warnings []string
}

// Request derives the webhook's annotations and CAA's spec for a group.
// runtimeClass is the webhook's TARGET_RUNTIMECLASS.
func Request(g Group, runtimeClass string) (PodRequest, error) {
	var r PodRequest
	if rc := g.Spec.RuntimeClassName; rc == nil || *rc != runtimeClass {
		name := "(none)"
		if rc != nil {
			name = *rc
		}
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: runtimeClassName is %s, not %s: the webhook leaves this pod alone and it runs on the node, not in a podVM; set spec.runtimeClassName: %s", g.Name, name, runtimeClass, runtimeClass))
	}
	// Only the hypervisor annotations travel to CAA.
	ann := map[string]string{}
	for k, v := range g.Annotations {
		if strings.HasPrefix(k, annotations.HypervisorPrefix) {
			ann[k] = v
		}
	}
	spec := effectiveRequests(g.Spec)
	cpuReq, cpuLim := sum(spec, corev1.ResourceCPU, false), sum(spec, corev1.ResourceCPU, true)
	memReq, memLim := sum(spec, corev1.ResourceMemory, false), sum(spec, corev1.ResourceMemory, true)
	gpuReq := sum(spec, GPUResource, false)

	// As the webhook: the limit wins when there is a request and the
	// limit is at least as large; zero values write no annotation.
	if !cpuReq.IsZero() && cpuLim.Cmp(cpuReq) >= 0 {
		ann[annotations.VCPUs] = strconv.FormatInt(cpuLim.Value(), 10)
	} else if cpuReq.Sign() == 1 {
		ann[annotations.VCPUs] = strconv.FormatInt(cpuReq.Value(), 10)
	}
	if !memReq.IsZero() && memLim.Cmp(memReq) >= 0 {
		ann[annotations.Memory] = strconv.FormatInt(roundUpMiB(memLim), 10)
	} else if memReq.Sign() == 1 {
		ann[annotations.Memory] = strconv.FormatInt(roundUpMiB(memReq), 10)
	}
	if gpuReq.Sign() == 1 {
		if gpuReq.MilliValue()%1000 != 0 {
			return PodRequest{}, fmt.Errorf("%s: %s totals %s; GPUs are whole numbers, fix the containers' requests", g.Name, GPUResource, gpuReq.String())
		}
		ann[annotations.GPUs] = gpuReq.String()
	}
	r.Annotations = ann

	// As CAA: absent numbers are 0; a malformed one is an error here
	// (CAA would log it and carry on with 0).
	num := func(key string) (int64, error) {
		v, ok := ann[key]
		if !ok || v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s: annotation %s=%q is not a whole number; fix the annotation or drop it and let the webhook set it from the requests", g.Name, key, v)
		}
		return n, nil
	}
	var err error
	if r.Spec.VCPUs, err = num(annotations.VCPUs); err != nil {
		return PodRequest{}, err
	}
	if r.Spec.Memory, err = num(annotations.Memory); err != nil {
		return PodRequest{}, err
	}
	if r.Spec.GPUs, err = num(annotations.GPUs); err != nil {
		return PodRequest{}, err
	}
	r.Spec.InstanceType = ann[annotations.MachineType]
	r.Spec.Image = ann[annotations.Image]
	return r, nil
}

// effectiveRequests applies the API server's defaulting the webhook sees:
// a resource with a limit and no request is requested at its limit.
func effectiveRequests(in corev1.PodSpec) corev1.PodSpec {
	spec := *in.DeepCopy()
	fill := func(cs []corev1.Container) {
		for i := range cs {
			res := &cs[i].Resources
			for name, q := range res.Limits {
				if _, ok := res.Requests[name]; !ok {
					if res.Requests == nil {
						res.Requests = corev1.ResourceList{}
					}
					res.Requests[name] = q.DeepCopy()
				}
			}
		}
	}
	fill(spec.Containers)
	fill(spec.InitContainers)
	return spec
}

// sum adds a resource over containers and init containers, as the webhook
// does (it sums init containers rather than taking their maximum).
func sum(spec corev1.PodSpec, name corev1.ResourceName, limits bool) resource.Quantity {
	total := resource.Quantity{Format: resource.DecimalSI}
	if name == corev1.ResourceMemory {
		total.Format = resource.BinarySI
	}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			list := c.Resources.Requests
			if limits {
				list = c.Resources.Limits
			}
			if q, ok := list[name]; ok {
				total.Add(q)
			}
		}
	}
	return total
}

// roundUpMiB is bytes rounded up to whole MiB.
func roundUpMiB(q resource.Quantity) int64 {
	const mib = 1 << 20
	b := q.Value()
	return (b + mib - 1) / mib
}
