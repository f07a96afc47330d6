// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// What happens to an instance after it runs: a user stops, starts or
// deletes it through the API, or GCE stops it on its own (a Spot
// preemption, host maintenance, a host error) or its guest powers it off.
// The states and transitions follow compute/docs/instances/instance-life-cycle:
// a stop goes RUNNING → STOPPING → TERMINATED; a TERMINATED instance keeps
// its disks and internal address until it is deleted, and a start brings
// it back. What GCE does on its own follows compute/docs/instances/spot
// (preemption, its instanceTerminationAction STOP or DELETE) and
// compute/docs/instances/host-maintenance-overview (TERMINATE instances
// stop, and restart only with automaticRestart; MIGRATE instances live
// migrate and keep running). Each is recorded as the operation GCE's
// zoneOperations.list shows, so that a caller can tell afterwards what
// ended a VM: GCE's own events under the system user, with the operation
// types compute/docs/instances/create-use-spot and the host maintenance
// pages name. Every transition takes the operation latency (the clock):
// STOPPING until the operation completes, then the new state.
//
// The guest-visible side, the metadata server's instance/preempted and
// instance/maintenance-event, is in guestmeta.go: Notice gives it ahead of
// the stop, and Interrupt gives it at the stop when no notice came first.
// The ACPI shutdown the guest sees is not modelled.

// systemUser is the user GCE's own operations carry.
const systemUser = "system"

// Operation types of GCE's own events on an instance.
const (
	opPreempted        = "compute.instances.preempted"
	opTerminateOnHost  = "compute.instances.terminateOnHostMaintenance"
	opMigrateOnHost    = "compute.instances.migrateOnHostMaintenance"
	opHostError        = "compute.instances.hostError"
	opGuestTerminate   = "compute.instances.guestTerminate"
	opAutomaticRestart = "compute.instances.automaticRestart"
)

// HostEvent is something GCE does to a running instance on its own.
type HostEvent int

// Host events a test can make happen (Server.Interrupt).
const (
	// Preemption reclaims a Spot or preemptible VM: it stops, or is
	// deleted when its instanceTerminationAction is DELETE. GCE never
	// preempts a standard VM.
	Preemption HostEvent = iota + 1
	// HostMaintenance: an onHostMaintenance=TERMINATE VM (every GPU VM)
	// stops, and restarts only with automaticRestart; a MIGRATE VM live
	// migrates and keeps running.
	HostMaintenance
	// HostError: the host failed; the VM stops, and restarts only with
	// automaticRestart.
	HostError
)

func (e HostEvent) String() string {
	switch e {
	case Preemption:
		return "preemption"
	case HostMaintenance:
		return "host maintenance"
	case HostError:
		return "host error"
	}
	return "HostEvent(" + strconv.Itoa(int(e)) + ")"
}

// notReady is GCE's answer for a resource in the wrong state for the
// request.
func (s *Server) notReady(rec *instanceRecord) *apiError {
	return apiErr(http.StatusBadRequest, "resourceNotReady", fmt.Sprintf("The resource '%s' is not ready", s.instancePath(rec.zone, rec.inst.GetName())))
}

// handleInstancesStop is instances.stop. A running instance goes STOPPING
// while the operation runs, then TERMINATED with lastStopTimestamp; a
// TERMINATED one stays so and the operation succeeds. An instance in a
// transition (being created, stopped or deleted) is refused as not ready:
// the reference does not say what GCE answers then, and refusing keeps a
// caller from relying on an outcome GCE may not give (a choice).
func (s *Server) handleInstancesStop(rc *reqCtx) (proto.Message, error) {
	return s.powerRequest(rc, "stop")
}

// handleInstancesStart is instances.start. A TERMINATED instance is
// STAGING while the operation runs, then RUNNING with lastStartTimestamp
// and a fresh boot (SetBootConsole); a RUNNING one stays so and the
// operation succeeds; one in a transition is refused as not ready (a
// choice, as for stop), and one that no longer exists is 404 like every
// call on it. Quota and capacity are not checked again (a simplification:
// GCE can refuse to start a VM when the zone has no capacity).
func (s *Server) handleInstancesStart(rc *reqCtx) (proto.Message, error) {
	return s.powerRequest(rc, "start")
}

