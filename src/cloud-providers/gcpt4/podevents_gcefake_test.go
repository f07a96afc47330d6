// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/consoleline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// eventAPI stands in for the API server's Event and Pod endpoints, as the
// recorder uses them: create (409 on a taken name), get, merge patch, and
// pod reads. It records what a real server would store; the real
// kube-apiserver runs the same flow in gcp-t4's startup tests, which this
// module cannot import.
type eventAPI struct {
	srv *httptest.Server

	mu     sync.Mutex
	events map[string]map[string]any // ns/name → object
	order  []string
	pods   map[string]map[string]any // ns/name → pod
	block  chan struct{}             // when set, every request waits on it
	// secrets are ns/name → object; secretStatus, when set, answers every
	// secrets request (RBAC refusing it).
	secrets      map[string]map[string]any
	secretStatus int
}

// eventNamespace is the adaptor's namespace in these tests.
const eventNamespace = "caa-system"

func newEventAPI(t *testing.T) *eventAPI {
	a := &eventAPI{events: map[string]map[string]any{}, pods: map[string]map[string]any{}, secrets: map[string]map[string]any{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *eventAPI) clusterAPI() ClusterAPI {
	return ClusterAPI{URL: a.srv.URL, Token: "t", CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}),
		Namespace: eventNamespace}
}

func (a *eventAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	block := a.block
	a.mu.Unlock()
	if block != nil {
		<-block
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/")
	if len(parts) < 2 || r.Header.Get("Authorization") != "Bearer t" {
		http.Error(w, `{"message":"no"}`, http.StatusForbidden)
		return
	}
	ns, kind := parts[0], parts[1]
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case kind == "secrets" && a.secretStatus != 0:
		http.Error(w, `{"message":"secrets is forbidden"}`, a.secretStatus)
	case kind == "secrets" && len(parts) == 3 && r.Method == http.MethodGet:
		obj, ok := a.secrets[ns+"/"+parts[2]]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(obj)
	case kind == "secrets" && len(parts) == 2 && r.Method == http.MethodPost:
		var obj map[string]any
		_ = json.NewDecoder(r.Body).Decode(&obj)
		name := obj["metadata"].(map[string]any)["name"].(string)
		if _, ok := a.secrets[ns+"/"+name]; ok {
			http.Error(w, `{"message":"already exists"}`, http.StatusConflict)
			return
		}
		a.secrets[ns+"/"+name] = obj
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(obj)
	case kind == "pods" && len(parts) == 3 && r.Method == http.MethodGet:
		pod, ok := a.pods[ns+"/"+parts[2]]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(pod)
	case kind == "events" && len(parts) == 2 && r.Method == http.MethodPost:
		var obj map[string]any
		_ = json.NewDecoder(r.Body).Decode(&obj)
		name := obj["metadata"].(map[string]any)["name"].(string)
		if _, ok := a.events[ns+"/"+name]; ok {
			http.Error(w, `{"message":"already exists"}`, http.StatusConflict)
			return
		}
		a.events[ns+"/"+name] = obj
		a.order = append(a.order, ns+"/"+name)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(obj)
	case kind == "events" && len(parts) == 3:
		obj, ok := a.events[ns+"/"+parts[2]]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		if r.Method == http.MethodPatch {
			if r.Header.Get("Content-Type") != "application/merge-patch+json" {
				http.Error(w, `{"message":"unsupported patch"}`, http.StatusUnsupportedMediaType)
				return
			}
			var patch map[string]any
			_ = json.NewDecoder(r.Body).Decode(&patch)
			mergePatch(obj, patch)
		}
		_ = json.NewEncoder(w).Encode(obj)
	default:
		http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
	}
}

// mergePatch applies an RFC 7386 merge patch (objects merge, null
// removes, the rest replaces).
func mergePatch(dst, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			dm, _ := dst[k].(map[string]any)
			if dm == nil {
				dm = map[string]any{}
				dst[k] = dm
			}
			mergePatch(dm, pm)
			continue
		}
		dst[k] = v
	}
}

