package adaptor

import (
	"reflect"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// kataAnnotations is the full set kata's remote hypervisor sends for a pod
// with one GPU, 3 vCPUs and 12 GiB.
func kataAnnotations() map[string]string {
	return map[string]string{
		AnnotationSandboxName:      "mistral-tp-0",
		AnnotationSandboxNamespace: "llm",
		AnnotationMachineType:      "",
		AnnotationImage:            "",
		AnnotationVCPUs:            "3",
		AnnotationMemory:           "12288",
		AnnotationInitData:         "",
		AnnotationGPUs:             "1",
		AnnotationGPUModel:         "",
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
				a[AnnotationMachineType] = "t4-2"
				a[AnnotationImage] = "projects/p/global/images/podvm-t4-v2"
				a[AnnotationGPUs] = "2"
				a[AnnotationGPUModel] = "nvidia-tesla-t4"
			},
			wantPod:   "mistral-tp-0",
			wantSpec:  provider.InstanceTypeSpec{InstanceType: "t4-2", Image: "projects/p/global/images/podvm-t4-v2", VCPUs: 3, Memory: 12288, GPUs: 2},
			wantModel: "nvidia-tesla-t4",
		},
		{
			name:     `default_gpus "0" is a CPU-only pod`,
			edit:     func(a map[string]string) { a[AnnotationGPUs] = "0" },
			wantPod:  "mistral-tp-0",
			wantSpec: provider.InstanceTypeSpec{VCPUs: 3, Memory: 12288},
		},
		{
			name: "absent or empty numbers are 0",
			edit: func(a map[string]string) {
				delete(a, AnnotationVCPUs)
				a[AnnotationMemory] = ""
				delete(a, AnnotationGPUs)
			},
			wantPod: "mistral-tp-0",
		},
		{
			name:     "CRI-O sandbox name",
			edit:     func(a map[string]string) { a[AnnotationSandboxName] = "k8s_mistral-tp-0_llm_8a1f_0" },
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
		{"no pod name", func(a map[string]string) { delete(a, AnnotationSandboxName) }, []string{AnnotationSandboxName}},
		{"no namespace", func(a map[string]string) { a[AnnotationSandboxNamespace] = "" }, []string{AnnotationSandboxNamespace}},
		{"GPU count not a number", func(a map[string]string) { a[AnnotationGPUs] = "one" }, []string{AnnotationGPUs + `="one"`}},
		{"negative memory", func(a map[string]string) { a[AnnotationMemory] = "-1" }, []string{AnnotationMemory + `="-1"`, "MiB"}},
		{"fractional vCPUs", func(a map[string]string) { a[AnnotationVCPUs] = "1.5" }, []string{AnnotationVCPUs + `="1.5"`}},
		{"overflow", func(a map[string]string) { a[AnnotationMemory] = "99999999999999999999" }, []string{AnnotationMemory}},
		{"every error at once", func(a map[string]string) {
			delete(a, AnnotationSandboxNamespace)
			a[AnnotationGPUs] = "x"
			a[AnnotationVCPUs] = " 2"
		}, []string{AnnotationSandboxNamespace, AnnotationGPUs, AnnotationVCPUs}},
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
