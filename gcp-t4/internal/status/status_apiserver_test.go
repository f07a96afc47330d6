package status

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

var update = flag.Bool("update", false, "rewrite testdata/status-ml.golden and the example in docs/startup-visibility.md from what the command prints")

const (
	docPath    = "../../../docs/startup-visibility.md"
	goldenPath = "testdata/status-ml.golden"
	caaNS      = "confidential-containers-system"
)

// t0 is when the example's first pod asked for its podVM.
var t0 = time.Date(2026, 5, 4, 9, 0, 0, 250_000_000, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type cluster struct {
	cp  *controlplane.ControlPlane
	cs  kubernetes.Interface
	uid string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{})
	c := &cluster{cp: cp, cs: kubernetes.NewForConfigOrDie(cp.Config())}
	ks, err := c.cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.uid = string(ks.UID)
	// kata-deploy's RuntimeClass, which admission requires of a peer pod.
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: plan.DefaultRuntimeClass}, Handler: plan.DefaultRuntimeClass}
	if _, err := c.cs.NodeV1().RuntimeClasses().Create(t.Context(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) namespace(t *testing.T, ns string) {
	t.Helper()
	_, err := c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller-manager makes the default ServiceAccount admission
	// looks up.
	_, err = c.cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// pod makes a pod, a peer pod (kata-remote) or not, on node ("" leaves
// it unscheduled), in phase; it returns its UID.
func (c *cluster) pod(t *testing.T, ns, name string, peer bool, node string, phase corev1.PodPhase) string {
	t.Helper()
	c.namespace(t, ns)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if peer {
		rc := plan.DefaultRuntimeClass
		p.Spec.RuntimeClassName = &rc
	}
	p, err := c.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase != "" {
		p.Status.Phase = phase
		if p, err = c.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return string(p.UID)
}

// record writes Events as CAA does, signed with the key it keeps in its
// namespace beside its DaemonSet (made here when missing).
func (c *cluster) record(t *testing.T, evs ...timelinetest.Event) {
	t.Helper()
	c.caaDaemonSet(t, false)
	if err := timelinetest.InstallKey(t.Context(), c.cs, caaNS); err != nil {
		t.Fatal(err)
	}
	if err := timelinetest.Record(t.Context(), c.cs, evs...); err != nil {
		t.Fatal(err)
	}
}

// installCAA is what status reads of an installed CAA: its DaemonSet and
// the peer-pods-cm it reads, pointing at the emulator's project.
func (c *cluster) installCAA(t *testing.T, fake *gcefake.Server) {
	t.Helper()
	c.namespace(t, caaNS)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "peer-pods-cm", Namespace: caaNS}, Data: map[string]string{
		"CLOUD_PROVIDER": "gcp-t4", "GCP_PROJECT_ID": fake.Project(), "GCP_ZONE": "us-central1-a", "PODVM_IMAGE_NAME": "podvm-t4",
		"GCP_NETWORK": "global/networks/default", "GCP_SUBNETWORK": "default", "GCP_CLUSTER_ID": c.uid,
	}}
	if _, err := c.cs.CoreV1().ConfigMaps(caaNS).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.caaDaemonSet(t, true)
}

// caaDaemonSet makes CAA's DaemonSet, or updates it, reading peer-pods-cm
// when settings is set (an install without settings: the Events' key is
// all a test has of CAA).
func (c *cluster) caaDaemonSet(t *testing.T, settings bool) {
	t.Helper()
	c.namespace(t, caaNS)
	labels := map[string]string{"app": "cloud-api-adaptor"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "cloud-api-adaptor-daemonset", Namespace: caaNS}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "cloud-api-adaptor-con", Image: "caa-gcp-t4:latest",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "peer-pods-cm"}}}},
		}}}},
	}}
	if !settings {
		ds.Spec.Template.Spec.Containers[0].EnvFrom = nil
	}
	_, err := c.cs.AppsV1().DaemonSets(caaNS).Create(t.Context(), ds, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && settings {
		_, err = c.cs.AppsV1().DaemonSets(caaNS).Update(t.Context(), ds, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// podVMInGCE is a podVM of this cluster as GCE lists it.
func podVMInGCE(fake *gcefake.Server, clusterID, zone, name, ns, pod string) {
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String(name), MachineType: proto.String("n1-standard-4"),
		Labels: map[string]string{gcpt4.ManagedByLabel: gcpt4.ManagedByValue, gcpt4.ClusterLabel: clusterID,
			gcpt4.NamespaceLabel: gcpt4.LabelValue(ns), gcpt4.PodLabel: gcpt4.LabelValue(pod)}})
}

// GCE's settings come from the cluster in these tests, never from the
// machine running them.
func clearGCPEnv(t *testing.T) {
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_CREDENTIALS",
		"GCP_CLUSTER_ID", "GCP_ENDPOINT", "KUBECONFIG", "GOOGLE_APPLICATION_CREDENTIALS"} {
		t.Setenv(v, "")
	}
}

