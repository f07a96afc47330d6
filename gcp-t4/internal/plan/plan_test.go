package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"io"
	"log/slog"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"google.golang.org/protobuf/encoding/protojson"
)

const examplePod = "../../../install/examples/gpu-pod/pod.yaml"

// clearEnv keeps the machine's GCP_* settings out of the tests.
func clearEnv(t *testing.T) {
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK",
		"GCP_PROVISIONING_MODEL", "GCP_SPOT_FALLBACK", "GCP_PROFILES", "GCP_PROFILES_FILE", "GCP_INSTANCE_TEMPLATE", "GCP_INSTANCE_TYPES",
		"GCP_LABELS", "GCP_ENDPOINT", "GCP_CREDENTIALS", "USE_PUBLIC_IP", "ROOT_VOLUME_SIZE", "GCP_NIC_TYPE", "GCP_PROFILE_IMAGES", "GCP_DISK_TYPE",
		"GCP_ALLOWED_IMAGES", "GCP_MAX_GPUS_PER_POD", "GCP_MAX_VCPUS_PER_POD", "GCP_MAX_MEMORY_PER_POD", "GCP_CACHE_IMAGE", "GCP_CACHE_VERITY"} {
		t.Setenv(v, "")
	}
}

func runPlan(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	clearEnv(t)
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, &out, &errOut, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return out.String(), errOut.String(), code
}

