// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// tellIfLost runs when CAA deletes a podVM its pod's sandbox ran on. CAA
// calls that for a pod that went away and, as much, when kata's shim lost
// the podVM's agent and ended the sandbox (a real CAA v0.22.0 run on the
// emulator: StopVM within 0.02 s of a stop or delete whose guest shuts
// down, 30–35 s when the VM silently vanishes; docs/reaper.md). Only GCE
// tells the two apart, and only until the delete: a VM that is no longer
// running, or already gone, was lost under its pod. Its pod is told why
// (podevent.PhaseLost, under the Event name the reaper uses, so once), because the
// kubelet's new sandbox on a new podVM otherwise looks like a slow start.
func (p *Provider) tellIfLost(ctx context.Context, w *bootWatch, zone, name string) {
	// Most deletes are of a pod that went away, and took its podVM with
	// it: a pod gone or being deleted costs no GCE call. A pod still there
	// (its sandbox ended, or its podVM was lost), or one that cannot be
	// read, is checked in GCE.
	if ps, status, err := p.events.pod(ctx, w.vm.namespace, w.vm.podName); err == nil &&
		(status == http.StatusNotFound || (status == http.StatusOK && ps.Metadata.DeletionTimestamp != "")) {
		return
	}
	inst, err := p.getInstance(ctx, zone, name)
	gone := err != nil && classifyCall(err).kind == failNotFound
	if err != nil && !gone {
		p.log.Printf("%s, podVM %s: reading it before the delete failed, so a loss is not told on the pod: %v", w.vm.podRef(), name, err)
		return
	}
	what := fmt.Sprintf("podVM %s (%s) no longer exists on GCE while this pod still used it", name, zone)
	if !gone {
		switch st := inst.GetStatus(); st {
		case "RUNNING", "PROVISIONING", "STAGING":
			return // the pod went away, not its podVM
		default:
			what = fmt.Sprintf("podVM %s (%s) is %s while this pod still used it", name, zone, strings.ToLower(st))
		}
	}
	in, err := p.Interruption(ctx, InstanceID(zone, name))
	if err != nil {
		p.log.Printf("%s, podVM %s: %v", w.vm.podRef(), name, err)
	}
	at := in.At
	if at.IsZero() {
		at = time.Now()
	}
	msg := what + ": " + in.Text() + ". kata's shim lost the pod's agent and ended its sandbox, and the adaptor deletes the podVM; " +
		"the kubelet makes a new sandbox on a new podVM (a PodVMRequested Event follows), or, with restartPolicy Never, the pod fails and its controller replaces it"
	p.log.Printf("%s, podVM %s: %s", w.vm.podRef(), name, msg)
	p.events.record(podEvent{
		namespace: w.vm.namespace, pod: w.vm.podName, podVM: name, phase: podevent.PhaseLost, warning: true, at: at,
		annotations: map[string]string{podevent.CauseAnnotation: in.Cause, podevent.ZoneAnnotation: zone},
		message:     msg,
	})
}