func (c *cluster) status(t *testing.T, now time.Time, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, &out, &errb, quiet(), func() time.Time { return now })
	return code, out.String(), errb.String()
}

// The example's pods in namespace ml: one reachable after two zones ran
// out, one booting, one that found no capacity.
var (
	cudaVectorAdd = timelinetest.Startup{Namespace: "ml", Pod: "cuda-vectoradd", PodVM: "podvm-cuda-vectoradd-6f1c2a9e", Start: t0,
		Zone: "us-central1-a", MachineType: "n1-standard-4", GPU: "nvidia-tesla-t4", GPUCount: "1", Model: "SPOT", Price: "0.17701"}
	llm = timelinetest.Startup{Namespace: "ml", Pod: "llm-0", PodVM: "podvm-llm-0-0b7d44e1", Start: t0.Add(4*time.Minute + 12*time.Second),
		Zone: "us-central1-f", MachineType: "n1-standard-8", GPU: "nvidia-tesla-t4", GPUCount: "2", Model: "STANDARD", Price: "1.07999"}
	train = timelinetest.Startup{Namespace: "ml", Pod: "train-0", PodVM: "podvm-train-0-93c0d5aa", Start: t0.Add(6*time.Minute + 3*time.Second),
		Zone: "us-central1-a", MachineType: "n1-standard-16", GPU: "nvidia-tesla-t4", GPUCount: "4", Model: "SPOT", Price: "1.20802"}
	exampleNow = t0.Add(10 * time.Minute)
)

func (c *cluster) example(t *testing.T) {
	t.Helper()
	cudaVectorAdd.PodUID = c.pod(t, "ml", "cuda-vectoradd", true, timelinetest.Node, corev1.PodRunning)
	llm.PodUID = c.pod(t, "ml", "llm-0", true, timelinetest.Node, corev1.PodPending)
	train.PodUID = c.pod(t, "ml", "train-0", true, timelinetest.Node, corev1.PodPending)
	c.pod(t, "ml", "web-0", false, timelinetest.Node, corev1.PodRunning)
	s := cudaVectorAdd
	c.record(t,
		s.Phase(podevent.PhaseRequested, 0, nil),
		s.Phase(podevent.PhaseStockout, 3*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-a"}),
		// A second zone out: the provider updates the stockout Event.
		s.Phase(podevent.PhaseStockout, 19*time.Second, map[string]string{podevent.ZonesAnnotation: "us-central1-b"}),
		s.Phase(podevent.PhaseCreated, 41*time.Second, map[string]string{podevent.ZoneAnnotation: "us-central1-f", podevent.IPAnnotation: "10.128.0.7"}),
		s.Phase(podevent.PhaseBooted, 104*time.Second, map[string]string{podevent.DriverAnnotation: "535.183.01", podevent.GPUCountAnnotation: "1"}),
		s.Phase(podevent.PhaseReachable, 110*time.Second, nil),
	)
	c.record(t,
		llm.Phase(podevent.PhaseRequested, 0, nil),
		llm.Phase(podevent.PhaseCreated, 37*time.Second, map[string]string{podevent.IPAnnotation: "10.128.0.9"}),
	)
	c.record(t,
		train.Phase(podevent.PhaseRequested, 0, nil),
		train.Phase(podevent.PhaseQuota, 2*time.Second, map[string]string{podevent.RegionAnnotation: "us-central1", podevent.QuotaMetricAnnotation: "NVIDIA_T4_GPUS", podevent.ZoneAnnotation: "us-central1-a"}),
		timelinetest.Event{Namespace: "ml", Pod: "train-0", PodUID: train.PodUID, PodVM: train.PodVM, Phase: podevent.PhaseFailed, At: train.Start.Add(2*time.Second + 400*time.Millisecond),
			Facts:   map[string]string{podevent.FailureAnnotation: podevent.FailureNoCapacity},
			Message: "every offering tried was out of capacity or over quota: us-central1 NVIDIA_T4_GPUS quota is below the 4 this pod needs; raise it or allow another region\n(the walk, zone by zone, follows)"},
	)
}

// docExample reads the example of docs/startup-visibility.md: the
// command under <!-- status-example --> and the output block after it.
func docExample(t *testing.T) (cmd, output string, doc []byte) {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- status-example -->\n```sh\n([^\n]+)\n```\n\n```text\n(.*?)```\n").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/startup-visibility.md has no <!-- status-example --> with a ```sh command and a ```text output")
	}
	return string(m[1]), string(m[2]), doc
}

