package status

import (
	"flag"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/gpuinit"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// TestStatusOfTheProvidersOwnEvents: `gcp-t4 status` over the Events the
// provider itself records (not Events made to the schema by a test), on
// a real API server with the emulator: a GPU pod whose first zone was out
// of T4s and whose podVM booted and was reached, and a pod whose podVM's
// console said its boot failed.
func TestStatusOfTheProvidersOwnEvents(t *testing.T) {
	clearGCPEnv(t)
	c := startCluster(t)
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	c.installCAA(t, fake)
	// The emulator's address: what status reads of GCE (-gce) goes there.
	t.Setenv("GCP_ENDPOINT", fake.URL())
	fake.SetStockout("us-central1-a", true)
	fake.SetBootConsole(func(_ string, inst *computepb.Instance) string {
		if strings.Contains(inst.GetName(), "broken") {
			return `CAA-GCP-T4-BOOT-FAILED {"stage":"initrd","target":"emergency","failed":["sysroot.mount"]}` + "\n"
		}
		return gpuinit.Report{State: gpuinit.StateReady, GPUs: 1, Driver: "550.163.01", ElapsedMS: 1800}.Line() + "\n"
	})

	// CAA's start path: the Manager parses the DaemonSet's settings and
	// starts with the cluster's API (here the admin's credentials: RBAC
	// is the install tests' and internal/gc's start-up scenario's part).
	var m gcpt4.Manager
	fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
	m.ParseCmd(fs)
	if err := fs.Parse([]string{"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a", "-zones", "us-central1-b",
		"-image-name", "podvm-t4", "-network", "global/networks/default", "-subnetwork", "default", "-cluster-id", c.uid, "-node-name", "worker-a"}); err != nil {
		t.Fatal(err)
	}
	cfg := c.cp.Config()
	caa, err := m.Start(t.Context(), func() (gcpt4.ClusterAPI, error) {
		return gcpt4.ClusterAPI{URL: c.cp.URL, Token: cfg.BearerToken, CAPEM: cfg.CAData, Namespace: caaNS}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caa.Teardown() })
	spec := provider.InstanceTypeSpec{GPUs: 1, VCPUs: 3, Memory: 12288}
	create := func(pod, sandbox string) *provider.Instance {
		c.pod(t, "ml", pod, true, "worker-a", "")
		cc := &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: `{"pod-namespace":"ml","pod-name":"` + pod + `"}`}}}
		inst, err := caa.CreateInstance(t.Context(), pod, strings.Repeat(sandbox, 64), cc, spec)
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	llm := create("llm-0", "a")
	waitReason(t, c, "llm-0", podevent.ReasonBooted)
	p, err := c.cs.CoreV1().Pods("ml").Get(t.Context(), "llm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	if _, err := c.cs.CoreV1().Pods("ml").UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReason(t, c, "llm-0", podevent.ReasonReachable)
	broken := create("broken-0", "b")
	waitReason(t, c, "broken-0", podevent.ReasonFailed)

	code, out, errOut := c.status(t, time.Now(), "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "-gce")
	t.Logf("gcp-t4 status -n ml -gce:\n%s%s", out, errOut)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	blocks := strings.Split(out, "\n\n")
	find := func(pod string) string {
		for _, b := range blocks {
			if strings.HasPrefix(strings.TrimSpace(b), "ml/"+pod+" ") {
				return b
			}
		}
		t.Fatalf("no block for %s in:\n%s", pod, out)
		return ""
	}
	want := map[string][]string{
		"llm-0":    {llm.Name, "us-central1-b", "$0.", "GCE RUNNING", "requested", "stockout", "us-central1-a", "created", "booted", "driver 550.163.01", "reachable", "total"},
		"broken-0": {broken.Name, "failed", podevent.FailureBoot},
	}
	for pod, words := range want {
		b := find(pod)
		for _, w := range words {
			if !strings.Contains(b, w) {
				t.Errorf("%s's block lacks %q:\n%s", pod, w, b)
			}
		}
	}
}

// waitReason waits for a start-up Event on a pod; the deadline guards
// against a hang, it is no timing assertion.
func waitReason(t *testing.T, c *cluster, pod, reason string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		list, err := c.cs.CoreV1().Events("ml").List(t.Context(), metav1.ListOptions{LabelSelector: podevent.PhaseLabel, FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == reason {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event on %s", reason, pod)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