func (s *Server) powerRequest(rc *reqCtx, opType string) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	rid, err := requestID(rc)
	if err != nil {
		return nil, err
	}
	name := rc.params["instance"]
	if op := s.replayed("instances."+opType, z.name, rid, []byte(name)); op != nil {
		return op, nil
	}
	ir, err := s.lookupInstance(rc)
	if err != nil {
		return nil, err
	}
	status := ir.inst.GetStatus()
	var from, during, to string
	switch {
	case opType == "stop" && status == "RUNNING":
		from, during, to = status, "STOPPING", "TERMINATED"
	case opType == "start" && status == "TERMINATED":
		from, during, to = status, "STAGING", "RUNNING"
	case opType == "stop" && status == "TERMINATED", opType == "start" && status == "RUNNING":
		// Already there: the operation succeeds and changes nothing.
	default:
		return nil, s.notReady(ir)
	}
	rec := s.newOperation(ir.zone, opType, name, ir.inst.GetId(), rid)
	rec.body = []byte(name)
	if from != "" {
		ir.inst.Status = proto.String(during)
		rec.onDone = func() { s.settleState(ir, during, to) }
	}
	s.settle()
	return proto.Clone(rec.op), nil
}

// settleState ends a transition: the instance, if it is still this
// record and still in the transitional state, takes its new state.
func (s *Server) settleState(ir *instanceRecord, during, to string) {
	if s.instances[ir.zone+"/"+ir.inst.GetName()] != ir || ir.inst.GetStatus() != during {
		return
	}
	ir.inst.Status = proto.String(to)
	switch to {
	case "TERMINATED":
		ir.inst.LastStopTimestamp = proto.String(s.stamp())
		s.changed()
	case "RUNNING":
		ir.inst.LastStartTimestamp = proto.String(s.stamp())
		s.booted(ir)
	}
}

// runningLocked settles the clock and returns the instance, or an error
// that names what was asked (what) and, for one that is not RUNNING, GCE's
// rule (why); s.mu must be held.
func (s *Server) runningLocked(zone, instance, what, why string) (*instanceRecord, error) {
	s.settle()
	ir := s.instances[zone+"/"+instance]
	if ir == nil {
		return nil, fmt.Errorf("gcefake: %s %s/%s: no such instance", what, zone, instance)
	}
	if st := ir.inst.GetStatus(); st != "RUNNING" {
		return nil, fmt.Errorf("gcefake: %s %s/%s: the instance is %s, and %s", what, zone, instance, st, why)
	}
	return ir, nil
}

// Interrupt makes GCE do ev to a running instance, as its operation list
// then shows it (a system operation), and returns what GCE refuses: an
// unknown instance, one that is not RUNNING, the preemption of a standard
// VM. The instance is STOPPING while the operation runs (the clock), then
// TERMINATED, deleted, or RUNNING again, as ev and the instance's
// scheduling say (HostEvent).
func (s *Server) Interrupt(zone, instance string, ev HostEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, err := s.runningLocked(zone, instance, fmt.Sprintf("%s of", ev), "GCE interrupts only running VMs")
	if err != nil {
		return err
	}
	sc := ir.inst.GetScheduling()
	var opType, msg string
	restart := sc.GetAutomaticRestart()
	remove := false
	switch ev {
	case Preemption:
		if !ir.preemptible {
			return fmt.Errorf("gcefake: preemption of %s/%s: a %s VM is never preempted, only Spot and preemptible ones", zone, instance, sc.GetProvisioningModel())
		}
		// compute/docs/instances/spot: STOP (the default) or DELETE on
		// preemption; Spot VMs never restart automatically.
		opType, msg, restart = opPreempted, "Instance was preempted.", false
		remove = sc.GetInstanceTerminationAction() == "DELETE"
	case HostMaintenance:
		if sc.GetOnHostMaintenance() != "TERMINATE" {
			// Live migration: the VM keeps running on another host, and
			// its metadata says NONE again afterwards.
			rec := s.systemOperation(ir, opMigrateOnHost, "")
			s.complete(rec)
			ir.guest.maintenanceEvent = ""
			s.changed()
			return nil
		}
		opType = opTerminateOnHost
	case HostError:
		opType = opHostError
	default:
		return fmt.Errorf("gcefake: unknown host event %d", ev)
	}
	if ev != HostError {
		// GCE's notice comes first; a test that skipped Notice gets it
		// now, with no time left.
		s.giveNotice(ir, ev)
	}
	rec := s.systemOperation(ir, opType, msg)
	ir.inst.Status = proto.String("STOPPING")
	key := zone + "/" + instance
	rec.onDone = func() {
		if s.instances[key] != ir || ir.inst.GetStatus() != "STOPPING" {
			return
		}
		switch {
		case remove:
			s.removeInstance(ir)
		case restart:
			// GCE restarts it, recorded as an operation of its own.
			ir.inst.LastStopTimestamp = proto.String(s.stamp())
			s.complete(s.systemOperation(ir, opAutomaticRestart, ""))
			ir.inst.Status = proto.String("RUNNING")
			ir.inst.LastStartTimestamp = proto.String(s.stamp())
			s.booted(ir)
		default:
			ir.inst.Status = proto.String("TERMINATED")
			ir.inst.LastStopTimestamp = proto.String(s.stamp())
			s.changed()
		}
	}
	s.settle()
	return nil
}