func (a *eventAPI) addPod(ns, name, uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[ns+"/"+name] = map[string]any{"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid}, "status": map[string]any{"phase": "Pending"}}
}

// deleting marks a pod as the API server shows it once deleted, while its
// containers stop.
func (a *eventAPI) deleting(ns, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[ns+"/"+name]["metadata"].(map[string]any)["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339)
}

func (a *eventAPI) sandboxReady(ns, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[ns+"/"+name]["status"] = map[string]any{"phase": "Pending", "conditions": []any{
		map[string]any{"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)},
	}}
}

type storedEvent struct {
	Reason, Message, Type string
	Count                 int
	Labels, Annotations   map[string]string
	UID                   string
	raw                   []byte
}

// list returns the stored Events in creation order.
func (a *eventAPI) list() []storedEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []storedEvent
	for _, k := range a.order {
		raw, _ := json.Marshal(a.events[k])
		var e struct {
			Reason, Message, Type string
			Count                 int
			Metadata              struct{ Labels, Annotations map[string]string }
			InvolvedObject        struct{ UID string }
		}
		_ = json.Unmarshal(raw, &e)
		out = append(out, storedEvent{Reason: e.Reason, Message: e.Message, Type: e.Type, Count: e.Count, Labels: e.Metadata.Labels, Annotations: e.Metadata.Annotations, UID: e.InvolvedObject.UID, raw: raw})
	}
	return out
}

func reasons(evs []storedEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

// waitEvents waits until cond holds over the stored Events; the deadline
// is far beyond any run, a hang guard rather than a timing assertion.
func (a *eventAPI) waitEvents(t *testing.T, what string, cond func([]storedEvent) bool) []storedEvent {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		evs := a.list()
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: Events are %v", what, reasons(evs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasReason(r string) func([]storedEvent) bool {
	return func(evs []storedEvent) bool { return slices.Contains(reasons(evs), r) }
}

// podCloudConfig is CAA's cloud-config for a pod, with a secret in it as
// CAA's has (the agent's TLS key).
func podCloudConfig(ns, pod string) cloudinit.CloudConfigGenerator {
	return &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{
		{Path: "/run/peerpod/apf.json", Content: `{"pod-name":"` + pod + `","pod-namespace":"` + ns + `"}`},
		{Path: "/run/peerpod/tls/tls.key", Content: testSecretKey},
	}}
}

const testSecretKey = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBsecretSECRETsecret0123456789abcdefABCDEF0123456789oAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n"

// newEventProvider is a provider on fake with Events to api, as Start
// makes it in CAA, watching boots every few milliseconds.
func newEventProvider(t *testing.T, fake *gcefake.Server, api *eventAPI, logs io.Writer, mutate func(*Config)) *Provider {
	t.Helper()
	p, _ := newTestProviderOn(t, fake, mutate)
	p.log = log.New(logs, "", 0)
	var err error
	if p.events, err = newEventRecorder(api.clusterAPI(), "node-1", p.log); err != nil {
		t.Fatal(err)
	}
	p.bootPoll = 2 * time.Millisecond
	// The emulator's podVM addresses are not on this machine: the agent
	// probe is refused unless a test answers it.
	p.dialAgent = func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("connect: connection refused")
	}
	return p
}

// oneT4Pod is a pod ml/llm-0 whose one-T4 podVM the event provider has just
// created on a new emulator.
func oneT4Pod(t *testing.T) (*gcefake.Server, *eventAPI, *Provider, *provider.Instance) {
	t.Helper()
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, nil)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	return fake, api, p, inst
}

const gpuReadyLine = `CAA-GCP-T4-GPU {"state":"ready","gpus":1,"pci":["0000:00:04.0"],"driver":"550.163.01","cdi":"/var/run/cdi/nvidia.json","elapsed_ms":2300}`

func TestStartupEventsInOrder(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, func(c *Config) { c.FallbackZones = commaList{"us-central1-b"} })
	fake.SetStockout("us-central1-a", true)
	ctx := context.Background()
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	fake.SetSerialOutput("us-central1-b", inst.Name, "[    0.000000] Linux version 6.1\n"+gpuReadyLine+"\n")
	api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
	api.sandboxReady("ml", "llm-0")
	evs := api.waitEvents(t, "reachable", hasReason(podevent.ReasonReachable))
	want := []string{podevent.ReasonRequested, podevent.ReasonStockout, podevent.ReasonCreated, podevent.ReasonBooted, podevent.ReasonReachable}
	if got := reasons(evs); !slices.Equal(got, want) {
		t.Fatalf("Events %v, want %v", got, want)
	}
	req, stock, created, booted := evs[0], evs[1], evs[2], evs[3]
	if req.Annotations[podevent.ZoneAnnotation] != "us-central1-a" || !strings.Contains(req.Message, "us-central1-a") {
		t.Errorf("requested: %v %q", req.Annotations, req.Message)
	}
	if stock.Type != "Warning" || stock.Annotations[podevent.ZonesAnnotation] != "us-central1-a" || !strings.Contains(stock.Message, "trying us-central1-b") {
		t.Errorf("stockout: %s %v %q", stock.Type, stock.Annotations, stock.Message)
	}
	price := created.Annotations[podevent.PriceAnnotation]
	if created.Annotations[podevent.ZoneAnnotation] != "us-central1-b" || price == "" || price == "0.0000" ||
		created.Annotations[podevent.IPAnnotation] != inst.IPs[0].String() || !strings.Contains(created.Message, "$") || !strings.Contains(created.Message, inst.Name) {
		t.Errorf("created: %v %q", created.Annotations, created.Message)
	}
	if booted.Annotations[podevent.DriverAnnotation] != "550.163.01" || booted.Annotations[podevent.GPUCountAnnotation] != "1" {
		t.Errorf("booted: %v %q", booted.Annotations, booted.Message)
	}
	for _, e := range evs {
		if e.UID != "uid-1" || e.Labels[podevent.PodVMLabel] != inst.Name || e.Labels[podevent.PhaseLabel] == "" || e.Annotations[podevent.AtAnnotation] == "" {
			t.Errorf("%s: uid %q labels %v annotations %v", e.Reason, e.UID, e.Labels, e.Annotations)
		}
	}
	// A normal delete after the agent was reached and the containers
	// started (the watch over) reads no console and adds no Event.
	api.containersRunning("ml", "llm-0")
	waitWatchDone(t, p, inst.Name)
	before := reasons(api.waitEvents(t, "image source", hasReason(podevent.ReasonImage)))
	reads := fake.CountCalls("instances.getSerialPortOutput")
	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if n := fake.CountCalls("instances.getSerialPortOutput"); n != reads {
		t.Errorf("delete of a running podVM read its console (%d → %d)", reads, n)
	}
	if err := p.Teardown(); err != nil {
		t.Fatal(err)
	}
	if got := reasons(api.list()); !slices.Equal(got, before) || len(got) != len(want)+1 {
		t.Errorf("after delete: %v, want %v (the start-up Events and the container's image source)", got, before)
	}
}

