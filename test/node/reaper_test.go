package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reaperGrace is the reaper's REAPER_GRACE in this test: the manifests'
// 10 minutes would make the test wait them out; the decision it bounds
// is the same.
const reaperGrace = 20 * time.Second

// gceDo sends one request to the emulator's compute API and decodes the
// answer into out (when given).
func gceDo(ctx context.Context, pp *PeerPods, method, rel string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, pp.GCE+"/compute/v1/projects/"+pp.Project+"/"+rel, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, rel, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// leakPodVM inserts, through the emulator's GCE API, a podVM as CAA makes
// them, for a pod that no longer exists: the live podVM's machine type,
// network, scheduling, labels and metadata (its user-data left out, so
// nothing boots in it), with the pod's name and the sandbox ID another's.
// This is what a leak leaves: an adaptor killed after GCE accepted its
// insert, or a StopVM that never reached a live adaptor, for a pod since
// deleted.
func leakPodVM(ctx context.Context, pp *PeerPods, live instance, image string) (string, error) {
	zone := path.Base(live.Zone)
	var full map[string]any
	if err := gceDo(ctx, pp, http.MethodGet, "zones/"+zone+"/instances/"+live.Name, nil, &full); err != nil {
		return "", err
	}
	idb := make([]byte, 32)
	if _, err := rand.Read(idb); err != nil {
		return "", err
	}
	sandbox := hex.EncodeToString(idb)
	name := "podvm-gone-" + sandbox[:8]
	labels := map[string]any{}
	for k, v := range live.Labels {
		labels[k] = v
	}
	labels["caa-pod"] = "gone"
	labels["caa-sandbox"] = sandbox[:12]
	var items []any
	if md, ok := full["metadata"].(map[string]any); ok {
		if its, ok := md["items"].([]any); ok {
			for _, it := range its {
				m, _ := it.(map[string]any)
				switch m["key"] {
				case "user-data":
					continue
				case "caa-sandbox-id":
					m["value"] = sandbox
				}
				items = append(items, m)
			}
		}
	}
	var nics []any
	if ns, ok := full["networkInterfaces"].([]any); ok {
		for _, n := range ns {
			m, _ := n.(map[string]any)
			nics = append(nics, map[string]any{"network": m["network"], "subnetwork": m["subnetwork"]})
		}
	}
	body := map[string]any{
		"name":              name,
		"machineType":       full["machineType"],
		"labels":            labels,
		"metadata":          map[string]any{"items": items},
		"networkInterfaces": nics,
		"disks": []any{map[string]any{"boot": true, "autoDelete": true,
			"initializeParams": map[string]any{"sourceImage": "projects/" + pp.Project + "/global/images/" + image}}},
	}
	for _, k := range []string{"scheduling", "guestAccelerators", "serviceAccounts", "tags", "shieldedInstanceConfig"} {
		if v, ok := full[k]; ok {
			body[k] = v
		}
	}
	if err := gceDo(ctx, pp, http.MethodPost, "zones/"+zone+"/instances", body, nil); err != nil {
		return "", err
	}
	return name, nil
}

// TestKataRemoteReaper: the reaper (`gcp-t4 reaper`, the
// caa-gcp-t4-reaper Deployment's command) runs as a host process against
// this node's API server and the emulator, with the Deployment's
// environment (peer-pods-cm, its pod's fields, its credentials file path)
// and its ServiceAccount's token; REAPER_GRACE is 20 s instead of 10 min.
// A kata-remote pod is Running on its podVM; a second podVM, for a pod
// that no longer exists, is leaked. The reaper deletes the leaked one and
// only it: the pod's podVM and the pod stay.
func TestKataRemoteReaper(t *testing.T) {
	k := kataOrSkip(t)
	k.AgentPull = 5 * time.Second
	ks := startKata(t, &k)
	ph, ctx, cs, n, pp := ks.ph, ks.ctx, ks.cs, ks.n, ks.pp
	const ns, name = gpuNamespace, "vllm"
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(n.Name, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, "pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return containersRunning(p), podSeen(p)
	}); err != nil {
		t.Fatal(err)
	}
	ph.done("pod Running")
	vms, err := gceInstances(ctx, pp)
	if err != nil || len(vms) != 1 {
		t.Fatalf("want the pod's one podVM: %v, %+v", err, vms)
	}
	live := vms[0]
	t.Logf("the pod's podVM: %s %s, labels %v", live.Name, live.Status, live.Labels)

	leaked, err := leakPodVM(ctx, pp, live, "podvm-t4")
	if err != nil {
		t.Fatalf("leak a podVM: %v", err)
	}
	leakedAt := time.Now()
	var leakedVM instance
	if err := poll(ctx, "the leaked podVM RUNNING", func() (bool, string) {
		vms, err := gceInstances(ctx, pp)
		if err != nil {
			return false, err.Error()
		}
		for _, v := range vms {
			if v.Name == leaked {
				leakedVM = v
				return v.Status == "RUNNING", v.Status
			}
		}
		return false, "absent"
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("leaked podVM: %s %s, labels %v", leakedVM.Name, leakedVM.Status, leakedVM.Labels)
	ph.done("leaked podVM inserted")

	// The Deployment's environment: peer-pods-cm (envFrom), its pod's
	// name, namespace and UID (there is no pod: the names of one), the
	// credentials file path (absent here: Application Default
	// Credentials, which the emulator's endpoint does without).
	cm, err := cs.CoreV1().ConfigMaps(pp.Namespace).Get(ctx, "peer-pods-cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=/root", "PATH=" + os.Getenv("PATH")}
	for key, v := range cm.Data {
		env = append(env, key+"="+v)
	}
	t.Logf("peer-pods-cm's REAPER_INTERVAL=%q REAPER_GRACE=%q; the test sets REAPER_GRACE=%s", cm.Data["REAPER_INTERVAL"], cm.Data["REAPER_GRACE"], reaperGrace)
	env = append(env, "REAPER_GRACE="+reaperGrace.String(), "POD_NAME=caa-gcp-t4-reaper-node-harness", "POD_NAMESPACE="+pp.Namespace,
		"POD_UID=00000000-0000-0000-0000-000000000054", "REAPER_CREDENTIALS_FILE=/var/run/gcp-reaper-key/key.json")
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(pp.Namespace).CreateToken(ctx, "caa-gcp-t4-reaper",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the reaper's ServiceAccount: %v", err)
	}
	// In a pod the reaper reads its token where client-go's
	// InClusterConfig does; CAA's token is there on this machine, so the
	// reaper's is given as a kubeconfig.
	kc := n.path("reaper.kubeconfig")
	if err := ks.cp.WriteKubeconfig(kc, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	// Past the grace, as the reaper judges age: the leaked VM's
	// creationTimestamp.
	if err := poll(ctx, "the leaked podVM older than the grace", func() (bool, string) {
		return time.Since(leakedAt) > reaperGrace+time.Second, time.Since(leakedAt).String()
	}); err != nil {
		t.Fatal(err)
	}
	args := []string{"reaper", "--kubeconfig", kc, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[0])}
	started := time.Now()
	reaper, err := n.start("reaper", env, k.GcpT4, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reaper: gcp-t4 %s", strings.Join(args, " "))
	var gone time.Duration
	werr := poll(ctx, "the leaked podVM deleted", func() (bool, string) {
		if err := reaper.exited(); err != nil {
			return false, err.Error()
		}
		vms, err := gceInstances(ctx, pp)
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, v := range vms {
			names = append(names, v.Name+" "+v.Status)
			if v.Name == leaked {
				return false, strings.Join(names, ", ") + "; reaper log ends: " + n.LogTail("reaper", 600)
			}
		}
		gone = time.Since(started)
		return true, ""
	})
	for _, l := range n.LogLines("reaper", "") {
		t.Logf("reaper: %s", clip(l))
	}
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("leaked podVM gone %.1fs after the reaper started", gone.Seconds())
	ph.done("reaper → leaked podVM deleted")
	vms, err = gceInstances(ctx, pp)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Name != live.Name || vms[0].Status != "RUNNING" {
		t.Errorf("after the reaper's pass: %+v; want only the pod's podVM %s, RUNNING", vms, live.Name)
	}
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !containersRunning(p) {
		t.Errorf("the pod after the reaper's pass: %s", podSeen(p))
	}
	t.Logf("the pod after the reaper's pass: %s", podSeen(p))
	if evs, err := cs.CoreV1().Events(pp.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=caa-gcp-t4-reaper-node-harness"}); err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s/%s: %s", e.Type, e.Source.Component, e.Reason, clip(e.Message))
		}
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])); err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(data), "\n") {
			// What it counted, not the empty series.
			if strings.HasPrefix(l, "gcp_t4_reaper_") && !strings.HasSuffix(l, " 0") && !strings.Contains(l, "_bucket") && !strings.Contains(l, "timestamp") {
				t.Logf("metric %s", l)
			}
		}
	}
	reaper.stop(30 * time.Second)

	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, "pod gone, 0 VMs", func() (bool, string) {
		_, perr := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		vms, err := gceInstances(ctx, pp)
		if err != nil {
			return false, err.Error()
		}
		return perr != nil && len(vms) == 0, fmt.Sprintf("pod: %v, %d instances", perr, len(vms))
	}); err != nil {
		t.Error(err)
	}
	ph.done("delete → pod gone, 0 VMs")
	stopAndCheck(t, n, ph)
}
