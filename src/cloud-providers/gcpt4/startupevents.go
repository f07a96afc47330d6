// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// The create walk's phases as Events (podevents.go): what a pod author
// reads in `kubectl describe pod` while the pod is ContainerCreating.
// Messages hold only what the walk decided (shape, zone, price, name,
// address) and GCE's classified answer, never the cloud-config (it
// carries the agent's TLS keys and the pod's pull secrets).

// stepFacts are the annotations that describe a walk step in a zone.
func (p *Provider) stepFacts(st walkStep, zone string) map[string]string {
	ann := map[string]string{
		podevent.ZoneAnnotation:              zone,
		podevent.MachineTypeAnnotation:       st.displayType(),
		podevent.GPUAnnotation:               st.accelerator,
		podevent.GPUCountAnnotation:          strconv.FormatInt(st.count, 10),
		podevent.ProvisioningModelAnnotation: st.model,
	}
	if price, ok := p.hourly(st); ok {
		ann[podevent.PriceAnnotation] = strconv.FormatFloat(price, 'f', 4, 64)
	}
	return ann
}

// displayType is the machine type a person recognises: a template's
// machine type when it is known, else the step's.
func (st walkStep) displayType() string {
	if st.templateMachineType != "" {
		return st.templateMachineType
	}
	return st.machineType
}

// hourly is the step's list price per hour, if the price table knows it.
func (p *Provider) hourly(st walkStep) (float64, bool) {
	if p.catalog == nil || p.catalog.Prices() == nil {
		return 0, false
	}
	h := p.catalog.Prices().Hourly(st.displayType(), st.accelerator, st.count, st.model)
	return h.Total, h.Known
}

// shapeText is "n1-standard-8 + 1 × nvidia-tesla-t4 (SPOT)".
func (st walkStep) shapeText() string {
	s := st.displayType()
	if st.accelerator != "" && st.count > 0 {
		s += fmt.Sprintf(" + %d × %s", st.count, st.accelerator)
	}
	return s + " (" + st.model + ")"
}

func (p *Provider) priceText(st walkStep) string {
	if price, ok := p.hourly(st); ok {
		return fmt.Sprintf("$%.2f/h", price)
	}
	return "price unknown"
}

func (p *Provider) eventFor(vm podVM, phase string) podEvent {
	return podEvent{namespace: vm.namespace, pod: vm.podName, podVM: vm.name, phase: phase, at: time.Now()}
}

// recordRequested: the first insert of the walk is about to be sent.
func (p *Provider) recordRequested(vm podVM, st walkStep, zone string) {
	ev := p.eventFor(vm, podevent.PhaseRequested)
	ev.annotations = p.stepFacts(st, zone)
	ev.message = fmt.Sprintf("requesting podVM %s: %s in %s at %s", vm.name, st.shapeText(), zone, p.priceText(st))
	p.events.record(ev)
}

// recordStockout: zone had no capacity; next is where the walk goes on
// ("" when this shape has no zone left).
func (p *Provider) recordStockout(vm podVM, st walkStep, zone, code, next string) {
	ev := p.eventFor(vm, podevent.PhaseStockout)
	ev.warning = true
	ev.zone = zone
	ev.annotations = p.stepFacts(st, zone)
	then := "no zone left for this shape"
	if next != "" {
		then = "trying " + next
	}
	ev.message = fmt.Sprintf("%s has no capacity for %s (%s); %s", zone, st.shapeText(), code, then)
	p.events.record(ev)
}

// recordQuota: a quota refused the insert in zone.
func (p *Provider) recordQuota(vm podVM, st walkStep, zone, metric string) {
	ev := p.eventFor(vm, podevent.PhaseQuota)
	ev.warning = true
	ev.annotations = p.stepFacts(st, zone)
	ev.annotations[podevent.QuotaMetricAnnotation] = metric
	ev.annotations[podevent.RegionAnnotation] = regionOf(zone)
	ev.message = fmt.Sprintf("quota %s is exhausted in %s for %s; to fix: %s", metric, regionOf(zone), st.shapeText(), quotaAdvice(metric, regionOf(zone), st.model == setting.ProvisioningSpot))
	p.events.record(ev)
}

// recordCreated: the VM runs with its internal address.
func (p *Provider) recordCreated(vm podVM, st walkStep, zone, ip string, since time.Time) {
	ev := p.eventFor(vm, podevent.PhaseCreated)
	ev.annotations = p.stepFacts(st, zone)
	ev.annotations[podevent.IPAnnotation] = ip
	ev.message = fmt.Sprintf("podVM %s created in %s: %s, internal IP %s, %s, %s after the request", vm.name, zone, st.shapeText(), ip, p.priceText(st), time.Since(since).Round(time.Second))
	p.events.record(ev)
}

// recordCreateFailed: the walk ended without a VM. The class picks the
// fix a pod author can act on; the error already names it.
func (p *Provider) recordCreateFailed(vm podVM, err error) {
	if err == nil {
		return
	}
	ev := p.eventFor(vm, podevent.PhaseFailed)
	ev.warning = true
	class := createFailureClass(err)
	ev.annotations = map[string]string{podevent.FailureAnnotation: class}
	ev.message = fmt.Sprintf("%s: %v", failureTitle(class), err)
	p.events.record(ev)
}

// notAllowedError marks a refusal by the admin's settings (allow-lists,
// caps, totals); its text is the refused error's, unchanged.
type notAllowedError struct{ err error }

func (e notAllowedError) Error() string { return e.err.Error() }
func (e notAllowedError) Unwrap() error { return e.err }

func notAllowed(err error) error { return notAllowedError{err} }

// createFailureClass sorts a create's error into a failure class.
func createFailureClass(err error) string {
	var g *gceError
	switch {
	case errors.As(err, new(notAllowedError)):
		return podevent.FailureNotAllowed
	case errors.Is(err, ErrNoCapacity) && errors.As(err, &g) && g.kind == failQuota:
		return podevent.FailureQuota
	case errors.Is(err, ErrNoCapacity):
		return podevent.FailureNoCapacity
	}
	return podevent.FailureCreate
}

func failureTitle(class string) string {
	switch class {
	case podevent.FailureNotAllowed:
		return "not allowed by the cluster's settings"
	case podevent.FailureNoCapacity:
		return "no zone had capacity"
	case podevent.FailureQuota:
		return "a project-wide quota is exhausted"
	case podevent.FailureBoot:
		return "the podVM's boot failed"
	case podevent.FailureGPU:
		return "the podVM's GPU is unusable"
	case podevent.FailureCDH:
		return "the podVM's confidential data hub did not start, so its agent was never started"
	case podevent.FailureAgentUnreachable:
		return "the podVM booted but the adaptor never reached its agent"
	case podevent.FailureAdaptor:
		return "the podVM booted and its agent port answers the node, but the adaptor deleted it before the pod's sandbox was ready"
	case podevent.FailureStopped:
		return "the podVM stopped before its agent was reached"
	case podevent.FailureNotReady:
		return "the podVM was deleted before it reported a boot"
	}
	return "creating the podVM failed"
}

// consoleFacts summarises console lines for a message: newest last.
func consoleFacts(lines []string) string {
	if len(lines) == 0 {
		return "its console showed nothing"
	}
	return "its console's last lines:\n" + strings.Join(lines, "\n")
}