func TestStockoutEventCountsZones(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, func(c *Config) { c.FallbackZones = commaList{"us-central1-b", "us-central1-f"} })
	for _, z := range []string{"us-central1-a", "us-central1-b", "us-central1-f"} {
		fake.SetStockout(z, true)
	}
	_, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("err = %v", err)
	}
	evs := api.waitEvents(t, "the failure", hasReason(podevent.ReasonFailed))
	if got, want := reasons(evs), []string{podevent.ReasonRequested, podevent.ReasonStockout, podevent.ReasonFailed}; !slices.Equal(got, want) {
		t.Fatalf("Events %v, want %v", got, want)
	}
	stock, failed := evs[1], evs[2]
	if stock.Count != 3 || stock.Annotations[podevent.ZonesAnnotation] != "us-central1-a,us-central1-b,us-central1-f" || !strings.Contains(stock.Message, "us-central1-f has no capacity") || !strings.Contains(stock.Message, "no zone left") {
		t.Errorf("stockout Event: count %d %v %q", stock.Count, stock.Annotations, stock.Message)
	}
	if failed.Annotations[podevent.FailureAnnotation] != podevent.FailureNoCapacity || !strings.Contains(failed.Message, "GCP_ZONES") {
		t.Errorf("failed Event: %v %q", failed.Annotations, failed.Message)
	}

	// An adaptor restarted mid-walk finds the Event by its name and
	// counts on it: still one Event per phase.
	p2 := newEventProvider(t, fake, api, io.Discard, nil)
	p2.events.record(podEvent{namespace: "ml", pod: "llm-0", podVM: "podvm-llm-0-01234567", phase: podevent.PhaseStockout, zone: "us-east1-c", message: "again", at: time.Now()})
	p2.events.record(podEvent{namespace: "ml", pod: "llm-0", podVM: "podvm-llm-0-01234567", phase: podevent.PhaseFailed, message: "again", at: time.Now()})
	p2.events.close(context.Background())
	got := map[string]int{}
	for _, e := range api.list() {
		got[e.Reason]++
		if e.Reason == podevent.ReasonStockout && (e.Count != 4 || e.Annotations[podevent.ZonesAnnotation] != "us-central1-a,us-central1-b,us-central1-f,us-east1-c") {
			t.Errorf("after restart: stockout count %d zones %q", e.Count, e.Annotations[podevent.ZonesAnnotation])
		}
		if e.Reason == podevent.ReasonFailed && e.Message == "again" {
			t.Errorf("a once-only phase was overwritten")
		}
	}
	for r, n := range got {
		if n != 1 {
			t.Errorf("%d Events of %s", n, r)
		}
	}
}

