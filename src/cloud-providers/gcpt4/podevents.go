// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
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

// Phases of a podVM's start-up, in the order they happen. Each is at most
// one Event per podVM: a phase that repeats (a stockout in a second zone)
// updates its Event's count and message instead of adding one.
const (
	// PhaseRequested: the first insert is about to be sent (shape, zone,
	// provisioning model, price per hour).
	PhaseRequested = "requested"
	// PhaseStockout: a zone had no capacity for the shape; the next is
	// tried.
	PhaseStockout = "stockout"
	// PhaseQuota: a quota refused the insert (metric, region, the fix).
	PhaseQuota = "quota"
	// PhaseCreated: the VM runs (name, internal IP, zone, price).
	PhaseCreated = "created"
	// PhaseBooted: gpu-init's readiness line reached the serial console
	// (driver, GPU count), or it reported a podVM without a GPU.
	PhaseBooted = "booted"
	// PhaseReachable: CAA reached the podVM's agent: the pod's sandbox is
	// ready (its PodReadyToStartContainers condition is True).
	PhaseReachable = "reachable"
	// PhaseFailed: the terminal failure, with its class (FailureAnnotation).
	PhaseFailed = "failed"
	// PhaseLost: after it started, the podVM stopped or vanished while its
	// pod still used it (preempted, stopped by host maintenance or by
	// someone, deleted out of band), so its sandbox can never run again;
	// the cause in EventCauseAnnotation. The provider tells it when CAA
	// deletes a podVM GCE no longer runs (kata's shim lost the agent: the
	// usual path, within seconds), the reaper when it deletes what CAA
	// left; both under one Event name, so a pod is told once
	// (docs/startup-visibility.md, docs/reaper.md "A lost podVM").
	PhaseLost = "lost"
)

// phaseCache is not a start-up phase (the timeline orders nothing by it,
// so it is not in Phases): the podVM's cache disk was opened through
// dm-verity and its pre-unpacked images handed to image-rs, or which miss
// kept them out (the CAA-GCP-T4-STORE console line). At most one per
// podVM, like a phase.
const (
	phaseCache  = "cache"
	reasonCache = "PodVMCacheDisk"
	// eventCacheStateAnnotation is in-use or unused; the miss, when
	// unused, is in eventCacheMissAnnotation (docs/cache.md's misses, or
	// other).
	eventCacheStateAnnotation = "caa-gcp-t4/cache-state"
	eventCacheMissAnnotation  = "caa-gcp-t4/cache-miss"
)

// phaseLayers is not a start-up phase either: the podVM's sweep removed
// the layer directories a failed image pull left, or pulls hold more than
// its disk has left (the CAA-GCP-T4-LAYERS console line, docs/cache.md "A
// failed pull"). One Event per podVM, its count and message updated each
// time, like a repeated stockout.
const (
	phaseLayers  = "layers"
	reasonLayers = "PodVMImageLayers"
)

// repeats says whether a phase's Event is updated when it happens again
// (its count and message), rather than told once.
func repeats(phase string) bool { return phase == PhaseStockout || phase == phaseLayers }

// Phases lists the phases in order.
var Phases = []string{PhaseRequested, PhaseStockout, PhaseQuota, PhaseCreated, PhaseBooted, PhaseReachable, PhaseFailed, PhaseLost}

// The Event reason of each phase.
const (
	ReasonRequested = "PodVMRequested"
	ReasonStockout  = "PodVMZoneStockout"
	ReasonQuota     = "PodVMQuotaExceeded"
	ReasonCreated   = "PodVMCreated"
	ReasonBooted    = "PodVMBooted"
	ReasonReachable = "PodVMAgentReachable"
	ReasonFailed    = "PodVMFailed"
	ReasonLost      = "PodVMLost"
)

// PhaseReason is the Event reason of a phase.
func PhaseReason(phase string) string {
	return map[string]string{
		PhaseRequested: ReasonRequested, PhaseStockout: ReasonStockout, PhaseQuota: ReasonQuota,
		PhaseCreated: ReasonCreated, PhaseBooted: ReasonBooted, PhaseReachable: ReasonReachable, PhaseFailed: ReasonFailed, PhaseLost: ReasonLost,
		phaseCache: reasonCache, phaseLayers: reasonLayers, phaseImage: reasonImage,
	}[phase]
}