func TestPlanExamplePodTable(t *testing.T) {
	out, errOut, code := runPlan(t, "-f", examplePod)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Pod/cuda-vectoradd", "t4-1", "n1-standard-4", "1 x nvidia-tesla-t4", "us-central1-a", "STANDARD", "none",
		"estimated total: $0.54/h",
		"not set, so planned with stand-ins: GCP_PROJECT_ID=example-project",
		"as of 2026-08-03",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanExamplePodInsertRequest(t *testing.T) {
	out, errOut, code := runPlan(t, "-f", examplePod, "-o", "request", "-gcp-project-id", "my-proj", "-zone", "us-central1-b",
		"-zones", "us-central1-a,us-central1-f", "-subnetwork", "podvms", "-image-name", "projects/my-proj/global/images/podvm-t4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var req computepb.InsertInstanceRequest
	if err := protojson.Unmarshal([]byte(out), &req); err != nil {
		t.Fatalf("output is not one InsertInstanceRequest: %v\n%s", err, out)
	}
	inst := req.GetInstanceResource()
	if req.GetProject() != "my-proj" || req.GetZone() != "us-central1-b" || req.GetRequestId() == "" {
		t.Errorf("request = project %s zone %s requestId %q", req.GetProject(), req.GetZone(), req.GetRequestId())
	}
	if inst.GetMachineType() != "zones/us-central1-b/machineTypes/n1-standard-4" ||
		len(inst.GetGuestAccelerators()) != 1 || inst.GetGuestAccelerators()[0].GetAcceleratorType() != "zones/us-central1-b/acceleratorTypes/nvidia-tesla-t4" {
		t.Errorf("shape = %s %v", inst.GetMachineType(), inst.GetGuestAccelerators())
	}
	nic := inst.GetNetworkInterfaces()
	if len(nic) != 1 || len(nic[0].GetAccessConfigs()) != 0 || nic[0].GetSubnetwork() != "projects/my-proj/regions/us-central1/subnetworks/podvms" {
		t.Errorf("nic = %v (want no accessConfigs)", nic)
	}
	if inst.GetScheduling().GetOnHostMaintenance() != "TERMINATE" || inst.GetLabels()["caa-pod"] != "cuda-vectoradd" {
		t.Errorf("scheduling %v labels %v", inst.GetScheduling(), inst.GetLabels())
	}
}

func TestPlanDeploymentJSON(t *testing.T) {
	out, errOut, code := runPlan(t, "-f", "testdata/deployment.yaml", "-o", "json", "-zones", "us-central1-b")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		PodVMs []struct {
			Group       string            `json:"group"`
			Replicas    int64             `json:"replicas"`
			VCPUs       int64             `json:"vcpus"`
			MemoryMiB   int64             `json:"memoryMiB"`
			GPUs        int64             `json:"gpus"`
			Profile     string            `json:"profile"`
			Zones       []string          `json:"zones"`
			Annotations map[string]string `json:"annotations"`
			Total       float64           `json:"costPerHourAllReplicas"`
			Insert      json.RawMessage   `json:"insertRequest"`
		} `json:"podVMs"`
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(doc.PodVMs) != 1 {
		t.Fatalf("podVMs = %d, want 1 (the Service makes no pods)", len(doc.PodVMs))
	}
	e := doc.PodVMs[0]
	// Init container summed with the server, as the webhook does: 6.5
	// CPUs round up to 7, 20 GiB + 512 MiB.
	if e.VCPUs != 7 || e.MemoryMiB != 20992 || e.GPUs != 2 || e.Profile != "t4-2" || e.Replicas != 2 {
		t.Errorf("entry = %+v", e)
	}
	if strings.Join(e.Zones, ",") != "us-central1-a,us-central1-b" {
		t.Errorf("zones = %v", e.Zones)
	}
	if e.Annotations[annotations.GPUs] != "2" || e.Annotations[annotations.VCPUs] != "7" || e.Annotations[annotations.Memory] != "20992" {
		t.Errorf("annotations = %v", e.Annotations)
	}
	if e.Total < 2.15 || e.Total > 2.17 {
		t.Errorf("total = %v, want 2 x (0.38 + 2 x 0.35)", e.Total)
	}
	var req computepb.InsertInstanceRequest
	if err := protojson.Unmarshal(e.Insert, &req); err != nil || req.GetInstanceResource().GetGuestAccelerators()[0].GetAcceleratorCount() != 2 {
		t.Errorf("insertRequest: %v %v", err, req.GetInstanceResource().GetGuestAccelerators())
	}
	if !strings.Contains(strings.Join(doc.Notes, "\n"), "skipped Service llm") {
		t.Errorf("notes = %v", doc.Notes)
	}
}

func TestPlanRayServiceGroups(t *testing.T) {
	// The worker names n1-highmem-8, which no profile uses: the admin
	// lists it (and cpu-2, which the head gets by fit).
	out, errOut, code := runPlan(t, "-f", "testdata/rayservice.yaml", "-provisioning-model", "SPOT", "-machine-types", "n1-highmem-8,cpu-2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	vms := podVMs(t, out)
	head, worker := vms["RayService/llm-serve head"], vms["RayService/llm-serve worker/gpu"]
	if head == nil || worker == nil {
		t.Fatalf("no head or worker/gpu row:\n%s", out)
	}
	if c := head.Cells; c["REPLICAS"] != "1" || c["VCPU"] != "2" || c["MEM(MiB)"] != "4096" || head.Detail["PROFILE"] != "cpu-2" {
		t.Errorf("head = %+v", head)
	}
	// machine_type annotation with 1 GPU: the T4 is attached to the named
	// N1 type; requests 3 CPU, limit 4 -> 4; limits-only GPU counts.
	if c := worker.Cells; c["REPLICAS"] != "3" || c["VCPU"] != "4" || c["MEM(MiB)"] != "24576" || c["GPU"] != "1" || worker.Detail["PROFILE"] != "custom" || c["MACHINE TYPE"] != "n1-highmem-8" {
		t.Errorf("worker = %+v", worker)
	}
	// Named: priced under Spot (0.166888 + 0.11), no alternative shown.
	if worker.Detail["MODEL"] != "SPOT" || worker.Cells["$/H EACH"] != "0.28" || worker.Cells["$/H ALL"] != "0.83" || worker.Detail["NEXT-CHEAPEST ($/H EACH)"] != "- (named)" {
		t.Errorf("worker should be SPOT at $0.28/h each, $0.83/h for 3, named: %+v", worker)
	}
}

func TestPlanFlagsAndErrors(t *testing.T) {
	out, errOut, code := runPlan(t, "-gpus", "4", "-vcpus", "8", "-memory", "32Gi")
	if code != 0 || !strings.Contains(out, "t4-4") || !strings.Contains(out, "n1-standard-16") || !strings.Contains(out, "4 x nvidia-tesla-t4") {
		t.Errorf("flags plan: exit %d\n%s%s", code, out, errOut)
	}
	// An explicit profile is only used when named; its bundled H100 is in
	// the machine type's price, under Spot: a3-highgpu-1g is not sold on
	// demand. The plan states what GCE requires of it.
	// Listed by the admin: the per-pod limits derived from the T4 shapes
	// (16 vCPUs) would refuse its 26 (allow_test.go).
	out, errOut, code = runPlan(t, "-gpus", "1", "-machine-type", "h100-cc", "-machine-types", "h100-cc")
	if code != 0 {
		t.Fatalf("h100-cc plan: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"h100-cc", "a3-highgpu-1g", "SPOT", "6.33",
		"requires: Pod/pod pod (profile h100-cc): image with guest OS features UEFI_COMPATIBLE, TDX_CAPABLE, GVNIC",
		"the T4 podVM image is not a TDX image", "NVMe interface", "gVNIC network interface",
		"sold only as Spot, Flex-start or from a reservation", "GCP_PROFILE_IMAGES=h100-cc=IMAGE"} {
		if !strings.Contains(flat(out), want) {
			t.Errorf("h100-cc plan lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-gpus", "8"}, "GCP_MAX_GPUS_PER_POD"},
		{[]string{"-gpus", "8", "-max-gpus-per-pod", "8"}, "no GPU shape fits 8 GPU"},
		{[]string{"-vcpus", "lots"}, "-vcpus"},
		{[]string{"-f", examplePod, "-gpus", "1"}, "exclusive"},
		{[]string{"-o", "yaml"}, "-o"},
		{[]string{"-f", "testdata/missing.yaml"}, "no such file"},
		{[]string{"-gpus", "1", "-instance-template", "global/instanceTemplates/t"}, "GCP_INSTANCE_TEMPLATE"},
		{[]string{"-gpus", "1", "-use-public-ip"}, "USE_PUBLIC_IP"},
		{[]string{"bogus", "-f", examplePod}, `unknown command "bogus"`},
	} {
		_, errOut, code := runPlan(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// The cases: a 1-GPU/40 GiB pod gets one T4 (not t4-4's four),
// with the next-cheapest shape beside it; a CPU-only 8 vCPU/32 GiB pod
// is placed.
func TestPlanCheapestShapes(t *testing.T) {
	row := func(out string) *podVM { return podVMs(t, out)["Pod/pod pod"] }
	out, errOut, code := runPlan(t, "-gpus", "1", "-memory", "40Gi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if p := row(out); p == nil || p.Detail["PROFILE"] != "auto" || p.Cells["MACHINE TYPE"] != "custom-8-40960" || p.Cells["ACCELERATOR"] != "1 x nvidia-tesla-t4" ||
		p.Cells["$/H EACH"] != "0.79" || p.Detail["NEXT-CHEAPEST ($/H EACH)"] != "n1-highmem-8 + 1 x nvidia-tesla-t4 (0.82)" {
		t.Errorf("1 GPU / 40 GiB = %+v\n%s", p, out)
	}
	out, errOut, code = runPlan(t, "-vcpus", "8", "-memory", "32Gi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// e2-highmem-8 (64 GB, $0.36/h) is over the default memory cap,
	// t4-4's 60 GB: the next-cheapest within it is n1-highmem-8.
	if p := row(out); p == nil || p.Cells["MACHINE TYPE"] != "e2-standard-8" || p.Cells["ACCELERATOR"] != "-" || p.Cells["$/H EACH"] != "0.27" ||
		p.Detail["NEXT-CHEAPEST ($/H EACH)"] != "n1-highmem-8 (0.47)" {
		t.Errorf("CPU-only 8 vCPU / 32 GiB = %+v\n%s", p, out)
	}
	// -o json carries the offerings a create walks and the alternative.
	out, _, code = runPlan(t, "-gpus", "1", "-memory", "40Gi", "-o", "json", "-provisioning-model", "SPOT", "-spot-fallback", "-zones", "us-central1-b")
	var doc struct {
		PodVMs []struct {
			Alternative struct {
				MachineType string `json:"machineType"`
			} `json:"alternative"`
			Offerings []struct {
				MachineType string `json:"machineType"`
				Model       string `json:"provisioningModel"`
				Zone        string `json:"zone"`
				GPUs        int64  `json:"gpus"`
			} `json:"offerings"`
		} `json:"podVMs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.PodVMs) != 1 {
		t.Fatalf("json: exit %d %v\n%s", code, err, out)
	}
	e := doc.PodVMs[0]
	var walk []string
	for _, o := range e.Offerings {
		walk = append(walk, fmt.Sprintf("%s/%s/%s/%d", o.Model, o.MachineType, o.Zone, o.GPUs))
	}
	if e.Alternative.MachineType != "n1-highmem-8" || strings.Join(walk, " ") != "SPOT/custom-8-40960/us-central1-a/1 SPOT/custom-8-40960/us-central1-b/1 STANDARD/custom-8-40960/us-central1-a/1 STANDARD/custom-8-40960/us-central1-b/1" {
		t.Errorf("alternative %s, offerings %v", e.Alternative.MachineType, walk)
	}
}

func TestRequestFollowsTheWebhook(t *testing.T) {
	q := resource.MustParse
	kata := DefaultRuntimeClass
	pod := func(cs ...corev1.ResourceRequirements) Group {
		g := Group{Name: "pod", Replicas: 1}
		g.Spec.RuntimeClassName = &kata
		for _, r := range cs {
			g.Spec.Containers = append(g.Spec.Containers, corev1.Container{Name: "c", Resources: r})
		}
		return g
	}
	cases := []struct {
		name             string
		g                Group
		vcpus, mem, gpus int64
	}{
		{"limit wins when larger", pod(corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": q("1"), "memory": q("1Gi")}, Limits: corev1.ResourceList{"cpu": q("3"), "memory": q("2Gi")}}), 3, 2048, 0},
		{"request when no limit", pod(corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": q("1500m"), "memory": q("1000M")}}), 2, 954, 0},
		{"limits default requests", pod(corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": q("2"), GPUResource: q("1")}}), 2, 0, 1},
		{"containers summed", pod(
			corev1.ResourceRequirements{Requests: corev1.ResourceList{GPUResource: q("1")}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{GPUResource: q("1")}}), 0, 0, 2},
		{"nothing requested", pod(corev1.ResourceRequirements{}), 0, 0, 0},
	}
	for _, c := range cases {
		r, err := Request(c.g, kata)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.Spec.VCPUs != c.vcpus || r.Spec.Memory != c.mem || r.Spec.GPUs != c.gpus || len(r.Warnings) != 0 {
			t.Errorf("%s: got %d vCPU %d MiB %d GPU (warnings %v), want %d %d %d", c.name, r.Spec.VCPUs, r.Spec.Memory, r.Spec.GPUs, r.Warnings, c.vcpus, c.mem, c.gpus)
		}
		if c.gpus == 0 {
			if _, ok := r.Annotations[annotations.GPUs]; ok {
				t.Errorf("%s: default_gpus set without GPUs", c.name)
			}
		}
	}
	g := pod(corev1.ResourceRequirements{})
	g.Spec.RuntimeClassName = nil
	if r, _ := Request(g, kata); len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "not kata-remote") {
		t.Errorf("runc pod warnings = %v", r.Warnings)
	}
	g = pod(corev1.ResourceRequirements{})
	g.Annotations = map[string]string{annotations.VCPUs: "two"}
	if _, err := Request(g, kata); err == nil || !strings.Contains(err.Error(), annotations.VCPUs) {
		t.Errorf("bad annotation: %v", err)
	}
}

func TestParseManifestsErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"kind: ConfigMap\nmetadata: {name: x}\n":                                                                      "no Pod, Deployment",
		"kind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n":                                                    "at least one container",
		"kind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - name: a\n    resources: {requests: {cpu: lots}}\n": "spec",
		"kind: RayService\nmetadata: {name: x}\nspec: {}\n":                                                           "spec.rayClusterConfig",
		"kind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1}\n":                                                "spec.template",
	} {
		_, _, err := ParseManifests(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", doc, err, want)
		}
	}
}