// systemOperation records one of GCE's own operations on an instance.
func (s *Server) systemOperation(ir *instanceRecord, opType, msg string) *opRecord {
	rec := s.newOperation(ir.zone, opType, ir.inst.GetName(), ir.inst.GetId(), "")
	rec.op.User = proto.String(systemUser)
	if msg != "" {
		rec.op.StatusMessage = proto.String(msg)
	}
	return rec
}

// removeInstance drops a stored instance and frees its addresses, as a
// completed delete does.
func (s *Server) removeInstance(ir *instanceRecord) {
	key := ir.zone + "/" + ir.inst.GetName()
	if s.instances[key] != ir {
		return
	}
	delete(s.instances, key)
	for _, ip := range ir.ips {
		delete(s.usedIPs, ip)
	}
	s.changed()
}

func operationGetter(op *computepb.Operation) fieldGetter {
	return func(f string) (string, bool, bool) {
		switch f {
		case "name":
			return op.GetName(), true, true
		case "operationType":
			return op.GetOperationType(), true, true
		case "targetLink":
			return op.GetTargetLink(), true, true
		case "targetId":
			return strconv.FormatUint(op.GetTargetId(), 10), true, true
		case "status":
			return op.GetStatus().String(), true, true
		case "user":
			return op.GetUser(), op.User != nil, true
		}
		return "", false, false
	}
}

// handleZoneOperationsList is zoneOperations.list: the zone's operations,
// oldest first, filtered and paged like every list. GCE keeps operations
// for a limited time; the fake keeps them all.
func (s *Server) handleZoneOperationsList(rc *reqCtx) (proto.Message, error) {
	z, err := s.zoneOf(rc)
	if err != nil {
		return nil, err
	}
	var ops []*computepb.Operation
	for _, rec := range s.opLog {
		if rec.zone == z.name {
			ops = append(ops, rec.op)
		}
	}
	pg, next, err := listPage(rc, ops, operationGetter)
	if err != nil {
		return nil, err
	}
	out := &computepb.OperationList{Kind: proto.String("compute#operationList"), Id: proto.String("projects/" + s.project + "/zones/" + z.name + "/operations"),
		SelfLink: proto.String(s.zoneURL(z.name) + "/operations"), NextPageToken: next}
	for _, op := range pg {
		out.Items = append(out.Items, proto.Clone(op).(*computepb.Operation))
	}
	return out, nil
}

// Operations returns copies of the operations recorded in zone, oldest
// first: what zoneOperations.list would show, without a filter.
func (s *Server) Operations(zone string) []*computepb.Operation {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	var out []*computepb.Operation
	for _, rec := range s.opLog {
		if rec.zone == zone {
			out = append(out, proto.Clone(rec.op).(*computepb.Operation))
		}
	}
	return slices.Clip(out)
}