func TestBootFailureLineReachesThePod(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	var logs bytes.Buffer
	var logMu sync.Mutex
	p := newEventProvider(t, fake, api, lockedWriter{&logs, &logMu}, nil)
	ctx := context.Background()
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	failed := `CAA-GCP-T4-BOOT-FAILED {"stage":"initrd","target":"emergency","failed":["sysroot.mount"]}`
	fake.SetSerialOutput("us-central1-a", inst.Name, "\x1b[0;1;31mFAILED\x1b[0m Failed to mount sysroot.mount\n"+failed+"\n")
	evs := api.waitEvents(t, "failed", hasReason(podevent.ReasonFailed))
	var f storedEvent
	for _, e := range evs {
		if e.Reason == podevent.ReasonFailed {
			f = e
		}
	}
	if f.Type != "Warning" || f.Annotations[podevent.FailureAnnotation] != podevent.FailureBoot || !strings.Contains(f.Message, failed) || strings.Contains(f.Message, "\x1b") {
		t.Errorf("failed Event: %v %q", f.Annotations, f.Message)
	}
	// CAA deletes the podVM: the console is read once more and logged,
	// and the failure is not told twice.
	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	_ = p.Teardown()
	n := 0
	for _, e := range api.list() {
		if e.Reason == podevent.ReasonFailed {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d failed Events", n)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), failed) {
		t.Errorf("the adaptor's log lacks the console's line:\n%s", logs.String())
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestDeleteKeepsTheConsoleTail(t *testing.T) {
	for _, tc := range []struct {
		name, console, class string
		// answers: the node's probe of the agent port connects.
		answers bool
		// says and never are what the message must and must not hold.
		says, never []string
	}{
		{name: "agent never reached", console: "boot\n" + gpuReadyLine + "\nkata-agent waiting\n", class: podevent.FailureAgentUnreachable,
			says: []string{"cannot open tcp 10.", ":15150 now (connect: connection refused)", "firewall"}},
		// The adaptor gave up for its own reason (harness run of issue
		// 54: its socket path too long; a TLS failure; its own shutdown,
		// a rolling update's SIGTERM, which cancels the StartVM in
		// flight and so deletes a booted podVM: docs/node-harness.md,
		// TestKataRemoteCAARollingUpdate): the port answers, the firewall
		// is not named, and the shutdown is among the causes named.
		{name: "agent port answers", console: "boot\n" + gpuReadyLine + "\nkata-agent waiting\n", class: podevent.FailureAdaptor, answers: true,
			says: []string{"opens tcp 10.", "the network is not the cause", "adaptor's log on the pod's node says why", "after it booted",
				"its own shutdown (SIGTERM: a rolling update of its DaemonSet", "kubelet retries the sandbox"}, never: []string{"firewall"}},
		{name: "never booted", console: "[    1.2] EXT4-fs error (device sda1): bad block\nsecret=hunter2 token: abc.def\n" + strings.TrimSuffix(testSecretKey, "\n") + "\nlast words", class: podevent.FailureNotReady},
		{name: "cdh", console: "boot\n" + gpuReadyLine + "\nCAA-GCP-T4-CDH-FAILED {\"reason\":\"did not listen\"} kata-agent not started\n", class: podevent.FailureCDH},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := gcefake.New()
			t.Cleanup(fake.Close)
			api := newEventAPI(t)
			api.addPod("ml", "llm-0", "uid-1")
			p := newEventProvider(t, fake, api, io.Discard, nil)
			var probed []string
			refuse := p.dialAgent
			p.dialAgent = func(ctx context.Context, network, addr string) (net.Conn, error) {
				probed = append(probed, network+" "+addr)
				if !tc.answers {
					return refuse(ctx, network, addr)
				}
				c, s := net.Pipe()
				_ = s.Close()
				return c, nil
			}
			ctx := context.Background()
			inst, err := p.CreateInstance(ctx, "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
			if err != nil {
				t.Fatal(err)
			}
			fake.SetSerialOutput("us-central1-a", inst.Name, tc.console)
			if err := p.DeleteInstance(ctx, inst.ID); err != nil {
				t.Fatal(err)
			}
			if err := p.Teardown(); err != nil {
				t.Fatal(err)
			}
			var f []storedEvent
			for _, e := range api.list() {
				if e.Reason == podevent.ReasonFailed {
					f = append(f, e)
				}
				for _, secret := range []string{"hunter2", "abc.def", "MHcCAQEE", "BEGIN EC PRIVATE", "oAoGCCqGSM49"} {
					if bytes.Contains(e.raw, []byte(secret)) {
						t.Errorf("%s Event carries %q: %s", e.Reason, secret, e.raw)
					}
				}
			}
			if len(f) != 1 || f[0].Annotations[podevent.FailureAnnotation] != tc.class {
				t.Fatalf("failed Events %+v, want one of class %s", f, tc.class)
			}
			last := strings.Split(strings.TrimSpace(tc.console), "\n")
			if l := last[len(last)-1]; !strings.Contains(f[0].Message, cleanConsoleLine(l)) && tc.class != podevent.FailureNotReady {
				t.Errorf("message lacks the console's last line %q: %q", l, f[0].Message)
			}
			for _, w := range tc.says {
				if !strings.Contains(f[0].Message, w) {
					t.Errorf("message lacks %q: %q", w, f[0].Message)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(f[0].Message, w) {
					t.Errorf("message holds %q: %q", w, f[0].Message)
				}
			}
			// Only a booted podVM the agent of which was never reached is
			// probed, once, at the forwarder's port.
			if wantProbe := tc.class == podevent.FailureAgentUnreachable || tc.class == podevent.FailureAdaptor; wantProbe != (len(probed) == 1) || wantProbe && !strings.HasSuffix(probed[0], ":15150") {
				t.Errorf("probes %q", probed)
			}
			if tc.class == podevent.FailureNotReady && (!strings.Contains(f[0].Message, "EXT4-fs error") || !strings.Contains(f[0].Message, "last words") || !strings.Contains(f[0].Message, "secret=[redacted]")) {
				t.Errorf("message: %q", f[0].Message)
			}
		})
	}
}

func TestRefusedCreateIsToldOnce(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, nil)
	spec := oneT4
	spec.Image = "projects/other/global/images/x"
	for range 2 {
		if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), spec); err == nil {
			t.Fatal("a foreign image was accepted")
		}
	}
	_ = p.Teardown()
	evs := api.list()
	if len(evs) != 1 || evs[0].Reason != podevent.ReasonFailed || evs[0].Annotations[podevent.FailureAnnotation] != podevent.FailureNotAllowed || !strings.Contains(evs[0].Message, "GCP_ALLOWED_IMAGES") {
		t.Errorf("Events: %+v", evs)
	}
	if n := fake.CountCalls("instances.insert"); n != 0 {
		t.Errorf("%d inserts", n)
	}
}

