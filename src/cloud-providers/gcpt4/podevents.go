// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/eventsig"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// A podVM's start-up, told on its pod. Between `kubectl apply` and a
// running pod the kubelet shows only ContainerCreating; what happens in
// between (the zones tried, the VM created, its boot, its GPU) is known
// here, inside CAA, and nowhere else. So the provider records one Event
// per phase on the pod, where `kubectl describe pod` and `kubectl get
// events` show it, and where `gcp-t4 status` and the reaper's metrics read
// it back through the labels and annotations below (the message is for
// people; tools read the annotations).
//
// It posts them itself, with one HTTPS request each and the pod's
// ServiceAccount, as the cluster ID check does (clusterid.go): this
// module carries no client-go, and an Event is one small object.

// The cache phase's facts (podevent.PhaseCache): eventCacheStateAnnotation
// is in-use or unused; the miss, when unused, is in
// eventCacheMissAnnotation (docs/cache.md's misses, or other).
const (
	eventCacheStateAnnotation = "caa-gcp-t4/cache-state"
	eventCacheMissAnnotation  = "caa-gcp-t4/cache-miss"
)

// repeats says whether a phase's Event is updated when it happens again
// (its count and message), rather than told once.
func repeats(phase string) bool {
	return phase == podevent.PhaseStockout || phase == podevent.PhaseLayers
}

// Bounds of the recorder: Events must never slow or block a create, and a
// burst of pods (a RayCluster scaling up) must not flood the API server,
// which also serves the kubelet. The kubelet's own recorder allows 50 per
// second (eventRecordQPS's default); one node's adaptor needs far fewer.
const (
	eventsPerSecond = 10
	eventBurst      = 50
	eventQueue      = 1024
	eventTimeout    = 10 * time.Second
	// maxEventMessage keeps an Event readable in `kubectl describe` and far
	// below the object size limit; a console tail is cut to fit.
	maxEventMessage = 4096
)

// podEvent is one phase of one podVM, as the create walk, the boot watch
// and the delete record it.
type podEvent struct {
	namespace, pod, podVM string
	phase                 string
	// part tells apart the Events of one phase of a podVM (the image
	// phase's container): one Event per phase and part.
	part        string
	warning     bool
	message     string
	at          time.Time
	annotations map[string]string
	// zone is appended to podevent.ZonesAnnotation for a repeated stockout.
	zone string
}

// eventRecorder posts podEvents as core/v1 Events, one worker in the
// background; record never blocks.
type eventRecorder struct {
	api    ClusterAPI
	client *http.Client
	log    *log.Logger
	node   string
	limit  *rate.Limiter
	queue  chan podEvent

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// Owned by the worker: what was posted per podVM and phase, and the
	// pods' UIDs (an Event names the pod incarnation it is about).
	posted map[string]*postedEvent
	uids   map[string]string

	// Owned by the worker: the Event signing key (eventsig), and when it
	// was last sought while missing.
	key       []byte
	keySought time.Time
	keyTold   bool

	mu      sync.Mutex
	closed  bool
	refused bool // RBAC refused an Event once: said, not repeated
}

// keyRetry spaces the attempts to read or create the signing key while
// it is missing: every Event until then goes unsigned (the reaper does
// not count it), and asking per Event would add a round trip to each.
const keyRetry = time.Minute

// schemaAnnotations are every annotation the provider writes on its
// Events. A repeated phase's merge patch names each (null when unset) so
// that the Event holds exactly what was signed.
var schemaAnnotations = []string{podevent.AtAnnotation, podevent.ZoneAnnotation, podevent.ZonesAnnotation, podevent.MachineTypeAnnotation,
	podevent.GPUAnnotation, podevent.GPUCountAnnotation, podevent.ProvisioningModelAnnotation, podevent.PriceAnnotation, podevent.IPAnnotation,
	podevent.QuotaMetricAnnotation, podevent.RegionAnnotation, podevent.DriverAnnotation, podevent.FailureAnnotation, podevent.CauseAnnotation}

