// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package podevent is the schema of the start-up Events the gcp-t4
// provider records on a pod: its phases and their reasons, the labels and
// annotations that carry each phase's facts, the failure classes and the
// causes of a lost podVM. The provider writes them; `gcp-t4 status`, the
// reaper's start-up metrics and the docs read them. Kept apart from the
// provider so that what CAA calls is all the provider package exports.
//
// Stdlib only: this package is part of the drop-in provider.
package podevent

import (
	"crypto/sha256"
	"encoding/hex"
)

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
	// the cause in CauseAnnotation. The provider tells it when CAA
	// deletes a podVM GCE no longer runs (kata's shim lost the agent: the
	// usual path, within seconds), the reaper when it deletes what CAA
	// left; both under one Event name, so a pod is told once
	// (docs/startup-visibility.md, docs/reaper.md "A lost podVM").
	PhaseLost = "lost"
)

// Phases that are not start-up phases: the timeline orders nothing by
// them, so they are not in Phases. At most one Event per podVM each, like
// a phase (PhaseLayers repeats, its count and message updated).
const (
	// PhaseCache: the podVM's cache disk was opened through dm-verity and
	// its pre-unpacked images handed to image-rs, or which miss kept them
	// out (the CAA-GCP-T4-STORE console line).
	PhaseCache  = "cache"
	ReasonCache = "PodVMCacheDisk"
	// PhaseLayers: the podVM's sweep removed the layer directories a
	// failed image pull left, or pulls hold more than its disk has left
	// (the CAA-GCP-T4-LAYERS console line, docs/cache.md "A failed pull").
	PhaseLayers  = "layers"
	ReasonLayers = "PodVMImageLayers"
	// PhaseImage: where a started container's image came from (the
	// pre-unpacked store, the mirror, the podVM, its registry), told once
	// per container start.
	PhaseImage  = "image"
	ReasonImage = "PodVMImageSource"
)

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
		PhaseCache: ReasonCache, PhaseLayers: ReasonLayers, PhaseImage: ReasonImage,
	}[phase]
}

// Labels on every start-up Event, so that a reader selects them without
// parsing reasons: kubectl get events -l caa-gcp-t4/phase.
const (
	// PhaseLabel is the phase (Phases).
	PhaseLabel = "caa-gcp-t4/phase"
	// PodVMLabel is the podVM's instance name (GCE names fit a label).
	PodVMLabel = "caa-gcp-t4/podvm"
)

// Annotations on start-up Events: the phase's facts, for tools. Each is
// set only where the phase knows it.
const (
	// AtAnnotation is when the phase happened (RFC 3339, nanoseconds);
	// for a repeated phase, the last time.
	AtAnnotation = "caa-gcp-t4/at"
	// ZoneAnnotation is the zone (requested, quota, created).
	ZoneAnnotation = "caa-gcp-t4/zone"
	// ZonesAnnotation lists the zones that stocked out, in order,
	// comma-separated (stockout).
	ZonesAnnotation = "caa-gcp-t4/zones"
	// MachineTypeAnnotation is the machine type, or template:URL.
	MachineTypeAnnotation = "caa-gcp-t4/machine-type"
	// GPUAnnotation is the accelerator type ("" for none).
	GPUAnnotation = "caa-gcp-t4/gpu"
	// GPUCountAnnotation is the number of GPUs (decimal).
	GPUCountAnnotation = "caa-gcp-t4/gpu-count"
	// ProvisioningModelAnnotation is SPOT or STANDARD (…).
	ProvisioningModelAnnotation = "caa-gcp-t4/provisioning-model"
	// PriceAnnotation is the list price in USD per hour (decimal);
	// absent when the price table does not know the shape.
	PriceAnnotation = "caa-gcp-t4/price-per-hour"
	// IPAnnotation is the podVM's internal IP (created).
	IPAnnotation = "caa-gcp-t4/ip"
	// QuotaMetricAnnotation and RegionAnnotation name a quota
	// refusal (quota).
	QuotaMetricAnnotation = "caa-gcp-t4/quota-metric"
	RegionAnnotation      = "caa-gcp-t4/region"
	// DriverAnnotation is the NVIDIA driver version gpu-init read
	// (booted).
	DriverAnnotation = "caa-gcp-t4/driver"
	// FailureAnnotation classifies a failure (the Failure… values).
	FailureAnnotation = "caa-gcp-t4/failure"
	// CauseAnnotation is what ended a lost podVM (lost; the Cause…
	// values).
	CauseAnnotation = "caa-gcp-t4/cause"
)

// Causes of a lost podVM (CauseAnnotation, Interruption.Cause): what
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

// Failure classes (FailureAnnotation), each with its own fix.
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

// Component is the source component of the provider's Events.
const Component = "cloud-api-adaptor/gcp-t4"

// Name is the name of a podVM's Event for a phase: fixed, so that an
// adaptor restarted mid-create, or a second record of the phase, finds the
// Event already there instead of adding one.
func Name(pod, podVM, phase string) string {
	sum := sha256.Sum256([]byte(podVM + "/" + phase))
	if len(pod) > 200 {
		pod = pod[:200]
	}
	return pod + ".gcp-t4-" + hex.EncodeToString(sum[:8])
}

// eventObject is the core/v1 Event the recorder writes (the fields it