func TestStatusOnARealAPIServer(t *testing.T) {
	clearGCPEnv(t)
	c := startCluster(t)
	c.example(t)

	// Without CAA in the cluster GCE is not asked, and says nothing.
	t.Run("NoCAANoGCE", func(t *testing.T) {
		code, out, errOut := c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "-o", "json")
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
			t.Fatalf("exit %d, %v\n%s%s", code, err, out, errOut)
		}
		if rep.GCE.Asked || rep.GCE.Error != "" || !strings.Contains(rep.GCE.Note, "no peer-pods-cm names a GCP project") {
			t.Errorf("gce %+v, want not asked, quietly", rep.GCE)
		}
		code, out, errOut = c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "-gce")
		if code != 1 || out != "" || !strings.Contains(errOut, "-gce: no GCP project") {
			t.Errorf("-gce without settings: exit %d\n%s%s", code, out, errOut)
		}
	})

	// A tenant's Events, with the labels and a made-up failure, price and
	// a terminal escape, and an edit of a real one: left out, named once,
	// safely; the report is otherwise the same.
	t.Run("ForgedEventsLeftOut", func(t *testing.T) {
		_, before, _ := c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml")
		forged := timelinetest.Startup{Namespace: "ml", Pod: "cuda-vectoradd", PodVM: "podvm-cuda-vectoradd-6f1c2a9e", Start: t0, Price: "1e9"}
		for _, e := range []timelinetest.Event{
			forged.Phase(podevent.PhaseCreated, time.Second, nil),
			forged.Phase(podevent.PhaseFailed, 2*time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureGPU}),
		} {
			obj := e.Object()
			obj.Name = "forged-" + e.Phase
			obj.Message = "\x1b[2J\x1b]52;c;aGk=\x07 gpu broken"
			delete(obj.Annotations, eventsig.SignatureAnnotation)
			if _, err := c.cs.CoreV1().Events("ml").Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut := c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml")
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		body, tail, _ := strings.Cut(out, "2 start-up Event(s) left out")
		if body != before || !strings.Contains(tail, "ml/forged-created") || strings.ContainsAny(out, "\x1b\x07") || strings.Contains(out, "1e9") {
			t.Errorf("with forged Events:\n%s\nwithout:\n%s", out, before)
		}
		for _, name := range []string{"forged-" + podevent.PhaseCreated, "forged-" + podevent.PhaseFailed} {
			if err := c.cs.CoreV1().Events("ml").Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	// -o json: one named pod's timeline, spans in seconds, cost at the
	// created phase's price.
	t.Run("JSONOfOnePod", func(t *testing.T) {
		code, out, errOut := c.status(t, exampleNow, "cuda-vectoradd", "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "-o", "json")
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
			t.Fatalf("exit %d, %v\n%s%s", code, err, out, errOut)
		}
		if len(rep.PodVMs) != 1 || len(rep.WithoutEvents) != 0 {
			t.Fatalf("%d podVMs, %d without Events; want cuda-vectoradd's only", len(rep.PodVMs), len(rep.WithoutEvents))
		}
		p := rep.PodVMs[0]
		if p.PodPhase != "Running" || p.PodVM != cudaVectorAdd.PodVM || p.PodUID != cudaVectorAdd.PodUID || p.State != timeline.StateReachable {
			t.Errorf("pod %s podVM %s uid %s state %s", p.PodPhase, p.PodVM, p.PodUID, p.State)
		}
		if p.Durations[timeline.Create] != 41 || p.Durations[timeline.Boot] != 63 || p.Durations[timeline.Agent] != 6 || p.Durations[timeline.Total] != 110 {
			t.Errorf("durations %v", p.Durations)
		}
		if strings.Join(p.StockedOut, ",") != "us-central1-a,us-central1-b" || p.Zone != "us-central1-f" {
			t.Errorf("stocked out %v, zone %s", p.StockedOut, p.Zone)
		}
		if e, _ := p.Entry(podevent.PhaseStockout); e.Count != 2 {
			t.Errorf("stockout count %d, want 2 (the Event updated)", e.Count)
		}
		want := 0.17701 * exampleNow.Sub(t0.Add(41*time.Second)).Hours()
		if p.Cost == nil || p.Cost.USD < want-1e-9 || p.Cost.USD > want+1e-9 || !p.Cost.Ongoing {
			t.Errorf("cost %+v, want %v ongoing", p.Cost, want)
		}
	})

	t.Run("WithoutEvents", func(t *testing.T) {
		code, out, _ := c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "web-0")
		if code != 0 || !strings.Contains(out, "ml/web-0: no start-up Events: not a peer pod: runtimeClassName (none), not kata-remote") {
			t.Errorf("a pod on its node: exit %d\n%s", code, out)
		}
		uid := c.pod(t, "batch", "queued-0", true, "", corev1.PodPending)
		p, err := c.cs.CoreV1().Pods("batch").Get(t.Context(), "queued-0", metav1.GetOptions{})
		if err != nil || string(p.UID) != uid {
			t.Fatal(err)
		}
		created := p.CreationTimestamp.Time
		code, out, _ = c.status(t, created.Add(time.Minute), "-kubeconfig", c.cp.Kubeconfig, "-n", "batch")
		if code != 0 || !strings.Contains(out, "batch/queued-0: no start-up Events: not scheduled to a node yet") {
			t.Errorf("an unscheduled peer pod: exit %d\n%s", code, out)
		}
		code, out, _ = c.status(t, created.Add(3*time.Hour), "-kubeconfig", c.cp.Kubeconfig, "-n", "batch")
		// The detail wraps at 100 columns: compared word by word.
		if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "batch/queued-0: no start-up Events: created 3h0m ago: its start-up Events have expired (the API server keeps Events for its --event-ttl, default 1h0m)") {
			t.Errorf("a peer pod older than the event TTL: exit %d\n%s", code, out)
		}
		c.namespace(t, "empty")
		code, out, _ = c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "empty")
		if code != 0 || !strings.HasPrefix(out, "no start-up Events (the API server keeps Events for its --event-ttl") {
			t.Errorf("an empty namespace: exit %d\n%s", code, out)
		}
	})

	// A named pod that does not exist is exit 1; its Events, left after
	// it was deleted, are still shown. Events of an earlier pod of a
	// name (another UID) are not the live pod's.
	t.Run("MissingPodAndEarlierPod", func(t *testing.T) {
		code, out, errOut := c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "nosuch-0")
		if code != 1 || !strings.Contains(errOut, "pod ml/nosuch-0 does not exist") {
			t.Errorf("missing pod: exit %d\n%s%s", code, out, errOut)
		}
		gone := timelinetest.Startup{Namespace: "ml", Pod: "gone-0", PodUID: "uid-of-a-deleted-pod", PodVM: "podvm-gone-0-11111111", Start: t0,
			Zone: "us-central1-a", MachineType: "n1-standard-4", GPU: "nvidia-tesla-t4", GPUCount: "1", Model: "SPOT", Price: "0.17701"}
		c.record(t, gone.Phase(podevent.PhaseRequested, 0, nil), gone.Phase(podevent.PhaseCreated, 30*time.Second, nil))
		code, out, errOut = c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "gone-0")
		if code != 1 || !strings.Contains(out, "ml/gone-0  podvm-gone-0-11111111") || !strings.Contains(out, "pod Deleted") || !strings.Contains(errOut, "does not exist") {
			t.Errorf("deleted pod with Events: exit %d\n%s%s", code, out, errOut)
		}
		c.pod(t, "ml", "gone-0", true, timelinetest.Node, corev1.PodRunning)
		code, out, _ = c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "gone-0")
		if code != 0 || !strings.Contains(out, "pod Deleted") {
			t.Errorf("a new pod of the name does not own the earlier one's podVM: exit %d\n%s", code, out)
		}
		if err := c.cs.CoreV1().Pods("ml").Delete(t.Context(), "gone-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		for _, ph := range []string{podevent.PhaseRequested, podevent.PhaseCreated} {
			if err := c.cs.CoreV1().Events("ml").Delete(t.Context(), podevent.Name("gone-0", gone.PodVM, ph), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	// CAA installed: GCE is asked with its settings, on the emulator.
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	t.Setenv("GCP_ENDPOINT", fake.URL())
	c.installCAA(t, fake)
	podVMInGCE(fake, c.uid, "us-central1-f", cudaVectorAdd.PodVM, "ml", "cuda-vectoradd")
	podVMInGCE(fake, c.uid, "us-central1-f", llm.PodVM, "ml", "llm-0")

	// The example in docs/startup-visibility.md, run as written: its
	// output is the golden file, and the doc shows exactly that.
	t.Run("DocExample", func(t *testing.T) {
		cmd, shown, doc := docExample(t)
		args := strings.Fields(strings.ReplaceAll(cmd, "~/.kube/config", c.cp.Kubeconfig))
		if len(args) < 2 || args[0] != "gcp-t4" || args[1] != "status" {
			t.Fatalf("the example runs %q, not gcp-t4 status", cmd)
		}
		code, out, errOut := c.status(t, exampleNow, args[2:]...)
		if code != 0 || errOut != "" {
			t.Fatalf("%s: exit %d\n%s%s", cmd, code, out, errOut)
		}
		if *update {
			if err := os.WriteFile(goldenPath, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			doc = bytes.Replace(doc, []byte("```text\n"+shown+"```"), []byte("```text\n"+out+"```"), 1)
			if err := os.WriteFile(docPath, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			shown = out
		}
		golden, err := os.ReadFile(goldenPath)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(golden) {
			t.Errorf("%s prints (go test -run TestStatusOnARealAPIServer/DocExample -update rewrites the golden file and the doc):\n%s\nwant %s:\n%s", cmd, out, goldenPath, golden)
		}
		if shown != string(golden) {
			t.Errorf("docs/startup-visibility.md shows another output than %s:\n%s", goldenPath, shown)
		}
		// The synopsis the page gives is the command's own.
		synopsis, _, _ := strings.Cut(strings.TrimPrefix(Usage, "usage: "), "\n")
		if !bytes.Contains(doc, []byte("```\n"+synopsis+"\n```")) {
			t.Errorf("docs/startup-visibility.md does not give the usage line %q", synopsis)
		}
		for _, want := range []string{"GCE RUNNING", "us-central1-a, us-central1-b", "no-capacity:", "pod Running"} {
			if !strings.Contains(out, want) {
				t.Errorf("the example lacks %q", want)
			}
		}
	})

	// GCE no longer lists a podVM whose Events say it runs: gone, and its
	// cost a floor up to its last phase.
	t.Run("GCESaysGone", func(t *testing.T) {
		code, out, errOut := c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "-o", "json", "-gce")
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
			t.Fatalf("exit %d, %v\n%s%s", code, err, out, errOut)
		}
		if !rep.GCE.Asked || !strings.Contains(rep.GCE.Note, "settings from "+caaNS+"/peer-pods-cm") {
			t.Errorf("gce %+v", rep.GCE)
		}
		if err := deleteVM(t.Context(), fake, cudaVectorAdd.PodVM); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "cuda-vectoradd")
		// 0.17701 $/h from created to reachable, 69 s.
		if code != 0 || !strings.Contains(out, "GCE gone") || !strings.Contains(out, "at least $0.0034") {
			t.Errorf("a podVM GCE no longer lists: exit %d\n%s%s", code, out, errOut)
		}
		code, out, _ = c.status(t, exampleNow, "-kubeconfig", c.cp.Kubeconfig, "-n", "ml", "cuda-vectoradd", "-gce=false")
		if code != 0 || strings.Contains(out, "GCE") {
			t.Errorf("-gce=false still asked GCE: exit %d\n%s", code, out)
		}
	})
}

// deleteVM deletes a VM through GCE's API on the emulator, as a user
// would.
func deleteVM(ctx context.Context, fake *gcefake.Server, name string) error {
	c, err := compute.NewInstancesRESTClient(ctx, fake.ClientOptions()...)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, vm := range fake.Instances() {
		if vm.GetName() != name {
			continue
		}
		zone := vm.GetZone()[strings.LastIndex(vm.GetZone(), "/")+1:]
		op, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: fake.Project(), Zone: zone, Instance: name})
		if err != nil {
			return err
		}
		return op.Wait(ctx)
	}
	return fmt.Errorf("no VM %s", name)
}