type postedEvent struct {
	name  string
	count int
	zones []string
}

// newEventRecorder starts the worker. A nil recorder records nothing (no
// cluster API: tools, tests, peerpod-ctrl).
func newEventRecorder(api ClusterAPI, node string, logger *log.Logger) (*eventRecorder, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(api.CAPEM) {
		return nil, errors.New("the cluster's CA bundle holds no PEM certificate")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &eventRecorder{
		api: api,
		client: &http.Client{Timeout: eventTimeout, Transport: &http.Transport{
			Proxy:           http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
		log:    logger,
		node:   node,
		limit:  rate.NewLimiter(eventsPerSecond, eventBurst),
		queue:  make(chan podEvent, eventQueue),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		posted: map[string]*postedEvent{},
		uids:   map[string]string{},
	}
	go r.run()
	return r, nil
}

// record queues ev; a full queue drops it with a log line, never waits.
func (r *eventRecorder) record(ev podEvent) {
	if r == nil || ev.pod == "" || ev.namespace == "" {
		return
	}
	if ev.at.IsZero() {
		ev.at = time.Now()
	}
	// What an Event says reaches terminals (kubectl describe, gcp-t4
	// status) and may hold what a podVM printed or a pod was named: no
	// raw control, bidi or invisible character leaves here.
	ev.message = eventText(ev.message, true)
	if ev.annotations != nil {
		ann := make(map[string]string, len(ev.annotations))
		for k, v := range ev.annotations {
			ann[k] = eventText(v, false)
		}
		ev.annotations = ann
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.queue <- ev:
	default:
		r.log.Printf("pod %s/%s, podVM %s: Event queue full, dropped %s: %s", ev.namespace, ev.pod, ev.podVM, ev.phase, ev.message)
	}
}

// close posts what is queued, within ctx, and stops the worker.
func (r *eventRecorder) close(ctx context.Context) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel()
		<-r.done
	}
	r.cancel()
	r.client.CloseIdleConnections()
}

func (r *eventRecorder) run() {
	defer close(r.done)
	for ev := range r.queue {
		if ev.phase == "" {
			// A podVM is gone: forget it.
			for k := range r.posted {
				if strings.HasPrefix(k, ev.podVM+"/") {
					delete(r.posted, k)
				}
			}
			delete(r.uids, ev.podVM)
			continue
		}
		if err := r.limit.Wait(r.ctx); err != nil {
			continue
		}
		if err := r.post(r.ctx, ev); err != nil {
			r.mu.Lock()
			quiet := r.refused && errors.Is(err, errForbidden)
			if errors.Is(err, errForbidden) {
				r.refused = true
			}
			r.mu.Unlock()
			if !quiet {
				r.log.Printf("pod %s/%s, podVM %s: recording Event %s failed: %v", ev.namespace, ev.pod, ev.podVM, podevent.PhaseReason(ev.phase), err)
			}
		}
	}
}

var errForbidden = errors.New("forbidden")

// eventObject is the core/v1 Event the recorder writes (the fields it
// sets; the API server fills the rest).
type eventObject struct {
	APIVersion     string            `json:"apiVersion"`
	Kind           string            `json:"kind"`
	Metadata       eventMeta         `json:"metadata"`
	InvolvedObject objectReference   `json:"involvedObject"`
	Reason         string            `json:"reason"`
	Message        string            `json:"message"`
	Type           string            `json:"type"`
	Source         map[string]string `json:"source"`
	FirstTimestamp string            `json:"firstTimestamp"`
	LastTimestamp  string            `json:"lastTimestamp"`
	Count          int               `json:"count"`
}

type eventMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type objectReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// post writes ev: a new Event, or for a phase already posted (by this
// process or, found by its fixed name, an earlier one) an update of its
// count, message and annotations when the phase repeats.
func (r *eventRecorder) post(ctx context.Context, ev podEvent) error {
	phase := ev.phase
	if ev.part != "" {
		phase += "/" + ev.part
	}
	key := ev.podVM + "/" + phase
	name := podevent.Name(ev.pod, ev.podVM, phase)
	prev := r.posted[key]
	if prev != nil {
		if !repeats(ev.phase) {
			return nil
		}
		return r.repeat(ctx, ev, prev)
	}
	obj := r.object(ctx, ev, name, zonesOf(ev))
	status, body, err := r.do(ctx, http.MethodPost, r.eventsURL(ev.namespace, ""), "application/json", obj)
	if err != nil {
		return err
	}
	switch status {
	case http.StatusCreated, http.StatusOK:
		r.posted[key] = &postedEvent{name: name, count: 1, zones: zonesOf(ev)}
		return nil
	case http.StatusConflict:
		// Posted before this process started (or by a create retried
		// after a restart): one Event per phase, so update it, or leave
		// it for a phase that happens once.
		prev, err := r.existing(ctx, ev.namespace, name)
		if err != nil {
			return err
		}
		r.posted[key] = prev
		if !repeats(ev.phase) {
			return nil
		}
		return r.repeat(ctx, ev, prev)
	default:
		return statusError("creating Event "+name, status, body)
	}
}

// repeat records one more occurrence of a posted phase.
func (r *eventRecorder) repeat(ctx context.Context, ev podEvent, prev *postedEvent) error {
	prev.count++
	for _, z := range zonesOf(ev) {
		if !containsString(prev.zones, z) {
			prev.zones = append(prev.zones, z)
		}
	}
	obj := r.object(ctx, ev, prev.name, prev.zones)
	// The merge patch names every schema annotation, null when unset, so
	// the Event ends with exactly the annotations signed.
	ann := map[string]any{}
	for _, k := range schemaAnnotations {
		ann[k] = nil
	}
	for k, v := range obj.Metadata.Annotations {
		ann[k] = v
	}
	patch := map[string]any{
		"metadata":      map[string]any{"annotations": ann},
		"message":       obj.Message,
		"type":          obj.Type,
		"count":         prev.count,
		"lastTimestamp": ev.at.UTC().Format(time.RFC3339),
	}
	status, body, err := r.do(ctx, http.MethodPatch, r.eventsURL(ev.namespace, prev.name), "application/merge-patch+json", patch)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return statusError("updating Event "+prev.name, status, body)
	}
	return nil
}

