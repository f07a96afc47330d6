// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// The serial console of an instance, as instances.getSerialPortOutput
// serves it. The rules come from two pages, cited below as [ref] and
// [view]:
//
//	[ref]  https://cloud.google.com/compute/docs/reference/rest/v1/instances/getSerialPortOutput
//	       (the start and port parameters and the SerialPortOutput fields)
//	[view] https://cloud.google.com/compute/docs/troubleshooting/viewing-serial-port-output
//	       (four ports; readable only while the VM runs; the last 1 MB per port)
//
// Positions are absolute: byte N is the Nth byte the port ever received,
// so a caller that feeds each answer's next back as start reads every byte
// exactly once, and one that fell behind the buffer sees an answer whose
// start is larger than it asked for.

const (
	// serialPorts: a VM has four serial ports, numbered 1 to 4 [view]
	// (also https://cloud.google.com/sdk/gcloud/reference/compute/instances/get-serial-port-output,
	// --port); the Compute v1 discovery document gives the port parameter
	// minimum 1, maximum 4, default 1.
	serialPorts = 4
	// defaultSerialBuffer is GCE's per-port buffer, "1 MB" [ref][view].
	// The pages do not say whether that is 10^6 or 2^20 bytes; the fake
	// takes 2^20 (a choice, not a documented value).
	defaultSerialBuffer = 1 << 20
)

// console holds the output of one instance's four serial ports.
type console struct {
	ports [serialPorts]portBuffer
}

// portBuffer is one port: how many bytes it ever received and the newest
// of them, at most the Server's serial buffer size.
type portBuffer struct {
	total int64
	// buf ends with the retained bytes; it may hold older ones in front
	// of them so that appends do not copy the window each time.
	buf []byte
}

// retained is the newest bytes still readable, at most size of them.
func (p *portBuffer) retained(size int) []byte {
	if len(p.buf) > size {
		return p.buf[len(p.buf)-size:]
	}
	return p.buf
}

// oldest is the absolute position of the first retained byte.
func (p *portBuffer) oldest(size int) int64 {
	return p.total - int64(len(p.retained(size)))
}

// write appends text: GCE discards the oldest output once a port holds
// more than its buffer [ref], while positions keep counting.
func (p *portBuffer) write(text string, size int) {
	p.total += int64(len(text))
	if len(text) >= size {
		p.buf = []byte(text[len(text)-size:])
		return
	}
	p.buf = append(p.buf, text...)
	// Drop what can no longer be read once it is as large as the window,
	// so a long-running console costs at most twice the buffer.
	if len(p.buf) >= 2*size {
		p.buf = append([]byte(nil), p.retained(size)...)
	}
}

// consoleOf returns the console of a stored instance. The console lives
// on the instance record, so deleting the instance drops its output and a
// new instance of the same name starts with empty ports, as on GCE, where
// output outlives the VM only if it was sent to Cloud Logging [view].
func (r *instanceRecord) consoleOf() *console {
	if r.console == nil {
		r.console = &console{}
	}
	return r.console
}

// SetSerialOutput makes text the whole output of an instance's serial port
// 1, as if the instance had written exactly text since it was created:
// positions restart at 0, and only the newest bytes that fit the buffer
// stay readable. The instance must exist (inserted, even if still
// PROVISIONING, or added); an unknown one panics, as it is a bug in the
// calling test.
func (s *Server) SetSerialOutput(zone, instance, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &s.mustInstance("SetSerialOutput", zone, instance).consoleOf().ports[0]
	*p = portBuffer{}
	p.write(text, s.serialBuffer)
}

// AppendSerialOutput appends text to an instance's serial port 1, as the
// guest writing to its console; tests script a console over time with
// it. Unknown instances panic, as for SetSerialOutput.
func (s *Server) AppendSerialOutput(zone, instance, text string) {
	s.AppendSerialPortOutput(zone, instance, 1, text)
}