// Labels on every start-up Event, so that a reader selects them without
// parsing reasons: kubectl get events -l caa-gcp-t4/phase.
const (
	// EventPhaseLabel is the phase (Phases).
	EventPhaseLabel = "caa-gcp-t4/phase"
	// EventPodVMLabel is the podVM's instance name (GCE names fit a label).
	EventPodVMLabel = "caa-gcp-t4/podvm"
)

// Annotations on start-up Events: the phase's facts, for tools. Each is
// set only where the phase knows it.
const (
	// EventAtAnnotation is when the phase happened (RFC 3339, nanoseconds);
	// for a repeated phase, the last time.
	EventAtAnnotation = "caa-gcp-t4/at"
	// EventZoneAnnotation is the zone (requested, quota, created).
	EventZoneAnnotation = "caa-gcp-t4/zone"
	// EventZonesAnnotation lists the zones that stocked out, in order,
	// comma-separated (stockout).
	EventZonesAnnotation = "caa-gcp-t4/zones"
	// EventMachineTypeAnnotation is the machine type, or template:URL.
	EventMachineTypeAnnotation = "caa-gcp-t4/machine-type"
	// EventGPUAnnotation is the accelerator type ("" for none).
	EventGPUAnnotation = "caa-gcp-t4/gpu"
	// EventGPUCountAnnotation is the number of GPUs (decimal).
	EventGPUCountAnnotation = "caa-gcp-t4/gpu-count"
	// EventProvisioningModelAnnotation is SPOT or STANDARD (…).
	EventProvisioningModelAnnotation = "caa-gcp-t4/provisioning-model"
	// EventPriceAnnotation is the list price in USD per hour (decimal);
	// absent when the price table does not know the shape.
	EventPriceAnnotation = "caa-gcp-t4/price-per-hour"
	// EventIPAnnotation is the podVM's internal IP (created).
	EventIPAnnotation = "caa-gcp-t4/ip"
	// EventQuotaMetricAnnotation and EventRegionAnnotation name a quota
	// refusal (quota).
	EventQuotaMetricAnnotation = "caa-gcp-t4/quota-metric"
	EventRegionAnnotation      = "caa-gcp-t4/region"
	// EventDriverAnnotation is the NVIDIA driver version gpu-init read
	// (booted).
	EventDriverAnnotation = "caa-gcp-t4/driver"
	// EventFailureAnnotation classifies a failure (the Failure… values).
	EventFailureAnnotation = "caa-gcp-t4/failure"
	// EventCauseAnnotation is what ended a lost podVM (lost; the Cause…
	// values).
	EventCauseAnnotation = "caa-gcp-t4/cause"
)

// Causes of a lost podVM (EventCauseAnnotation, Interruption.Cause): what
// GCE's operations on the VM say ended it.
const (
	// CausePreempted: GCE reclaimed the Spot VM (stopped, or deleted with
	// instanceTerminationAction DELETE, which the provider sets).
	CausePreempted = "preempted"
	// CauseHostMaintenance: host maintenance stopped it; GPU VMs cannot
	// live-migrate, so they terminate (onHostMaintenance TERMINATE).
	CauseHostMaintenance = "host-maintenance"
	// CauseHostError: its host failed.
	CauseHostError = "host-error"
	// CauseGuestShutdown: its guest powered it off (a failed boot does).
	CauseGuestShutdown = "guest-shutdown"
	// CauseStopped: someone stopped it through the API (instances.stop).
	CauseStopped = "stopped"
	// CauseDeleted: someone deleted it through the API (instances.delete).
	CauseDeleted = "deleted"
	// CauseUnknown: GCE's operations name none of the above (they are
	// kept for a limited time, or could not be read).
	CauseUnknown = "unknown"
)

