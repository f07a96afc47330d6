package adaptor

import (
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"reflect"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// kataAnnotations is the full set kata's remote hypervisor sends for a pod
// with one GPU, 3 vCPUs and 12 GiB.
func kataAnnotations() map[string]string {
	return map[string]string{
		annotations.SandboxName:      "mistral-tp-0",
		annotations.SandboxNamespace: "llm",
		annotations.MachineType:      "",
		annotations.Image:            "",
		annotations.VCPUs:            "3",
		annotations.Memory:           "12288",
		annotations.InitData:         "",
		annotations.GPUs:             "1",
		annotations.GPUModel:         "",
	}
}

func TestAnnotationsMapToSpecAsCAA(t *testing.T) {
	cases := []struct {
		name      string
		edit      func(map[string]string)
		wantPod   string
		wantSpec  provider.InstanceTypeSpec
		wantModel string
	}{
		{
			name:     "GPU pod",
			wantPod:  "mistral-tp-0",
			wantSpec: provider.InstanceTypeSpec{VCPUs: 3, Memory: 12288, GPUs: 1},
		},
		{
			name: "machine type, image and GPU model verbatim",
			edit: func(a map[string]string) {
				a[annotations.MachineType] = "t4-2"
				a[annotations.Image] = "projects/p/global/images/podvm-t4-v2"
				a[annotations.GPUs] = "2"
				a[annotations.GPUModel] = "nvidia-tesla-t4"
			},
			wantPod:   "mistral-tp-0",
			wantSpec:  provider.InstanceTypeSpec{InstanceType: "t4-2", Image: "projects/p/global/images/podvm-t4-v2", VCPUs: 3, Memory: 12288, GPUs: 2},
			wantModel: "nvidia-tesla-t4",
		},
		{
			name:     `default_gpus "0" is a CPU-only pod`,
			edit:     func(a map[string]string) { a[annotations.GPUs] = "0" },
			wantPod:  "mistral-tp-0",
			wantSpec: provider.InstanceTypeSpec{VCPUs: 3, Memory: 12288},
		},
		{
			name: "absent or empty numbers are 0",
			edit: func(a map[string]string) {
				delete(a, annotations.VCPUs)
				a[annotations.Memory] = ""
				delete(a, annotations.GPUs)
			},
			wantPod: "mistral-tp-0",
		},
		{
			name:     "CRI-O sandbox name",
			edit:     func(a map[string]string) { a[annotations.SandboxName] = "k8s_mistral-tp-0_llm_8a1f_0" },
			wantPod:  "mistral-tp-0",
			wantSpec: provider.InstanceTypeSpec{VCPUs: 3, Memory: 12288, GPUs: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := kataAnnotations()
			if tc.edit != nil {
				tc.edit(a)
			}
			r, err := parseAnnotations(a)
			if err != nil {
				t.Fatalf("parseAnnotations: %v", err)
			}
			if r.name != tc.wantPod || r.namespace != "llm" || r.gpuModel != tc.wantModel {
				t.Errorf("pod %s/%s model %q, want llm/%s model %q", r.namespace, r.name, r.gpuModel, tc.wantPod, tc.wantModel)
			}
			if !reflect.DeepEqual(r.spec, tc.wantSpec) {
				t.Errorf("spec %+v, want %+v", r.spec, tc.wantSpec)
			}
		})
	}
}

func TestBadAnnotationsNameTheField(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]string)
		want []string
	}{
		{"no pod name", func(a map[string]string) { delete(a, annotations.SandboxName) }, []string{annotations.SandboxName}},
		{"no namespace", func(a map[string]string) { a[annotations.SandboxNamespace] = "" }, []string{annotations.SandboxNamespace}},
		{"GPU count not a number", func(a map[string]string) { a[annotations.GPUs] = "one" }, []string{annotations.GPUs + `="one"`}},
		{"negative memory", func(a map[string]string) { a[annotations.Memory] = "-1" }, []string{annotations.Memory + `="-1"`, "MiB"}},
		{"fractional vCPUs", func(a map[string]string) { a[annotations.VCPUs] = "1.5" }, []string{annotations.VCPUs + `="1.5"`}},
		{"overflow", func(a map[string]string) { a[annotations.Memory] = "99999999999999999999" }, []string{annotations.Memory}},
		{"every error at once", func(a map[string]string) {
			delete(a, annotations.SandboxNamespace)
			a[annotations.GPUs] = "x"
			a[annotations.VCPUs] = " 2"
		}, []string{annotations.SandboxNamespace, annotations.GPUs, annotations.VCPUs}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := kataAnnotations()
			tc.edit(a)
			_, err := parseAnnotations(a)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
