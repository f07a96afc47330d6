package startupevents

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline/timelinetest"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// List keeps the signed Events, trimmed to the schema, and counts and
// names (safely) the rest; without a key nothing is kept.
func TestListKeepsOnlySigned(t *testing.T) {
	cs := kubefake.NewClientset()
	s := timelinetest.Startup{Namespace: "ml", Pod: "llm-0", PodVM: "podvm-llm-0-00000000", Start: time.Now()}
	good := s.Phase(podevent.PhaseCreated, time.Second, nil).Object()
	good.Annotations["example.com/big"] = strings.Repeat("x", 1000)
	good.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "caa"}}
	// Annotations outside the schema are not signed: re-sign as CAA would.
	Sign(timelinetest.Key(), good)
	forged := s.Phase(podevent.PhaseFailed, 2*time.Second, map[string]string{podevent.FailureAnnotation: podevent.FailureGPU}).Object()
	forged.Name = "forged"
	delete(forged.Annotations, eventsig.SignatureAnnotation)
	for _, ev := range []*corev1.Event{good, forged} {
		if _, err := cs.CoreV1().Events("ml").Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := List(t.Context(), cs, "", metav1.ListOptions{}, timelinetest.Key())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 || res.Unverified != 1 || len(res.Samples) != 1 || res.Samples[0] != "ml/forged" || res.Truncated {
		t.Fatalf("result %+v", res)
	}
	kept := res.Events[0]
	if kept.ManagedFields != nil || kept.Annotations["example.com/big"] != "" || kept.Annotations[podevent.AtAnnotation] == "" {
		t.Errorf("kept Event not trimmed to the schema: %+v", kept.ObjectMeta)
	}
	res, err = List(t.Context(), cs, "", metav1.ListOptions{}, nil)
	if err != nil || len(res.Events) != 0 || res.Unverified != 2 {
		t.Errorf("without a key: %+v, %v", res, err)
	}
}

// Key reads the Secret, says when there is none yet, and refuses one of
// the wrong length with the fix.
func TestKey(t *testing.T) {
	cs := kubefake.NewClientset()
	if _, err := Key(t.Context(), cs, "caa"); err == nil || !strings.Contains(err.Error(), "no start-up Event has been signed yet") {
		t.Errorf("no Secret: %v", err)
	}
	if err := timelinetest.InstallKey(t.Context(), cs, "caa"); err != nil {
		t.Fatal(err)
	}
	if key, err := Key(t.Context(), cs, "caa"); err != nil || string(key) != string(timelinetest.Key()) {
		t.Errorf("key %q, %v", key, err)
	}
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: eventsig.SecretName, Namespace: "other"}, Data: map[string][]byte{eventsig.SecretKey: []byte("short")}}
	if _, err := cs.CoreV1().Secrets("other").Create(t.Context(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Key(t.Context(), cs, "other"); err == nil || !strings.Contains(err.Error(), "delete it and restart the adaptor") {
		t.Errorf("short key: %v", err)
	}
}
