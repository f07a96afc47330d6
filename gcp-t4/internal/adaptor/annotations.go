package adaptor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
)

// The annotations the kata shim puts in every CreateVMRequest are named
// once in the drop-in's annotations package. The shim always sends all of
// them, empty when unset; default_gpus is "0" for a pod without GPUs.

// podRequest is what a CreateVMRequest asks for, in provider terms.
type podRequest struct {
	name      string
	namespace string
	spec      provider.InstanceTypeSpec
	// gpuModel is recorded for logs only: CAA passes no GPU model to the
	// provider, which picks the accelerator from its profiles.
	gpuModel string
}

// parseAnnotations maps CreateVM annotations to the provider's spec the way
// CAA does (machine_type → InstanceType, image → Image, default_vcpus,
// default_memory in MiB and default_gpus → VCPUs, Memory, GPUs; absent or
// empty numbers are 0). Where CAA logs a malformed number and carries on
// with 0, which would silently give a GPU pod a CPU-only VM, this returns
// an error naming every bad annotation, so no VM is made from it.
func parseAnnotations(a map[string]string) (podRequest, error) {
	var errs []error
	r := podRequest{
		name:      podName(a[annotations.SandboxName]),
		namespace: a[annotations.SandboxNamespace],
		gpuModel:  a[annotations.GPUModel],
	}
	if r.name == "" {
		errs = append(errs, fmt.Errorf("annotation %s is missing or empty: the kata shim sends the pod name in it; check the runtime class uses the remote hypervisor and a CRI that sets it", annotations.SandboxName))
	}
	if r.namespace == "" {
		errs = append(errs, fmt.Errorf("annotation %s is missing or empty: the kata shim sends the pod namespace in it; check the runtime class uses the remote hypervisor and a CRI that sets it", annotations.SandboxNamespace))
	}
	count := func(key, unit string) int64 {
		v, ok := a[key]
		if !ok || v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want a whole number of %s, 0 or more (the peer-pods webhook sets it from the pod's resource requests); fix the pod's requests or the annotation", key, v, unit))
			return 0
		}
		return n
	}
	r.spec = provider.InstanceTypeSpec{
		InstanceType: a[annotations.MachineType],
		Image:        a[annotations.Image],
		VCPUs:        count(annotations.VCPUs, "vCPUs"),
		Memory:       count(annotations.Memory, "MiB"),
		GPUs:         count(annotations.GPUs, "GPUs"),
	}
	if err := errors.Join(errs...); err != nil {
		return podRequest{}, err
	}
	return r, nil
}

// podName is the pod's name from the CRI sandbox name. containerd sends the
// bare name; CRI-O sends k8s_<pod>_<namespace>_<uid>_<attempt>, as CAA
// also handles.
func podName(sandboxName string) string {
	if parts := strings.Split(sandboxName, "_"); len(parts) > 1 && parts[0] == "k8s" {
		return parts[1]
	}
	return sandboxName
}
