package gc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/gpuinit"
	"github.com/caa-gcp-t4/gcp-t4/internal/startupevents"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/consoleline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gpuReady is the readiness line gpu-init prints on a podVM with one T4,
// made by gpu-init's own code so that the provider's reader is checked
// against what the podVM really writes.
func gpuReady(t *testing.T) string {
	t.Helper()
	line := gpuinit.Report{State: gpuinit.StateReady, GPUs: 1, PCI: []string{"0000:00:04.0"}, Driver: "550.163.01", CDI: "/var/run/cdi/nvidia.json", ElapsedMS: 2300}.Line()
	if !strings.HasPrefix(line, consoleline.GPUPrefix) {
		t.Fatalf("gpu-init's line %q does not start with the provider's prefix %q", line, consoleline.GPUPrefix)
	}
	return line
}

// startupEvents are a pod's start-up Events as a reader gets them through
// the API (by the phase label and the pod), in the order they happened.
func (k *kube) startupEvents(t *testing.T, ns, pod string) []corev1.Event {
	t.Helper()
	list, err := k.cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: podevent.PhaseLabel,
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := list.Items
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Annotations[podevent.AtAnnotation] < out[j].Annotations[podevent.AtAnnotation]
	})
	return out
}

// waitStartup waits for a reason among a pod's start-up Events; the
// deadline guards against a hang and is no timing assertion.
func (k *kube) waitStartup(t *testing.T, ns, pod, reason string) []corev1.Event {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		evs := k.startupEvents(t, ns, pod)
		for _, e := range evs {
			if e.Reason == reason {
				return evs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: no %s Event; have %v", ns, pod, reason, eventReasons(evs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func eventReasons(evs []corev1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

// sandboxReady sets what the kubelet sets once CAA's StartVM returned.
func (k *kube) sandboxReady(t *testing.T, ns, name string) {
	t.Helper()
	p, err := k.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	if _, err := k.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// secretCloudConfig is CAA's cloud-config with what it really carries
// beside the pod's names: the agent's TLS key.
func secretCloudConfig(ns, pod string) cloudinit.CloudConfigGenerator {
	return &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{
		{Path: "/run/peerpod/apf.json", Content: `{"pod-namespace":"` + ns + `","pod-name":"` + pod + `"}`},
		{Path: "/run/peerpod/tls/tls.key", Content: "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKsecretKEYmaterial0123456789ABCDEFabcdefghij\n-----END EC PRIVATE KEY-----\n"},
	}}
}

// TestScenarioStartupVisible: a GPU pod's podVM start-up, read as a user
// reads it, through the real API server. CAA's provider runs with the
// adaptor's own ServiceAccount and the RBAC install/base grants; the
// first zone is out of T4s. The pod's Events tell every phase in order,
// with the chosen zone's price; a second pod's podVM reports a boot
// failure on its console and that line reaches its pod before CAA deletes
// the VM. No Event carries the cloud-config's key.
func TestScenarioStartupVisible(t *testing.T) {
	k := startKube(t)
	fake := gcefake.New()
	defer fake.Close()
	k.applyRBAC(t, "install/base/rbac.yaml")
	ready := gpuReady(t)
	bootFailed := `CAA-GCP-T4-BOOT-FAILED {"stage":"initrd","target":"emergency","failed":["sysroot.mount"]}`
	fake.SetBootConsole(func(_ string, inst *computepb.Instance) string {
		if strings.Contains(inst.GetName(), "broken") {
			return "[    3.2] device-mapper: verity: 254:0: data block 7 is corrupted\n" + bootFailed + "\n"
		}
		return "[    0.0] Linux version 6.1.0\n" + ready + "\n"
	})
	fake.SetStockout("us-central1-a", true)
	caa, err := startCAA(t, fake, k.uid, k.podAPI(t, "cloud-api-adaptor"), "-zones", "us-central1-b")
	if err != nil {
		t.Fatal(err)
	}
	spec := provider.InstanceTypeSpec{GPUs: 1, VCPUs: 3, Memory: 12288}

	k.pod(t, "ml", "llm-0")
	inst, err := caa.CreateInstance(t.Context(), "llm-0", sidA, secretCloudConfig("ml", "llm-0"), spec)
	if err != nil {
		t.Fatal(err)
	}
	k.waitStartup(t, "ml", "llm-0", podevent.ReasonBooted)
	k.sandboxReady(t, "ml", "llm-0")
	evs := k.waitStartup(t, "ml", "llm-0", podevent.ReasonReachable)
	want := []string{podevent.ReasonRequested, podevent.ReasonStockout, podevent.ReasonCreated, podevent.ReasonBooted, podevent.ReasonReachable}
	if got := eventReasons(evs); !slices.Equal(got, want) {
		t.Fatalf("llm-0's Events %v, want %v", got, want)
	}
	pod, err := k.cs.CoreV1().Pods("ml").Get(t.Context(), "llm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		t.Logf("%-20s %s", e.Reason, e.Message)
		if e.InvolvedObject.UID != pod.UID || e.Labels[podevent.PodVMLabel] != inst.Name || e.Source.Component != podevent.Component {
			t.Errorf("%s: involvedObject %+v labels %v source %+v", e.Reason, e.InvolvedObject, e.Labels, e.Source)
		}
	}
	stock, created, booted := evs[1], evs[2], evs[3]
	if stock.Type != corev1.EventTypeWarning || !strings.Contains(stock.Message, "us-central1-a has no capacity") || !strings.Contains(stock.Message, "trying us-central1-b") {
		t.Errorf("stockout: %q", stock.Message)
	}
	price := created.Annotations[podevent.PriceAnnotation]
	if created.Annotations[podevent.ZoneAnnotation] != "us-central1-b" || price == "" || !strings.Contains(created.Message, "$") || !strings.Contains(created.Message, inst.IPs[0].String()) {
		t.Errorf("created: %v %q", created.Annotations, created.Message)
	}
	if booted.Annotations[podevent.DriverAnnotation] != "550.163.01" || !strings.Contains(booted.Message, "1 GPU(s)") {
		t.Errorf("booted: %v %q", booted.Annotations, booted.Message)
	}

	// The doc's commands, as a pod author runs them.
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "startup-visibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed to run docs/startup-visibility.md's commands as a user would: %v", err)
	}
	cmds := regexp.MustCompile(`(?m)^kubectl (?:describe pod|get events) .*$`).FindAllString(string(doc), -1)
	if len(cmds) != 2 {
		t.Fatalf("docs/startup-visibility.md: want its two kubectl commands, found %q", cmds)
	}
	for _, line := range cmds {
		line = strings.NewReplacer("POD", "llm-0", "NAMESPACE", "ml").Replace(line)
		cmd := exec.CommandContext(t.Context(), kubectl, strings.Fields(line)[1:]...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+k.cp.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		for _, r := range want {
			if !strings.Contains(string(out), r) {
				t.Errorf("%s does not show %s:\n%s", line, r, out)
			}
		}
	}

	// The broken podVM: its console's failure line reaches the pod, and
	// CAA's delete (StartVM's clean-up) adds no second failure.
	k.pod(t, "ml", "broken-0")
	bad, err := caa.CreateInstance(t.Context(), "broken-0", sidB, secretCloudConfig("ml", "broken-0"), spec)
	if err != nil {
		t.Fatal(err)
	}
	k.waitStartup(t, "ml", "broken-0", podevent.ReasonFailed)
	if err := caa.DeleteInstance(t.Context(), bad.ID); err != nil {
		t.Fatal(err)
	}
	if err := caa.Teardown(); err != nil {
		t.Fatal(err)
	}
	evs = k.startupEvents(t, "ml", "broken-0")
	failed := evs[len(evs)-1]
	t.Logf("%-20s %s", failed.Reason, failed.Message)
	if n := strings.Count(strings.Join(eventReasons(evs), " "), podevent.ReasonFailed); n != 1 || failed.Reason != podevent.ReasonFailed ||
		failed.Annotations[podevent.FailureAnnotation] != podevent.FailureBoot || !strings.Contains(failed.Message, bootFailed) || !strings.Contains(failed.Message, "data block 7 is corrupted") {
		t.Errorf("broken-0's Events %v; last %v %q", eventReasons(evs), failed.Annotations, failed.Message)
	}

	// The reaper's start-up metrics from the same Events: one stockout in
	// us-central1-a, one boot failure, and every span of llm-0's start.
	m := NewMetrics()
	(&Startup{Client: k.cs, Metrics: m, Log: slog.New(slog.DiscardHandler), Key: &startupevents.KeySource{Client: k.cs, Namespace: caaNamespace}}).Pass(t.Context())
	if got := testutil.ToFloat64(m.stockouts.WithLabelValues("us-central1-a", "nvidia-tesla-t4")); got != 1 {
		t.Errorf("stockouts in us-central1-a = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues(podevent.FailureBoot)); got != 1 {
		t.Errorf("boot failures = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.startup); n != 4 {
		t.Errorf("start-up histograms = %d series, want create, boot, agent and total", n)
	}

	// Nothing of the cloud-config reaches an Event.
	all, err := k.cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{LabelSelector: podevent.PhaseLabel})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all.Items {
		if s := fmt.Sprint(e.Message, e.Annotations); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "KEYmaterial") || strings.Contains(s, "apf.json") {
			t.Errorf("%s carries the cloud-config: %s", e.Reason, s)
		}
	}
}
