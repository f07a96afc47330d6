// Package timelinetest writes start-up Events exactly as the gcp-t4
// provider does (src/cloud-providers/gcpt4/podevent and podevents.go: name, labels,
// annotations, reason, source, timestamps), built from the provider's
// exported constants, so that the readers' tests (`gcp-t4 status`, the
// reaper's metrics) meet on a real API server what a cluster holds. Only
// tests import it.
package timelinetest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// Node is the host the Events' source names, as an adaptor's would.
const Node = "gke-peer-pool-1"

// Key is the signing key the Events here are signed with, as the
// adaptor's would be (eventsig); InstallKey puts it where readers look.
func Key() []byte { return bytes.Repeat([]byte("timelinetest-key"), 2) }

// InstallKey writes Key as the adaptor's signing key Secret in namespace.
func InstallKey(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	_, err := cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: eventsig.SecretName, Namespace: namespace},
		Data:       map[string][]byte{eventsig.SecretKey: Key()},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("installing the Event signing key in %s: %w", namespace, err)
	}
	return nil
}

// Event is one phase of one podVM, as the provider records it.
type Event struct {
	Namespace, Pod string
	// PodUID is the pod's UID the Event names; "" when the provider could
	// not read the pod.
	PodUID string
	PodVM  string
	Phase  string
	// At is when the phase happened (its last time, for a repeat).
	At time.Time
	// First is when a repeated phase first happened; zero: At.
	First time.Time
	// Count is how often the phase happened (stockouts repeat); 0 is 1.
	Count   int
	Message string
	// Facts are the annotations (gcpt4.Event…Annotation) besides the time.
	Facts map[string]string
}

// Object is the core/v1 Event the provider writes for e.
func (e Event) Object() *corev1.Event {
	ann := map[string]string{podevent.AtAnnotation: e.At.UTC().Format(time.RFC3339Nano)}
	for k, v := range e.Facts {
		if v != "" {
			ann[k] = v
		}
	}
	typ := corev1.EventTypeNormal
	switch e.Phase {
	case podevent.PhaseStockout, podevent.PhaseQuota, podevent.PhaseFailed, podevent.PhaseLost:
		typ = corev1.EventTypeWarning
	}
	first := e.First
	if first.IsZero() {
		first = e.At
	}
	count := max(e.Count, 1)
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("podVM %s: %s", e.PodVM, e.Phase)
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        podevent.Name(e.Pod, e.PodVM, e.Phase),
			Namespace:   e.Namespace,
			Labels:      map[string]string{podevent.PhaseLabel: e.Phase, podevent.PodVMLabel: gcpt4.LabelValue(e.PodVM)},
			Annotations: ann,
		},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: e.Namespace, Name: e.Pod, UID: types.UID(e.PodUID)},
		Reason:         podevent.PhaseReason(e.Phase),
		Message:        msg,
		Type:           typ,
		Source:         corev1.EventSource{Component: podevent.Component, Host: Node},
		// The provider writes whole seconds here (RFC 3339); the
		// annotation carries the nanoseconds.
		FirstTimestamp: metav1.NewTime(first.UTC().Truncate(time.Second)),
		LastTimestamp:  metav1.NewTime(e.At.UTC().Truncate(time.Second)),
		Count:          int32(count),
	}
	sign(ev)
	return ev
}

func sign(ev *corev1.Event) {
	ev.Annotations[eventsig.SignatureAnnotation] = eventsig.Sign(Key(), eventsig.Fields{Namespace: ev.Namespace, Name: ev.Name,
		Kind: ev.InvolvedObject.Kind, Object: ev.InvolvedObject.Name, ObjectUID: string(ev.InvolvedObject.UID), Reason: ev.Reason,
		Type: ev.Type, Message: ev.Message, Labels: ev.Labels, Annotations: ev.Annotations})
}

// Record writes each Event as the provider does: created, or, for a phase
// already posted (a stockout in another zone), updated with its count,
// time and the zones seen so far.
func Record(ctx context.Context, cs kubernetes.Interface, events ...Event) error {
	for _, e := range events {
		obj := e.Object()
		_, err := cs.CoreV1().Events(e.Namespace).Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = repeat(ctx, cs, obj)
		}
		if err != nil {
			return fmt.Errorf("recording %s of podVM %s on pod %s/%s: %w", e.Phase, e.PodVM, e.Namespace, e.Pod, err)
		}
	}
	return nil
}

func repeat(ctx context.Context, cs kubernetes.Interface, obj *corev1.Event) error {
	cur, err := cs.CoreV1().Events(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	zones := strings.Split(cur.Annotations[podevent.ZonesAnnotation], ",")
	for z := range strings.SplitSeq(obj.Annotations[podevent.ZonesAnnotation], ",") {
		if z != "" && !containsString(zones, z) {
			zones = append(zones, z)
		}
	}
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	maps.Copy(cur.Annotations, obj.Annotations)
	if z := strings.Trim(strings.Join(zones, ","), ","); z != "" {
		cur.Annotations[podevent.ZonesAnnotation] = z
	}
	cur.Count++
	cur.Message = obj.Message
	cur.LastTimestamp = obj.LastTimestamp
	sign(cur)
	_, err = cs.CoreV1().Events(obj.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Startup is a podVM's whole start-up from the phases given, each offset
// from start, with the shape facts every phase that knows them carries.
type Startup struct {
	Namespace, Pod, PodUID, PodVM string
	Start                         time.Time
	// Shape: on requested and created.
	Zone, MachineType, GPU, GPUCount, Model, Price string
}

// Phase is one phase of s, at start+after, with facts beyond the shape.
func (s Startup) Phase(phase string, after time.Duration, facts map[string]string) Event {
	f := map[string]string{}
	switch phase {
	case podevent.PhaseRequested, podevent.PhaseCreated:
		maps.Copy(f, map[string]string{
			podevent.ZoneAnnotation: s.Zone, podevent.MachineTypeAnnotation: s.MachineType,
			podevent.GPUAnnotation: s.GPU, podevent.GPUCountAnnotation: s.GPUCount,
			podevent.ProvisioningModelAnnotation: s.Model, podevent.PriceAnnotation: s.Price,
		})
	case podevent.PhaseStockout:
		maps.Copy(f, map[string]string{podevent.MachineTypeAnnotation: s.MachineType, podevent.GPUAnnotation: s.GPU,
			podevent.GPUCountAnnotation: s.GPUCount, podevent.ProvisioningModelAnnotation: s.Model})
	}
	maps.Copy(f, facts)
	return Event{Namespace: s.Namespace, Pod: s.Pod, PodUID: s.PodUID, PodVM: s.PodVM, Phase: phase, At: s.Start.Add(after), Facts: f}
}
