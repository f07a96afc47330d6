package node

import (
	"testing"
	"time"
)

// TestKataRemotePodVMInterrupted is issue 54's podVM-preempted scenario:
// the GPU pod of TestKataRemotePodVMLost, its podVM a Spot VM (CAA
// installed with GCP_PROVISIONING_MODEL=SPOT, so the provider's insert
// asks for SPOT with instanceTerminationAction DELETE), goes Running; then
// GCE itself ends the VM through the emulator's test control
// (gcefake.Interrupt, as GCE records it: a system operation):
//
//   - preemption: GCE reclaims the Spot VM; its guest gets the ACPI
//     shutdown a preemption gives (the harness shuts the podVM down as
//     for a stop), and the VM is deleted (its termination action);
//   - host-error: the VM's host fails; no guest shutdown (the podVM dies
//     as Node.HardOff makes it), and the VM is left TERMINATED (a Spot VM
//     never restarts automatically);
//   - host-maintenance: GCE's maintenance of the host of a VM that cannot
//     live-migrate. Here the pod goes through CAA's peer-pods webhook
//     (Kata.Webhook), so its podVM is what a GPU pod gets: a standard
//     (not Spot) N1 with one T4, onHostMaintenance TERMINATE (GCE's rule
//     for GPU VMs) and automaticRestart false (the provider's); GCE stops
//     it with a guest shutdown (the harness shuts the podVM down as for a
//     stop) and, with no automatic restart, leaves it TERMINATED.
//
// It records and asserts what TestKataRemotePodVMLost does, and the
// PodVMLost Event's cause: preempted, host-error, host-maintenance.
func TestKataRemotePodVMInterrupted(t *testing.T) {
	k := kataOrSkip(t)
	for _, v := range []struct {
		event, cause string
		hard         bool
		gpu          bool
	}{{"preemption", "preempted", false, false}, {"host-error", "host-error", true, false}, {"host-maintenance", "host-maintenance", false, true}} {
		t.Run(v.event, func(t *testing.T) {
			vk := k
			vk.AgentPull = 5 * time.Second
			vk.Spot = !v.gpu
			vk.Webhook = v.gpu
			lostRun(t, &vk, v.event, v.hard, v.cause)
		})
	}
}
