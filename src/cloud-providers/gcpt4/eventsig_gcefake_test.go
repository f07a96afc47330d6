// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// storedKey is the signing key the fake API server holds, or nil.
func (a *eventAPI) storedKey(t *testing.T) []byte {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, ok := a.secrets[eventNamespace+"/"+eventsig.SecretName]
	if !ok {
		return nil
	}
	b64, _ := obj["data"].(map[string]any)[eventsig.SecretKey].(string)
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// fieldsOf reads a stored Event as a reader of the API would.
func fieldsOf(t *testing.T, e storedEvent) eventsig.Fields {
	t.Helper()
	var obj struct {
		Metadata struct {
			Name, Namespace     string
			Labels, Annotations map[string]string
		}
		InvolvedObject struct{ Kind, Name, UID string }
		Reason, Type   string
		Message        string
	}
	if err := json.Unmarshal(e.raw, &obj); err != nil {
		t.Fatal(err)
	}
	return eventsig.Fields{Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name, Kind: obj.InvolvedObject.Kind,
		Object: obj.InvolvedObject.Name, ObjectUID: obj.InvolvedObject.UID, Reason: obj.Reason, Type: obj.Type,
		Message: obj.Message, Labels: obj.Metadata.Labels, Annotations: obj.Metadata.Annotations}
}

// Every start-up Event verifies under the key the first Event made,
// including a stockout's after its repeat patched it; an edit by anyone
// without the key does not.
func TestStartupEventsSigned(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.addPod("ml", "llm-0", "uid-1")
	p := newEventProvider(t, fake, api, io.Discard, func(c *Config) { c.FallbackZones = commaList{"us-central1-b", "us-central1-f"} })
	fake.SetStockout("us-central1-a", true)
	fake.SetStockout("us-central1-b", true)
	inst, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4)
	if err != nil {
		t.Fatal(err)
	}
	fake.SetSerialOutput("us-central1-f", inst.Name, gpuReadyLine+"\n")
	api.waitEvents(t, "booted", hasReason(podevent.ReasonBooted))
	if err := p.Teardown(); err != nil {
		t.Fatal(err)
	}
	// An adaptor restarted mid-create repeats the stockout: its patch of
	// the Event posted before keeps it signed.
	r2, err := newEventRecorder(api.clusterAPI(), "node-1", p.log)
	if err != nil {
		t.Fatal(err)
	}
	r2.record(podEvent{namespace: "ml", pod: "llm-0", podVM: inst.Name, phase: podevent.PhaseStockout, zone: "us-east1-c", warning: true, message: "again", at: time.Now()})
	r2.close(context.Background())
	key := api.storedKey(t)
	if !eventsig.ValidKey(key) {
		t.Fatalf("signing key %d bytes, want %d", len(key), eventsig.KeySize)
	}
	evs := api.list()
	for _, e := range evs {
		f := fieldsOf(t, e)
		if !eventsig.Verify(key, f) {
			t.Errorf("%s does not verify: %s", e.Reason, e.raw)
		}
		if e.Reason == podevent.ReasonStockout && (e.Count < 2 || !strings.HasSuffix(e.Annotations[podevent.ZonesAnnotation], ",us-east1-c")) {
			t.Errorf("stockout not repeated: count %d, %v", e.Count, e.Annotations)
		}
		// What a tenant with edit can change, each alone.
		for name, edit := range map[string]func(*eventsig.Fields){
			"failure annotation": func(f *eventsig.Fields) {
				f.Annotations = with(f.Annotations, podevent.FailureAnnotation, podevent.FailureGPU)
			},
			"time": func(f *eventsig.Fields) {
				f.Annotations = with(f.Annotations, podevent.AtAnnotation, "2099-01-01T00:00:00Z")
			},
			"namespace":   func(f *eventsig.Fields) { f.Namespace = "other" },
			"name":        func(f *eventsig.Fields) { f.Name += "x" },
			"pod":         func(f *eventsig.Fields) { f.Object = "llm-1" },
			"message":     func(f *eventsig.Fields) { f.Message += "!" },
			"podVM label": func(f *eventsig.Fields) { f.Labels = with(f.Labels, podevent.PodVMLabel, "podvm-other") },
		} {
			g := fieldsOf(t, e)
			edit(&g)
			if eventsig.Verify(key, g) {
				t.Errorf("%s verifies after its %s was changed", e.Reason, name)
			}
		}
		// Labels and annotations outside the schema are not facts.
		g := fieldsOf(t, e)
		g.Annotations = with(g.Annotations, "example.com/note", "x")
		if !eventsig.Verify(key, g) {
			t.Errorf("%s: an annotation outside the schema broke its signature", e.Reason)
		}
	}
	if len(evs) < 4 {
		t.Fatalf("Events %v", reasons(evs))
	}
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for kk, vv := range m {
		if kk != k {
			out[kk] = vv
		}
	}
	return out
}

// A key another adaptor made first is read and used; a malformed one is
// left alone (the Events go unsigned) with a log line that says how to
// replace it.
func TestEventKeyFromSecret(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    []byte
		signed bool
	}{
		{"another adaptor's", bytes.Repeat([]byte{7}, eventsig.KeySize), true},
		{"malformed", []byte("short"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := gcefake.New()
			t.Cleanup(fake.Close)
			api := newEventAPI(t)
			api.secrets[eventNamespace+"/"+eventsig.SecretName] = map[string]any{"metadata": map[string]any{"name": eventsig.SecretName},
				"data": map[string]any{eventsig.SecretKey: base64.StdEncoding.EncodeToString(tc.key)}}
			api.addPod("ml", "llm-0", "uid-1")
			var logs bytes.Buffer
			p := newEventProvider(t, fake, api, &logs, nil)
			if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4); err != nil {
				t.Fatal(err)
			}
			evs := api.waitEvents(t, "created", hasReason(podevent.ReasonCreated))
			if err := p.Teardown(); err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if got := eventsig.Verify(tc.key, fieldsOf(t, e)); got != tc.signed {
					t.Errorf("%s verifies %v, want %v", e.Reason, got, tc.signed)
				}
			}
			if !bytes.Equal(api.storedKey(t), tc.key) {
				t.Error("the Secret was replaced")
			}
			if !tc.signed && (!strings.Contains(logs.String(), "kubectl -n "+eventNamespace+" delete secret "+eventsig.SecretName) ||
				strings.Count(logs.String(), "go unsigned") != 1) {
				t.Errorf("log: %s", logs.String())
			}
		})
	}
}

// RBAC refusing the Secret leaves Events flowing, unsigned, said once.
func TestEventKeyRefused(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	api := newEventAPI(t)
	api.secretStatus = http.StatusForbidden
	api.addPod("ml", "llm-0", "uid-1")
	var logs bytes.Buffer
	p := newEventProvider(t, fake, api, &logs, nil)
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, podCloudConfig("ml", "llm-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	evs := api.waitEvents(t, "created", hasReason(podevent.ReasonCreated))
	if err := p.Teardown(); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if _, ok := e.Annotations[eventsig.SignatureAnnotation]; ok {
			t.Errorf("%s signed without a key", e.Reason)
		}
	}
	if strings.Count(logs.String(), "go unsigned") != 1 || !strings.Contains(logs.String(), "needs get on it") {
		t.Errorf("log: %s", logs.String())
	}
}