// AppendSerialPortOutput appends text to serial port 1 to 4 of an
// instance; each port has its own positions and buffer [view]. A port
// outside 1 to 4 or an unknown instance panics.
func (s *Server) AppendSerialPortOutput(zone, instance string, port int, text string) {
	if port < 1 || port > serialPorts {
		panic(fmt.Sprintf("gcefake: AppendSerialPortOutput to port %d; GCE has ports 1 to %d", port, serialPorts))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustInstance("AppendSerialPortOutput", zone, instance).consoleOf().ports[port-1].write(text, s.serialBuffer)
}

// SetBootConsole sets what an inserted instance writes to serial port 1
// when it boots: once its insert completes and it turns RUNNING, the
// returned text is appended (nothing if it is ""). It lets a test or a
// demo give every podVM a console, such as a GPU readiness line or a boot
// failure, chosen from the instance it gets (a copy; its zone is the bare
// zone name). Instances from AddInstance model VMs that booted before, and
// failed inserts never boot, so neither runs it. The function is called
// with the Server's lock held and must not call the Server. nil turns it
// off.
func (s *Server) SetBootConsole(boot func(zone string, inst *computepb.Instance) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bootConsole = boot
}

// booted runs the boot console script for an instance that has just turned
// RUNNING; s.mu is held.
func (s *Server) booted(rec *instanceRecord) {
	s.guestBooted(rec)
	if s.bootConsole == nil {
		return
	}
	if text := s.bootConsole(rec.zone, proto.Clone(rec.inst).(*computepb.Instance)); text != "" {
		rec.consoleOf().ports[0].write(text, s.serialBuffer)
	}
}

func (s *Server) mustInstance(caller, zone, instance string) *instanceRecord {
	rec := s.instances[zone+"/"+instance]
	if rec == nil {
		panic(fmt.Sprintf("gcefake: %s for unknown instance %s/%s", caller, zone, instance))
	}
	return rec
}

func (s *Server) handleSerialPort(rc *reqCtx) (proto.Message, error) {
	// A deleted or never created instance has no output to serve: the
	// same 404 as instances.get. Output outlives a VM only in Cloud
	// Logging [view].
	rec, err := s.lookupInstance(rc)
	if err != nil {
		return nil, err
	}
	// port: 1 to 4, default 1 (discovery document; [view]).
	port := 1
	if v, ok := rc.query("port"); ok {
		if port, err = strconv.Atoi(v); err != nil || port < 1 || port > serialPorts {
			return nil, invalidField("port", v, "Must be between 1 and 4.")
		}
	}
	var start int64
	if v, ok := rc.query("start"); ok {
		if start, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, invalidField("start", v, "Must be an integer.")
		}
	}
	// Output is readable only while the VM is running [view]. The page
	// does not give the error; the fake answers 400 resourceNotReady,
	// GCE's answer for a resource in the wrong state (a choice). This
	// covers an insert still PROVISIONING, a delete in progress
	// (STOPPING) and a stopped or preempted VM (TERMINATED).
	if st := rec.inst.GetStatus(); st != "RUNNING" {
		return nil, s.notReady(rec)
	}
	var p portBuffer
	if rec.console != nil {
		p = rec.console.ports[port-1]
	}
	from, contents := p.read(start, s.serialBuffer)
	return &computepb.SerialPortOutput{
		Kind:     proto.String("compute#serialPortOutput"),
		SelfLink: proto.String(rec.inst.GetSelfLink() + "/serialPort"),
		Contents: proto.String(contents),
		Start:    proto.Int64(from),
		// next is the position after the returned output, to be sent
		// back as start [ref]; it is always the end of the output, as
		// the whole rest of the buffer is returned.
		Next: proto.Int64(p.total),
	}, nil
}

// read resolves a requested start to the absolute position the answer
// starts at, and returns the output from there to the end.
func (p *portBuffer) read(start int64, size int) (int64, string) {
	oldest, end := p.oldest(size), p.total
	var from int64
	switch {
	case start == 0:
		// Omitted or 0: from the first byte of output [ref], which
		// after a discard is the oldest still available.
		from = oldest
	case start < 0:
		// -N: the most recent N bytes, bounded by what the buffer
		// retains [ref].
		from = max(end+start, oldest)
	case start < oldest:
		// Discarded output: the start moves to the oldest output still
		// available and the answer's start says so [ref].
		from = oldest
	case start > end:
		// The pages do not cover a start past the end. The fake
		// answers empty output at the end (start = next = end), so a
		// caller that continues from next reads the following output
		// from its first byte instead of skipping to the position it
		// asked for (a choice, not a documented rule).
		from = end
	default:
		from = start
	}
	data := p.retained(size)
	out := string(data[int64(len(data))-(end-from):])
	// contents is a JSON string, which carries only UTF-8; a window cut
	// inside a multi-byte character or a binary console would not
	// encode. The fake sends U+FFFD for invalid bytes (a choice: the
	// pages do not say); start and next still count console bytes, so a
	// caller must continue from next, not from start+len(contents).
	return from, strings.ToValidUTF8(out, "\uFFFD")
}

// PowerOff models the guest powering its VM off (a podVM whose boot
// failed does, rather than waiting at an emergency shell): the instance
// turns TERMINATED at once, as GCE shows a VM shut down from inside, with
// lastStopTimestamp and the system operation GCE records for it
// (compute.instances.guestTerminate), and keeps its disks and console
// history; the console can no longer be read (handleSerialPort: only
// RUNNING VMs answer).
func (s *Server) PowerOff(zone, instance string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	rec := s.mustInstance("PowerOff", zone, instance)
	s.complete(s.systemOperation(rec, opGuestTerminate, "Instance terminated by guest OS shutdown."))
	s.settle()
	rec.inst.Status = proto.String("TERMINATED")
	rec.inst.LastStopTimestamp = proto.String(s.stamp())
}