// Failure classes (EventFailureAnnotation), each with its own fix.
const (
	// FailureNotAllowed: the admin's settings refuse the pod's request.
	FailureNotAllowed = "not-allowed"
	// FailureNoCapacity: every zone and model tried was out of capacity
	// (or skipped for quota).
	FailureNoCapacity = "no-capacity"
	// FailureQuota: a project-wide quota that no other zone relieves.
	FailureQuota = "quota"
	// FailureCreate: GCE refused or failed the create for another reason.
	FailureCreate = "create-failed"
	// FailureBoot: the podVM reported that its boot failed (CAA-GCP-T4-BOOT-FAILED).
	FailureBoot = "boot-failed"
	// FailureGPU: gpu-init reported the GPU unusable.
	FailureGPU = "gpu-failed"
	// FailureCDH: the confidential data hub never came up, so the agent
	// was not started (CAA-GCP-T4-CDH-FAILED).
	FailureCDH = "cdh-failed"
	// FailureAgentUnreachable: the podVM booted but CAA never reached its
	// agent before giving up on it, and the node could not open the
	// agent's port either (bootwatch.go probes it before the delete).
	FailureAgentUnreachable = "agent-unreachable"
	// FailureAdaptor: the podVM booted and its agent port answered the
	// node, yet CAA deleted it before the sandbox was ready: the cause is
	// on the node (the adaptor's own error, its socket, TLS, or the
	// kata-remote deadline), not the network.
	FailureAdaptor = "adaptor-gave-up"
	// FailureStopped: the VM stopped while it started (its boot failed and
	// it powered itself off, or Spot preempted it).
	FailureStopped = "stopped"
	// FailureNotReady: deleted before it reported a boot.
	FailureNotReady = "deleted-before-ready"
)

// EventComponent is the source component of the provider's Events.
const EventComponent = "cloud-api-adaptor/gcp-t4"

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
	// zone is appended to EventZonesAnnotation for a repeated stockout.
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
var schemaAnnotations = []string{EventAtAnnotation, EventZoneAnnotation, EventZonesAnnotation, EventMachineTypeAnnotation,
	EventGPUAnnotation, EventGPUCountAnnotation, EventProvisioningModelAnnotation, EventPriceAnnotation, EventIPAnnotation,
	EventQuotaMetricAnnotation, EventRegionAnnotation, EventDriverAnnotation, EventFailureAnnotation, EventCauseAnnotation}

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
				r.log.Printf("pod %s/%s, podVM %s: recording Event %s failed: %v", ev.namespace, ev.pod, ev.podVM, PhaseReason(ev.phase), err)
			}
		}
	}
}

var errForbidden = errors.New("forbidden")

// EventName is the name of a podVM's Event for a phase: fixed, so that an
// adaptor restarted mid-create, or a second record of the phase, finds the
// Event already there instead of adding one.
func EventName(pod, podVM, phase string) string {
	sum := sha256.Sum256([]byte(podVM + "/" + phase))
	if len(pod) > 200 {
		pod = pod[:200]
	}
	return pod + ".gcp-t4-" + hex.EncodeToString(sum[:8])
}

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
	name := EventName(ev.pod, ev.podVM, phase)
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
	if z := obj.Metadata.Annotations[EventZonesAnnotation]; z != "" {
		prev.zones = strings.Split(z, ",")
	}
	return prev, nil
}

// object is the Event for ev under name, with zones as its stockout
// zones, signed when the signing key is to hand.
func (r *eventRecorder) object(ctx context.Context, ev podEvent, name string, zones []string) eventObject {
	ann := map[string]string{EventAtAnnotation: ev.at.UTC().Format(time.RFC3339Nano)}
	for k, v := range ev.annotations {
		if v != "" {
			ann[k] = v
		}
	}
	if len(zones) > 0 {
		ann[EventZonesAnnotation] = strings.Join(zones, ",")
	}
	typ := "Normal"
	if ev.warning {
		typ = "Warning"
	}
	source := map[string]string{"component": EventComponent}
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
			Labels:      map[string]string{EventPhaseLabel: ev.phase, EventPodVMLabel: labelValue(ev.podVM)},
			Annotations: ann,
		},
		InvolvedObject: objectReference{APIVersion: "v1", Kind: "Pod", Namespace: ev.namespace, Name: ev.pod, UID: r.podUID(ev)},
		Reason:         PhaseReason(ev.phase),
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
	if ev.phase == PhaseStockout && ev.zone != "" {
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
