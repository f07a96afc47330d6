// Package startupevents reads the start-up Events the gcp-t4 provider
// records on pods, as facts: each is verified against the signing key in
// the adaptor's namespace (eventsig) before anything counts, costs or
// times it, and the listing is bounded in pages, in Events and in what is
// kept of each, since tenants can write Events of any size and number.
// The reaper's metrics and `gcp-t4 status` read them through here.
package startupevents

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// Bounds of one listing.
const (
	// PageSize is the Events asked for per request. An Event may be up to
	// etcd's 1.5 MiB object limit and a tenant can make them so: a page of
	// 10 peaked at 95 MB of heap against 60 forged 1 MB Events, 25 at
	// 138 MB, within and near the reaper's 192 MiB memory limit
	// (docs/benchmarks.md, "Forged start-up Events"). Ordinary Events are
	// about 1 kB, so the extra requests cost little.
	PageSize = 10
	// MaxEvents stops a listing: far above what one cluster's peer pods
	// record in the API server's --event-ttl (8 phases a podVM), far below
	// what would hold the reaper's memory.
	MaxEvents = 20000
	// maxMessage is what is kept of a message: the provider writes at most
	// 4 KiB (gcpt4's maxEventMessage).
	maxMessage = 4096
	// maxSamples is how many unverified Events a Result names.
	maxSamples = 5
)

// ErrNoKey: the signing key's Secret does not exist, so no Event has been
// signed yet (the adaptor makes it when it first records an Event).
var ErrNoKey = errors.New("no start-up Event has been signed yet: the adaptor makes its signing key when it first records one")

// Key reads the signing key from the Secret eventsig.SecretName in
// namespace (the adaptor's).
func Key(ctx context.Context, cs kubernetes.Interface, namespace string) ([]byte, error) {
	if namespace == "" {
		return nil, errors.New("the adaptor's namespace is not known, so its signing key cannot be read")
	}
	s, err := cs.CoreV1().Secrets(namespace).Get(ctx, eventsig.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("secret %s/%s: %w", namespace, eventsig.SecretName, ErrNoKey)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the start-up Events' signing key, secret %s/%s (needs RBAC get on it): %w", namespace, eventsig.SecretName, err)
	}
	key := s.Data[eventsig.SecretKey]
	if !eventsig.ValidKey(key) {
		return nil, fmt.Errorf("secret %s/%s holds a %q of %d bytes, not %d: delete it and restart the adaptor (kubectl -n %s rollout restart daemonset), which makes a new one",
			namespace, eventsig.SecretName, eventsig.SecretKey, len(key), eventsig.KeySize, namespace)
	}
	return key, nil
}

// KeySource reads the key once it exists and keeps it: the adaptor never
// replaces it while running (docs/threat-model.md says how to rotate).
type KeySource struct {
	Client    kubernetes.Interface
	Namespace string

	mu  sync.Mutex
	key []byte
}

// Get is the key, read now if not yet had.
func (k *KeySource) Get(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	key, err := Key(ctx, k.Client, k.Namespace)
	if err != nil {
		return nil, err
	}
	k.key = key
	return key, nil
}

// FieldsOf is what a signature covers of ev.
func FieldsOf(ev *corev1.Event) eventsig.Fields {
	return eventsig.Fields{Namespace: ev.Namespace, Name: ev.Name, Kind: ev.InvolvedObject.Kind, Object: ev.InvolvedObject.Name,
		ObjectUID: string(ev.InvolvedObject.UID), Reason: ev.Reason, Type: ev.Type, Message: ev.Message,
		Labels: ev.Labels, Annotations: ev.Annotations}
}

// Sign signs ev in place (the reaper's own PodVMLost Events).
func Sign(key []byte, ev *corev1.Event) {
	if ev.Annotations == nil {
		ev.Annotations = map[string]string{}
	}
	delete(ev.Annotations, eventsig.SignatureAnnotation)
	ev.Annotations[eventsig.SignatureAnnotation] = eventsig.Sign(key, FieldsOf(ev))
}

// Result is one listing.
type Result struct {
	// Events are the verified ones, trimmed to what a reader uses.
	Events []corev1.Event
	// Unverified counts the Events that carry the phase label but no valid
	// signature: a tenant's, an edited one, or one written before the
	// adaptor had its key.
	Unverified int
	// Samples name a few unverified Events (namespace/name, made safe to
	// print).
	Samples []string
	// Truncated: the listing stopped at MaxEvents.
	Truncated bool
}

// List lists the start-up Events in namespace ("" for all) matching opts
// (its label selector is set to the phase label; a field selector is
// kept), verifies each with key (nil: none verifies) and keeps the
// verified ones, page by page.
func List(ctx context.Context, cs kubernetes.Interface, namespace string, opts metav1.ListOptions, key []byte) (Result, error) {
	var res Result
	opts.LabelSelector = podevent.PhaseLabel
	opts.Limit = PageSize
	seen := 0
	for {
		list, err := cs.CoreV1().Events(namespace).List(ctx, opts)
		if err != nil {
			return res, fmt.Errorf("listing start-up Events (label %s) in %s (needs RBAC list on events): %w", podevent.PhaseLabel, where(namespace), err)
		}
		for i := range list.Items {
			ev := &list.Items[i]
			seen++
			if !eventsig.Verify(key, FieldsOf(ev)) {
				res.Unverified++
				if len(res.Samples) < maxSamples {
					res.Samples = append(res.Samples, termout.Clean(ev.Namespace+"/"+ev.Name))
				}
				continue
			}
			res.Events = append(res.Events, trim(ev))
		}
		if list.Continue == "" {
			return res, nil
		}
		if seen >= MaxEvents {
			res.Truncated = true
			return res, nil
		}
		opts.Continue = list.Continue
	}
}

// trim keeps of a verified Event what readers use: no managed fields, the
// schema's labels and annotations, the message cut to the provider's
// bound. The page it came from is then free to go.
func trim(ev *corev1.Event) corev1.Event {
	out := *ev
	out.ManagedFields = nil
	out.Labels = schema(ev.Labels)
	out.Annotations = schema(ev.Annotations)
	if len(out.Message) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(out.Message[cut]) {
			cut--
		}
		out.Message = out.Message[:cut]
	}
	out.Message = strings.Clone(out.Message)
	return out
}

func schema(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, "caa-gcp-t4/") {
			out[k] = v
		}
	}
	return out
}

func where(ns string) string {
	if ns == "" {
		return "every namespace"
	}
	return "namespace " + ns
}
