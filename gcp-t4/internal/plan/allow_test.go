package plan

import (
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tenantPod writes a one-container kata-remote pod with annotations and
// resources, as a pod author would.
func tenantPod(t *testing.T, annotations map[string]string, resources string) string {
	t.Helper()
	var ann strings.Builder
	for k, v := range annotations {
		ann.WriteString("    " + k + ": \"" + v + "\"\n")
	}
	doc := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tenant\n  annotations:\n" + ann.String() +
		"spec:\n  runtimeClassName: kata-remote\n  containers:\n  - name: c\n    image: busybox\n    resources:\n" + resources
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const smallCPU = "      requests: {cpu: 100m, memory: 128Mi}\n"

// The four plans, each once accepted at up to $7.36/h: refused,
// naming the setting the admin would change.
func TestPlanRefusesWhatTheAdminDidNotAllow(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		res  string
		args []string
		want []string
	}{
		{"foreign image", map[string]string{annotations.Image: "projects/attacker-proj/global/images/evil"}, smallCPU, nil,
			[]string{"GCP_ALLOWED_IMAGES", "projects/attacker-proj/global/images/evil"}},
		{"CPU-only pod naming t4-4", map[string]string{annotations.MachineType: "t4-4"}, smallCPU, nil,
			[]string{"the pod requests 0", "GCP_INSTANCE_TYPES"}},
		{"n1-standard-96 with 4 GPUs", map[string]string{annotations.MachineType: "n1-standard-96", annotations.GPUs: "4"}, smallCPU, nil,
			[]string{"GCP_INSTANCE_TYPES", "n1-standard-96"}},
		{"custom-96-638976", map[string]string{annotations.MachineType: "custom-96-638976", annotations.GPUs: "4"}, smallCPU, nil,
			[]string{"GCP_INSTANCE_TYPES"}},
		{"default_gpus 4 under t4-1,t4-2", map[string]string{annotations.GPUs: "4"}, smallCPU, []string{"-machine-types", "t4-1,t4-2"},
			[]string{"GCP_MAX_GPUS_PER_POD", "t4-2"}},
		{"8 GPUs requested", nil, "      limits: {nvidia.com/gpu: 8}\n", nil, []string{"GCP_MAX_GPUS_PER_POD"}},
		{"96 vCPUs by fit", nil, "      limits: {nvidia.com/gpu: 4, cpu: 96}\n", nil, []string{"GCP_MAX_VCPUS_PER_POD"}},
		{"foreign image in template mode", map[string]string{annotations.Image: "projects/attacker-proj/global/images/evil"}, "      limits: {nvidia.com/gpu: 1}\n",
			[]string{"-instance-template", "t4-private"}, []string{"GCP_ALLOWED_IMAGES", "projects/attacker-proj/global/images/evil"}},
		{"h100-cc under the default limits", map[string]string{annotations.MachineType: "h100-cc"}, "      limits: {nvidia.com/gpu: 1}\n",
			[]string{"-profile-images", "h100-cc=projects/img/global/images/podvm-tdx"}, []string{"GCP_MAX_VCPUS_PER_POD", "GCP_INSTANCE_TYPES", "26 vCPU(s)"}},
		{"a listed N1 type is one T4", map[string]string{annotations.MachineType: "n1-standard-4", annotations.GPUs: "4"}, smallCPU,
			[]string{"-machine-types", "t4-1,n1-standard-4"}, []string{"GCP_MAX_GPUS_PER_POD", "at most 1"}},
		{"GPU cap binds a named profile", map[string]string{annotations.MachineType: "t4-4"}, "      limits: {nvidia.com/gpu: 4}\n",
			[]string{"-max-gpus-per-pod", "2"}, []string{"GCP_MAX_GPUS_PER_POD", "at most 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-f", tenantPod(t, tc.ann, tc.res)}, tc.args...)
			out, errOut, code := runPlan(t, args...)
			if code == 0 {
				t.Fatalf("planned:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q: %s", w, errOut)
				}
			}
		})
	}
}

// What the admin allows still plans: the configured image named by the
// pod, a profile's machine type with the declared GPU, a listed shape.
func TestPlanAllowsWhatTheAdminAllowed(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		res  string
		args []string
		want string
	}{
		{"configured image", map[string]string{annotations.Image: "podvm-t4"}, "      limits: {nvidia.com/gpu: 1}\n", nil, "t4-1"},
		{"allowed image", map[string]string{annotations.Image: "projects/other/global/images/x"}, "      limits: {nvidia.com/gpu: 1}\n",
			[]string{"-allowed-images", "projects/other/global/images/x"}, "t4-1"},
		{"profile machine type", map[string]string{annotations.MachineType: "n1-standard-8"}, "      limits: {nvidia.com/gpu: 1}\n", nil, "n1-standard-8"},
		{"CPU-only pod, GPU shape listed", map[string]string{annotations.MachineType: "t4-1"}, smallCPU, []string{"-machine-types", "t4-1,cpu-2"}, "1 x nvidia-tesla-t4"},
		{"CPU-only pod by fit", nil, smallCPU, nil, "cpu-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-f", tenantPod(t, tc.ann, tc.res)}, tc.args...)
			out, errOut, code := runPlan(t, args...)
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %q in:\n%s%s", code, tc.want, out, errOut)
			}
		})
	}
}

// The refusals docs/provider.md shows ("Example refusals") are what plan
// prints, word for word, for the cases they describe.
func TestProviderDocRefusalsAreWhatPlanPrints(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "provider.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "Example refusals:\n\n```\n")
	if !ok {
		t.Fatal("docs/provider.md has no Example refusals block")
	}
	block, _, _ = strings.Cut(block, "```")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	cases := []struct {
		ann  map[string]string
		res  string
		args []string
	}{
		{map[string]string{annotations.Image: "projects/attacker-proj/global/images/evil"}, smallCPU, nil},
		{map[string]string{annotations.GPUs: "4"}, smallCPU, []string{"-machine-types", "t4-1,t4-2"}},
		{map[string]string{annotations.MachineType: "h100-cc"}, "      limits: {nvidia.com/gpu: 1}\n", []string{"-profile-images", "h100-cc=projects/img/global/images/podvm-tdx"}},
	}
	if len(lines) != len(cases) {
		t.Fatalf("the doc shows %d refusals, the test runs %d cases", len(lines), len(cases))
	}
	for i, c := range cases {
		_, errOut, code := runPlan(t, append([]string{"-f", tenantPod(t, c.ann, c.res)}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, lines[i]) {
			t.Errorf("case %d: exit %d, stderr\n%s\nlacks the doc's line\n%s", i, code, errOut, lines[i])
		}
	}
}