// existing reads an Event posted earlier, for its count and zones.
func (r *eventRecorder) existing(ctx context.Context, namespace, name string) (*postedEvent, error) {
	status, body, err := r.do(ctx, http.MethodGet, r.eventsURL(namespace, name), "", nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, statusError("reading Event "+name, status, body)
	}
	var obj struct {
		Metadata eventMeta `json:"metadata"`
		Count    int       `json:"count"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("reading Event %s: %w", name, err)
	}
	prev := &postedEvent{name: name, count: max(obj.Count, 1)}
	if z := obj.Metadata.Annotations[podevent.ZonesAnnotation]; z != "" {
		prev.zones = strings.Split(z, ",")
	}
	return prev, nil
}

// object is the Event for ev under name, with zones as its stockout
// zones, signed when the signing key is to hand.
func (r *eventRecorder) object(ctx context.Context, ev podEvent, name string, zones []string) eventObject {
	ann := map[string]string{podevent.AtAnnotation: ev.at.UTC().Format(time.RFC3339Nano)}
	for k, v := range ev.annotations {
		if v != "" {
			ann[k] = v
		}
	}
	if len(zones) > 0 {
		ann[podevent.ZonesAnnotation] = strings.Join(zones, ",")
	}
	typ := "Normal"
	if ev.warning {
		typ = "Warning"
	}
	source := map[string]string{"component": podevent.Component}
	if r.node != "" {
		source["host"] = r.node
	}
	ts := ev.at.UTC().Format(time.RFC3339)
	obj := eventObject{
		APIVersion: "v1",
		Kind:       "Event",
		Metadata: eventMeta{
			Name:        name,
			Namespace:   ev.namespace,
			Labels:      map[string]string{podevent.PhaseLabel: ev.phase, podevent.PodVMLabel: labelValue(ev.podVM)},
			Annotations: ann,
		},
		InvolvedObject: objectReference{APIVersion: "v1", Kind: "Pod", Namespace: ev.namespace, Name: ev.pod, UID: r.podUID(ev)},
		Reason:         podevent.PhaseReason(ev.phase),
		Message:        truncateMessage(ev.message),
		Type:           typ,
		Source:         source,
		FirstTimestamp: ts,
		LastTimestamp:  ts,
		Count:          1,
	}
	if key := r.signingKey(ctx); key != nil {
		ann[eventsig.SignatureAnnotation] = eventsig.Sign(key, eventsig.Fields{
			Namespace: ev.namespace, Name: name, Kind: obj.InvolvedObject.Kind, Object: ev.pod, ObjectUID: obj.InvolvedObject.UID,
			Reason: obj.Reason, Type: obj.Type, Message: obj.Message, Labels: obj.Metadata.Labels, Annotations: ann,
		})
	}
	return obj
}

// signingKey is the Event signing key (eventsig): read from the Secret
// in the adaptor's namespace, or made there when there is none (the first
// adaptor to start makes it; one that loses the race reads the winner's).
// nil while it cannot be had: the Event goes unsigned, said once in the
// log, and the key is sought again after keyRetry.
func (r *eventRecorder) signingKey(ctx context.Context) []byte {
	if r.key != nil {
		return r.key
	}
	if r.api.Namespace == "" || (!r.keySought.IsZero() && time.Since(r.keySought) < keyRetry) {
		return nil
	}
	r.keySought = time.Now()
	key, err := r.readKey(ctx)
	if err == nil && key == nil {
		key, err = r.makeKey(ctx)
	}
	if err != nil {
		if !r.keyTold {
			r.keyTold = true
			r.log.Printf("start-up Events go unsigned, so the reaper's metrics and gcp-t4 status do not count them, until the signing key can be had: %v", err)
		}
		return nil
	}
	r.key = key
	return key
}

func (r *eventRecorder) secretURL(name string) string {
	u := strings.TrimSuffix(r.api.URL, "/") + "/api/v1/namespaces/" + url.PathEscape(r.api.Namespace) + "/secrets"
	if name != "" {
		u += "/" + url.PathEscape(name)
	}
	return u
}

// readKey reads the key's Secret: nil, nil when there is none.
func (r *eventRecorder) readKey(ctx context.Context) ([]byte, error) {
	status, body, err := r.do(ctx, http.MethodGet, r.secretURL(eventsig.SecretName), "", nil)
	if err != nil {
		return nil, err
	}
	switch status {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("reading Secret %s/%s: HTTP %d: %s (the adaptor's ServiceAccount needs get on it; install/base/rbac.yaml grants it)",
			r.api.Namespace, eventsig.SecretName, status, apiMessage(body))
	}
	var secret struct {
		Data map[string][]byte `json:"data"`
	}
	if err := json.Unmarshal(body, &secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", r.api.Namespace, eventsig.SecretName, err)
	}
	key := secret.Data[eventsig.SecretKey]
	if !eventsig.ValidKey(key) {
		return nil, fmt.Errorf("the Secret %s/%s holds a %q of %d bytes, not %d: delete it (kubectl -n %s delete secret %s) and restart the adaptor, which makes a new one",
			r.api.Namespace, eventsig.SecretName, eventsig.SecretKey, len(key), eventsig.KeySize, r.api.Namespace, eventsig.SecretName)
	}
	return key, nil
}

// makeKey creates the key's Secret, or reads the one another adaptor
// created first.
func (r *eventRecorder) makeKey(ctx context.Context) ([]byte, error) {
	key := make([]byte, eventsig.KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": eventsig.SecretName, "namespace": r.api.Namespace,
			"labels": map[string]string{"app.kubernetes.io/part-of": "caa-gcp-t4"}},
		"data": map[string]string{eventsig.SecretKey: base64.StdEncoding.EncodeToString(key)},
	}
	status, body, err := r.do(ctx, http.MethodPost, r.secretURL(""), "application/json", secret)
	if err != nil {
		return nil, err
	}
	switch status {
	case http.StatusCreated, http.StatusOK:
		return key, nil
	case http.StatusConflict:
		key, err := r.readKey(ctx)
		if err == nil && key == nil {
			err = fmt.Errorf("the Secret %s/%s existed and then did not", r.api.Namespace, eventsig.SecretName)
		}
		return key, err
	default:
		return nil, fmt.Errorf("creating Secret %s/%s: HTTP %d: %s (the adaptor's ServiceAccount needs create on secrets in its namespace; install/base/rbac.yaml grants it)",
			r.api.Namespace, eventsig.SecretName, status, apiMessage(body))
	}
}

// podUID reads the pod's UID once per podVM: `kubectl describe pod`
// selects Events by the pod's UID as well as its name, and a pod deleted
// and made again under its name (a RayCluster's workers) is another pod.
// "" when the pod cannot be read; the Event still names the pod.
func (r *eventRecorder) podUID(ev podEvent) string {
	if uid, ok := r.uids[ev.podVM]; ok {
		return uid
	}
	status, body, err := r.do(r.ctx, http.MethodGet, r.api.URL+"/api/v1/namespaces/"+url.PathEscape(ev.namespace)+"/pods/"+url.PathEscape(ev.pod), "", nil)
	if err != nil || status != http.StatusOK {
		return ""
	}
	var pod struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &pod) != nil {
		return ""
	}
	r.uids[ev.podVM] = pod.Metadata.UID
	return pod.Metadata.UID
}

func (r *eventRecorder) eventsURL(namespace, name string) string {
	u := strings.TrimSuffix(r.api.URL, "/") + "/api/v1/namespaces/" + url.PathEscape(namespace) + "/events"
	if name != "" {
		u += "/" + url.PathEscape(name)
	}
	return u
}

func (r *eventRecorder) do(ctx context.Context, method, u, contentType string, in any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, eventTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.api.Token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, out, nil
}

func statusError(what string, status int, body []byte) error {
	err := fmt.Errorf("%s: HTTP %d: %s", what, status, apiMessage(body))
	if status == http.StatusForbidden || status == http.StatusUnauthorized {
		return fmt.Errorf("%w (%w: the adaptor's ServiceAccount needs RBAC create, get and patch on events; install/base/rbac.yaml grants them)", err, errForbidden)
	}
	return err
}

func zonesOf(ev podEvent) []string {
	if ev.phase == podevent.PhaseStockout && ev.zone != "" {
		return []string{ev.zone}
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// truncateMessage keeps the head of an over-long message (a console tail
// is written newest last, so it cuts the oldest lines instead), cut
// between characters.
func truncateMessage(s string) string {
	if len(s) <= maxEventMessage {
		return s
	}
	return cutUTF8(s, maxEventMessage-3) + "..."
}

// cutUTF8 is s cut to at most n bytes, not inside a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// hidden reports a character that acts on a terminal or hides itself:
// C0 and C1 controls (ESC, DEL, the line breaks), bidi marks, overrides
// and isolates, and the other invisible format characters (zero-width
// space and joiners, the byte order mark, tag characters, variation
// selectors). gcp-t4's termout.Clean escapes the same set when it prints.
func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r)
}

// eventText writes each hidden character of s (but a newline, where
// multiline) as its Go escape (\x1b, \u202e), so that it shows in the
// Event and does nothing where the Event is printed; bytes that are not
// UTF-8 become \xNN.
func eventText(s string, multiline bool) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return hidden(r) && !(multiline && r == '\n') }) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case multiline && r == '\n', !hidden(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}
