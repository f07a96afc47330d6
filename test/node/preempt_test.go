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
//     never restarts automatically).
//
// It records and asserts what TestKataRemotePodVMLost does, and the
// PodVMLost Event's cause: preempted, host-error.
func TestKataRemotePodVMInterrupted(t *testing.T) {
	k := kataOrSkip(t)
	for _, v := range []struct {
		event, cause string
		hard         bool
	}{{"preemption", "preempted", false}, {"host-error", "host-error", true}} {
		t.Run(v.event, func(t *testing.T) {
			vk := k
			vk.AgentPull = 5 * time.Second
			vk.Spot = true
			lostRun(t, &vk, v.event, v.hard, v.cause)
		})
	}
}