func TestEventsNeverHoldACreate(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	release := make(chan struct{})
	api.block = release
	p := newEventProvider(t, fake, api, io.Discard, nil)
	// The API server answers nothing until release: the create must
	// finish without it.
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	close(release)
}

func TestRedactConsoleLine(t *testing.T) {
	for in, want := range map[string]string{
		"Started kata-agent.service - Kata Containers agent.":                       "Started kata-agent.service - Kata Containers agent.",
		"password=s3cret and more":                                                  "password=[redacted] and more",
		`"api_key": "abc"`:                                                          `"api_key": [redacted]`,
		"Authorization: Bearer eyJhbGciOi.J9x":                                      "Authorization: [redacted]",
		"ud=I2Nsb3VkLWNvbmZpZwp3cml0ZV9maWxlczoKLSBwYXRoOiAvcnVuL3BlZXJwb2QvYXBm.":  "[redacted].",
		"sha256:4f9c2d0e8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e": "sha256:4f9c2d0e8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e",
	} {
		inPEM := false
		if got := redactConsoleLine(in, &inPEM); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConsoleReaderFollowsGCEPositions(t *testing.T) {
	var c consoleReader
	lines := c.feed(0, 10, "one\ntwo\nth")
	lines = append(lines, c.feed(10, 16, "ree\nfo")...)
	// Output between 16 and 100 was overwritten: the partial line is lost.
	lines = append(lines, c.feed(100, 110, "ur\nfive\n")...)
	var got []string
	for _, l := range lines {
		got = append(got, l.text)
	}
	if want := []string{"one", "two", "three", "ur", "five"}; !slices.Equal(got, want) || !c.lost || c.next != 110 {
		t.Errorf("lines %q lost %v next %d", got, c.lost, c.next)
	}
}

func TestStoppedPodVMIsTold(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	fake.SetBootConsole(func(string, *computepb.Instance) string { return "[    2.1] systemd[1]: Mounting sysroot.mount\n" })
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, nil)
	p.bootPoll = time.Hour // one read at once, then none until the delete
	ctx := context.Background()
	inst, err := p.CreateInstance(ctx, "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the watch's first read to be taken in (a hang guard, not
	// a timing assertion).
	p.mu.Lock()
	w := p.watches[inst.Name]
	p.mu.Unlock()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		read := w.console.next > 0
		w.mu.Unlock()
		if read {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the boot watch never read the console")
		}
	}
	// The guest powers its VM off (its boot failed before it could say
	// why, or Spot took it): GCE answers no console for it any more.
	fake.PowerOff("us-central1-a", inst.Name)
	if err := p.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	_ = p.Teardown()
	var f []storedEvent
	for _, e := range api.list() {
		if e.Reason == podevent.ReasonFailed {
			f = append(f, e)
		}
	}
	if len(f) != 1 || f[0].Annotations[podevent.FailureAnnotation] != podevent.FailureStopped || !strings.Contains(f[0].Message, "TERMINATED") || !strings.Contains(f[0].Message, "Mounting sysroot.mount") {
		t.Fatalf("failed Events %+v", f)
	}
}

// rawHidden is the first character in s a terminal acts on or hides (C0
// and C1 controls but the newline, DEL, bidi marks, overrides and
// isolates, zero-width and format characters), spelled out here so that
// the test checks hidden rather than repeats it.
func rawHidden(s string) (rune, bool) {
	for _, r := range s {
		switch {
		case r == '\n':
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x061c, r == 0x200b, r == 0x200e, r == 0x200f, r == 0x2060, r == 0xfeff,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return r, true
		}
	}
	return 0, false
}

// TestGPUFailureEventCarriesNoRawControl: gpu-init's failure line is
// JSON, whose strings may carry escapes (\u001b) that decode to raw
// controls; the failed Event's message and annotations, and the
// adaptor's log, carry none of them raw, and show them escaped.
func TestGPUFailureEventCarriesNoRawControl(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	var logs bytes.Buffer
	var logMu sync.Mutex
	p := newEventProvider(t, fake, api, lockedWriter{&logs, &logMu}, nil)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	bad := `\u001b]52;c;ZXZpbA==\u0007\u001b[2J\u202e\u200b\u2060\u009b`
	fake.SetSerialOutput("us-central1-a", inst.Name, consoleline.GPUPrefix+`{"state":"failed","step":"modprobe`+bad+`","reason":"no device`+bad+`","driver":"550`+bad+`"}`+"\n")
	var f storedEvent
	for _, e := range api.waitEvents(t, "failed", hasReason(podevent.ReasonFailed)) {
		if e.Reason == podevent.ReasonFailed {
			f = e
		}
	}
	if r, ok := rawHidden(f.Message); ok {
		t.Errorf("the failed Event's message carries a raw %U: %q", r, f.Message)
	}
	for k, v := range f.Annotations {
		if r, ok := rawHidden(v); ok {
			t.Errorf("annotation %s carries a raw %U: %q", k, r, v)
		}
	}
	if !strings.Contains(f.Message, "gpu-init failed at modprobe]52;c;ZXZpbA==: no device") {
		t.Errorf("the step and reason are not in the message with their controls and escapes dropped: %q", f.Message)
	}
	_ = p.Teardown()
	logMu.Lock()
	defer logMu.Unlock()
	if r, ok := rawHidden(logs.String()); ok {
		t.Errorf("the adaptor's log carries a raw %U:\n%q", r, logs.String())
	}
}

// TestEventTextEscapesHidden: eventText escapes every hidden character
// visibly, keeps a message's newlines and nothing else of them.
func TestEventTextEscapesHidden(t *testing.T) {
	for _, c := range []struct {
		in        string
		multiline bool
		want      string
	}{
		{"ok ×", false, "ok ×"},
		{"a\x1b]52;c;x\x07\x1b[2J\u202e\u200b\x7f\u0085\xff", false, `a\x1b]52;c;x\x07\x1b[2J\u202e\u200b\x7f\x85\xff`},
		{"one\ntwo\r", true, `one` + "\n" + `two\x0d`},
		{"one\ntwo", false, `one\x0atwo`},
	} {
		if got := eventText(c.in, c.multiline); got != c.want {
			t.Errorf("eventText(%q, %v) = %q, want %q", c.in, c.multiline, got, c.want)
		}
	}
}

// TestRedactConsolePatterns: each form a secret takes on a console line
// is masked, and what looks like one but is not (a prefix inside a word,
// a path, a digest) is kept.
func TestRedactConsolePatterns(t *testing.T) {
	gh := "ghp_" + strings.Repeat("aB3", 12)
	for _, c := range []struct{ name, in, want string }{
		{"ghp_", "clone with " + gh + " now", "clone with [redacted] now"},
		{"gho_ in a URL", "https://x:gho_" + strings.Repeat("Z9y", 12) + "@github.com/o/r", "https://x:[redacted]@github.com/o/r"},
		{"github_pat_", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "[redacted]"},
		{"glpat-", "glpat-xxxxXXXX1234_-abcdEF", "[redacted]"},
		{"xoxb-", "slack xoxb-123456789012-abcdefABC", "slack [redacted]"},
		{"AKIA", "aws AKIAIOSFODNN7EXAMPLE done", "aws [redacted] done"},
		{"AIza", "key AIzaSyA1234567890abcdefghijklmnopqrstu end", "key [redacted] end"},
		{"ya29.", "ya29.a0AfH6SMBx1234567890abcdef_-XYZ", "[redacted]"},
		{"prefix inside a word", "myghp_" + strings.Repeat("a", 36), "myghp_" + strings.Repeat("a", 36)},
		{"base64 with a slash", "secret-ish wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY ok", "secret-ish [redacted] ok"},
		{"long base64 with slashes", "user-data: I2Nsb3VkLWNvbmZpZwp3cml0ZV9/maWxlczoKLSBwYXRoOiAv/cnVuL3BlZXJwb2QvYXBm.", "user-data: [redacted]."},
		{"--password X", "run --password hunter2 --verbose", "run --password [redacted] --verbose"},
		{"--password=X", "run --password=hunter2", "run --password=[redacted]"},
		{"-token X quoted", `cli -token "a b" next`, `cli -token [redacted] next`},
		{"password: X", "password: hunter2", "password: [redacted]"},
		{"token=X", "url?token=abc/def&x=1", "url?token=[redacted]"},
		{"a path is kept", "/opt/NVIDIA/Driver550/Firmware/gsp/Ga10xTu10x", "/opt/NVIDIA/Driver550/Firmware/gsp/Ga10xTu10x"},
		{"a digest is kept", "sha256:4f9c2d0e8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e", "sha256:4f9c2d0e8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e"},
	} {
		inPEM := false
		if got := redactConsoleLine(c.in, &inPEM); got != c.want {
			t.Errorf("%s: redact(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// TestConsolePrefixOnlyAtLineStart: a line is the image's report only
// when its prefix starts it, after the kernel's time at most; the prefix
// further in (a program echoing one) decides nothing.
func TestConsolePrefixOnlyAtLineStart(t *testing.T) {
	boot := consoleline.BootFailedPrefix + `{"stage":"initrd"}`
	gpu := consoleline.GPUPrefix + `{"state":"failed","step":"x","reason":"y"}`
	for _, c := range []struct {
		line    string
		failure string
		gpu     bool
	}{
		{boot, podevent.FailureBoot, false},
		{"[   12.345678] " + boot, podevent.FailureBoot, false},
		{"\x1b[0;31m" + boot, podevent.FailureBoot, false},
		{"workload: echo " + boot, "", false},
		{"[   12.3] sh[1]: " + boot, "", false},
		{" " + boot, "", false},
		{"tenant says " + consoleline.CDHFailedPrefix + "{}", "", false},
		{gpu, "", true},
		{"[    3.100000] " + gpu, "", true},
		{"log: " + gpu, "", false},
	} {
		l := parseConsoleLine(c.line)
		if l.failure != c.failure || (l.gpu != nil) != c.gpu {
			t.Errorf("%q: failure %q gpu %v, want %q %v", c.line, l.failure, l.gpu != nil, c.failure, c.gpu)
		}
	}
}

// TestGPUFailureReasonIsRedacted: gpu-init's step, reason and driver are
// redacted as fields, not only as the line: a token in its reason, and a
// password given as a flag, reach neither the failed Event nor the
// adaptor's log; a driver that is no version is not annotated.
func TestGPUFailureReasonIsRedacted(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	var logs bytes.Buffer
	var logMu sync.Mutex
	p := newEventProvider(t, fake, api, lockedWriter{&logs, &logMu}, nil)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	token := "ghp_" + strings.Repeat("Q7w", 12)
	line := consoleline.GPUPrefix + `{"state":"failed","step":"fetch --password hunter2","reason":"pull with ` + token + ` refused","driver":"550 ` + token + `"}`
	fake.SetSerialOutput("us-central1-a", inst.Name, line+"\n")
	var f storedEvent
	for _, e := range api.waitEvents(t, "failed", hasReason(podevent.ReasonFailed)) {
		if e.Reason == podevent.ReasonFailed {
			f = e
		}
	}
	all := f.Message + fmt.Sprint(f.Annotations)
	if strings.Contains(all, token) || strings.Contains(all, "hunter2") || strings.Contains(all, "Q7wQ7w") {
		t.Errorf("the failed Event carries a secret: %q %v", f.Message, f.Annotations)
	}
	if !strings.Contains(f.Message, "gpu-init failed at fetch --password [redacted]: pull with [redacted] refused") {
		t.Errorf("the Event's step and reason, redacted, are not there: %q", f.Message)
	}
	_ = p.Teardown()
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), token) || strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the adaptor's log carries a secret:\n%s", logs.String())
	}
	r := parseConsoleLine(line).gpu
	if r == nil || r.Driver != "" {
		t.Errorf("a driver that is no version is kept: %+v", r)
	}
	if r := parseConsoleLine(gpuReadyLine).gpu; r == nil || r.Driver != "550.163.01" {
		t.Errorf("a driver version is not kept: %+v", r)
	}
}

// The cache disk's console line (podvm-cache-store, before CDH) is told on
// the pod once: in use, not used at all (dm-verity refused the disk), or
// its store missed. The line is input: a state it does not print drops
// it, an unknown miss is "other", and its reason is redacted and cut.
func TestCacheDiskLineToldOnThePod(t *testing.T) {
	for _, tc := range []struct {
		name, line  string
		warn        bool
		state, miss string
		says, never []string
	}{
		{name: "in use", line: `CAA-GCP-T4-STORE {"state":"in-use","images":2,"layers":7,"integrity":"dm-verity","verified_ms":0}`,
			state: "in-use", says: []string{"pre-unpacked images are in use (2, read through dm-verity)"}},
		{name: "verity refused", line: `CAA-GCP-T4-STORE {"state":"unused","miss":"verity-refused","reason":"the cache disk does not match the configured root hash 0f3a5b7c9d1e… (another disk, or one changed since gcp-t4 cache build): reading /dev/mapper/caa-gcp-t4-cache: input/output error","fallback":"x"}`,
			warn: true, state: "unused", miss: "verity-refused", says: []string{"cache disk is not used (verity-refused)", "does not match the configured root hash", "GCP_CACHE_VERITY", "come from their registries"}},
		{name: "no verity", line: `[   12.5] CAA-GCP-T4-STORE {"state":"unused","miss":"no-verity","reason":"the podVM has a cache disk but its metadata has no caa-gcp-t4-cache-verity"}`,
			warn: true, state: "unused", miss: "no-verity", says: []string{"(no-verity)"}},
		{name: "layout only", line: `CAA-GCP-T4-STORE {"state":"unused","miss":"no-store","reason":"the disk holds no pre-unpacked store"}`,
			state: "unused", miss: "no-store", says: []string{"are not used (no-store)", "cache mirror"}},
		{name: "forged miss and secret", line: `CAA-GCP-T4-STORE {"state":"unused","miss":"\u001b[31mall-good","reason":"token=hunter2 \u202e` + strings.Repeat("x", 400) + `"}`,
			warn: true, state: "unused", miss: "other", never: []string{"hunter2", "\u202e", "all-good", strings.Repeat("x", 301)}},
		{name: "unknown state", line: `CAA-GCP-T4-STORE {"state":"great","images":9}`},
		{name: "quoted, not at a line's start", line: `echo CAA-GCP-T4-STORE {"state":"in-use","images":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, api, p, inst := oneT4Pod(t)
			// The line, then gpu-init's: the boot's Event shows the line
			// was read; the same line again is not told twice.
			fake.SetSerialOutput("us-central1-a", inst.Name, tc.line+"\n"+tc.line+"\n"+gpuReadyLine+"\n")
			api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
			api.sandboxReady("ml", "llm-0")
			api.waitEvents(t, "reachable", hasReason(podevent.ReasonReachable))
			if err := p.Teardown(); err != nil {
				t.Fatal(err)
			}
			var c []storedEvent
			for _, e := range api.list() {
				if e.Reason == podevent.ReasonCache {
					c = append(c, e)
				}
			}
			if tc.state == "" {
				if len(c) != 0 {
					t.Fatalf("a line podvm-cache-store does not print was told: %+v", c)
				}
				return
			}
			if len(c) != 1 {
				t.Fatalf("%d %s Events, want 1: %v", len(c), podevent.ReasonCache, reasons(api.list()))
			}
			e := c[0]
			if (e.Type == "Warning") != tc.warn || e.Annotations[eventCacheStateAnnotation] != tc.state || e.Annotations[eventCacheMissAnnotation] != tc.miss ||
				e.Labels[podevent.PhaseLabel] != podevent.PhaseCache || e.Labels[podevent.PodVMLabel] != inst.Name {
				t.Errorf("Event %s %v %v, want warning %v, state %q, miss %q", e.Type, e.Labels, e.Annotations, tc.warn, tc.state, tc.miss)
			}
			for _, w := range tc.says {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q lacks %q", e.Message, w)
				}
			}
			for _, w := range tc.never {
				if bytes.Contains(e.raw, []byte(w)) {
					t.Errorf("Event carries %q: %s", w, e.raw)
				}
			}
		})
	}
}

// The GPUs gpu-init finds are held to those the VM was created with: the
// same count boots Normal; another count, or none, boots with a Warning
// that says the pod does not get what it asked for.
func TestBootedGPUsMatchTheShape(t *testing.T) {
	for _, tc := range []struct {
		name, line, typ, want string
	}{
		{"same", gpuReadyLine, "Normal", "GPU ready: 1 GPU(s)"},
		{"more", strings.Replace(gpuReadyLine, `"gpus":1`, `"gpus":2`, 1), "Warning", "GPU ready: 2 GPU(s), NVIDIA driver 550.163.01 (gpu-init took 2.3s), "},
		{"none", `CAA-GCP-T4-GPU {"state":"no-gpu","gpus":0,"elapsed_ms":300}`, "Warning", "booted without a GPU, "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, api, p, inst := oneT4Pod(t)
			t.Cleanup(func() { _ = p.Teardown() })
			fake.SetSerialOutput("us-central1-a", inst.Name, tc.line+"\n")
			evs := api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
			b := evs[len(evs)-1]
			mismatch := strings.Contains(b.Message, "but the podVM was created with 1 GPU(s)")
			if b.Type != tc.typ || !strings.Contains(b.Message, tc.want) || mismatch != (tc.typ == "Warning") {
				t.Errorf("booted: %s %q, want %s with %q", b.Type, b.Message, tc.typ, tc.want)
			}
		})
	}
}

// A podVM that stops after its agent was reached is lost, not failed: the
// pod was running, and the watch that follows its containers must not
// read GCE's "no console of a stopped VM" as a boot that powered itself
// off (the node harness saw PodVMFailed 2 s after such a stop, before
// the right PodVMLost). The watch stops reading the console instead.
func TestStoppedAfterReachIsNotAFailedBoot(t *testing.T) {
	fake, api, p, inst := oneT4Pod(t)
	ctx := context.Background()
	fake.SetSerialOutput("us-central1-a", inst.Name, gpuReadyLine+"\n")
	api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
	api.sandboxReady("ml", "llm-0")
	api.waitEvents(t, "reachable", hasReason(podevent.ReasonReachable))
	p.mu.Lock()
	w := p.watches[inst.Name]
	p.mu.Unlock()
	fake.PowerOff("us-central1-a", inst.Name)
	// What the watch's next console read does: GCE answers
	// resourceNotReady for a stopped VM.
	p.consoleGone(ctx, w)
	if !w.isNoConsole() || w.isFailed() {
		t.Errorf("after a stop past the agent: noConsole %v, failed %v; want the console left, no failure", w.isNoConsole(), w.isFailed())
	}
	_ = p.Teardown()
	for _, e := range api.list() {
		if e.Reason == podevent.ReasonFailed {
			t.Errorf("a podVM stopped after its agent was reached is told failed: %q", e.Message)
		}
	}
}
