// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"strings"
	"sync"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// serialReq is a getSerialPortOutput request; nil port or start leaves
// the parameter out, as the client does.
func serialReq(name string, port *int32, start *int64) *computepb.GetSerialPortOutputInstanceRequest {
	return &computepb.GetSerialPortOutputInstanceRequest{Project: testProject, Zone: zoneA, Instance: name, Port: port, Start: start}
}

// readSerial reads one answer and fails the test on an error.
func readSerial(t *testing.T, c *compute.InstancesClient, name string, port *int32, start *int64) *computepb.SerialPortOutput {
	t.Helper()
	out, err := c.GetSerialPortOutput(testCtx(t), serialReq(name, port, start))
	if err != nil {
		t.Fatalf("GetSerialPortOutput(%s, port %v, start %v): %v", name, port, start, err)
	}
	return out
}

// wantSerial asserts one answer's start, next and contents.
func wantSerial(t *testing.T, out *computepb.SerialPortOutput, start, next int64, contents string) {
	t.Helper()
	if out.GetStart() != start || out.GetNext() != next || out.GetContents() != contents {
		t.Fatalf("got start %d next %d contents %q, want start %d next %d contents %q",
			out.GetStart(), out.GetNext(), out.GetContents(), start, next, contents)
	}
}

// A poller that feeds each next back as start reads the console exactly
// once, however it was written.
func TestSerialPortContinuation(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("tail", zoneA, 1))

	pieces := []string{"BIOS\n", "", "kernel: booting\n", "cloud-init: ", "done\n", "kata-agent listening\n"}
	var got strings.Builder
	var next int64
	for i, p := range pieces {
		s.AppendSerialOutput(zoneA, "tail", p)
		out := readSerial(t, c, "tail", nil, proto.Int64(next))
		if out.GetStart() != next {
			t.Fatalf("piece %d: start %d, asked for %d with nothing discarded", i, out.GetStart(), next)
		}
		if out.GetContents() != p || out.GetNext() != next+int64(len(p)) {
			t.Fatalf("piece %d: contents %q next %d, want %q next %d", i, out.GetContents(), out.GetNext(), p, next+int64(len(p)))
		}
		got.WriteString(out.GetContents())
		next = out.GetNext()
	}
	want := strings.Join(pieces, "")
	if got.String() != want {
		t.Fatalf("reassembled %q, want %q", got.String(), want)
	}
	// Nothing new: empty contents, same position.
	wantSerial(t, readSerial(t, c, "tail", nil, proto.Int64(next)), next, next, "")
	// Omitted start and start 0 both read from the first byte.
	wantSerial(t, readSerial(t, c, "tail", nil, nil), 0, next, want)
	wantSerial(t, readSerial(t, c, "tail", proto.Int32(1), proto.Int64(0)), 0, next, want)

	// SetSerialOutput replaces the whole history: positions restart.
	s.SetSerialOutput(zoneA, "tail", "rebooted\n")
	wantSerial(t, readSerial(t, c, "tail", nil, nil), 0, 9, "rebooted\n")
}

// With more output than the buffer holds, the oldest is gone: a start
// that points into it is moved to the oldest byte still there, and the
// answer's start says so.
func TestSerialPortTruncation(t *testing.T) {
	s := newFake(t, WithSerialBufferSize(10))
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("small", zoneA, 1))

	s.AppendSerialOutput(zoneA, "small", "0123456789")
	s.AppendSerialOutput(zoneA, "small", "abcdef")
	// 16 bytes written, 10 kept: positions 6 to 15.
	wantSerial(t, readSerial(t, c, "small", nil, nil), 6, 16, "6789abcdef")
	wantSerial(t, readSerial(t, c, "small", nil, proto.Int64(3)), 6, 16, "6789abcdef")
	wantSerial(t, readSerial(t, c, "small", nil, proto.Int64(6)), 6, 16, "6789abcdef")
	wantSerial(t, readSerial(t, c, "small", nil, proto.Int64(12)), 12, 16, "cdef")

	// A poller that fell behind learns how much it lost from start.
	next := int64(16)
	s.AppendSerialOutput(zoneA, "small", "ghijklmnopqrstuvwxyz") // 20 bytes in one write
	out := readSerial(t, c, "small", nil, proto.Int64(next))
	wantSerial(t, out, 26, 36, "qrstuvwxyz")
	if lost := out.GetStart() - next; lost != 10 {
		t.Fatalf("lost %d bytes, want 10", lost)
	}
	// Many small writes roll over the same way.
	for i := 0; i < 25; i++ {
		s.AppendSerialOutput(zoneA, "small", "+")
	}
	wantSerial(t, readSerial(t, c, "small", nil, nil), 51, 61, "++++++++++")
}

// A negative start reads the most recent bytes, bounded by what the
// buffer keeps.
func TestSerialPortNegativeStart(t *testing.T) {
	s := newFake(t, WithSerialBufferSize(8))
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("neg", zoneA, 1))

	s.AppendSerialOutput(zoneA, "neg", "abc")
	wantSerial(t, readSerial(t, c, "neg", nil, proto.Int64(-2)), 1, 3, "bc")
	// More than was ever written: everything.
	wantSerial(t, readSerial(t, c, "neg", nil, proto.Int64(-100)), 0, 3, "abc")

	s.AppendSerialOutput(zoneA, "neg", "defghijklm") // 13 written, 8 kept
	wantSerial(t, readSerial(t, c, "neg", nil, proto.Int64(-3)), 10, 13, "klm")
	wantSerial(t, readSerial(t, c, "neg", nil, proto.Int64(-8)), 5, 13, "fghijklm")
	// More than the buffer keeps: bounded by it.
	wantSerial(t, readSerial(t, c, "neg", nil, proto.Int64(-12)), 5, 13, "fghijklm")
}

// A start past the end answers empty output at the end, and continuing
// from that next misses nothing written later.
func TestSerialPortStartPastEnd(t *testing.T) {
	s := newFake(t)
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("ahead", zoneA, 1))

	wantSerial(t, readSerial(t, c, "ahead", nil, proto.Int64(50)), 0, 0, "")
	s.AppendSerialOutput(zoneA, "ahead", "hello\n")
	out := readSerial(t, c, "ahead", nil, proto.Int64(500))
	wantSerial(t, out, 6, 6, "")
	s.AppendSerialOutput(zoneA, "ahead", "world\n")
	wantSerial(t, readSerial(t, c, "ahead", nil, proto.Int64(out.GetNext())), 6, 12, "world\n")
}

// Ports 1 to 4 are separate consoles; port 1 is the default; others are
// refused.
func TestSerialPortPorts(t *testing.T) {
	s := newFake(t, WithSerialBufferSize(4))
	c := instancesClient(t, s)
	ctx := testCtx(t)
	mustInsert(t, c, zoneA, t4Instance("ports", zoneA, 1))

	s.AppendSerialOutput(zoneA, "ports", "one\n")
	s.AppendSerialPortOutput(zoneA, "ports", 2, "second port\n")
	s.AppendSerialPortOutput(zoneA, "ports", 4, "4")
	wantSerial(t, readSerial(t, c, "ports", nil, nil), 0, 4, "one\n")
	wantSerial(t, readSerial(t, c, "ports", proto.Int32(1), nil), 0, 4, "one\n")
	// Each port has its own positions and buffer.
	wantSerial(t, readSerial(t, c, "ports", proto.Int32(2), nil), 8, 12, "ort\n")
	wantSerial(t, readSerial(t, c, "ports", proto.Int32(3), nil), 0, 0, "")
	wantSerial(t, readSerial(t, c, "ports", proto.Int32(4), proto.Int64(-1)), 0, 1, "4")

	for _, p := range []int32{0, 5, -1} {
		_, err := c.GetSerialPortOutput(ctx, serialReq("ports", proto.Int32(p), nil))
		wantSyncErr(t, err, 400, "invalid")
	}
	mustPanic(t, "port 5", func() { s.AppendSerialPortOutput(zoneA, "ports", 5, "x") })
	mustPanic(t, "unknown instance", func() { s.AppendSerialOutput(zoneA, "nope", "x") })
	mustPanic(t, "buffer 0", func() { WithSerialBufferSize(0) })
}

// Output is readable only while the instance runs; a deleted instance
// has none, and a new one of the same name starts empty.
func TestSerialPortInstanceState(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now))
	c := instancesClient(t, s)
	ctx := testCtx(t)

	_, err := c.GetSerialPortOutput(ctx, serialReq("never", nil, nil))
	wantSyncErr(t, err, 404, "notFound")

	s.SetOperationLatency(time.Minute)
	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("vm", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	// PROVISIONING: written to, not yet readable.
	s.AppendSerialOutput(zoneA, "vm", "early\n")
	_, err = c.GetSerialPortOutput(ctx, serialReq("vm", nil, nil))
	if gerr := syncErr(t, err, 400, "resourceNotReady"); gerr.Message != "The resource 'projects/demo-project/zones/us-central1-a/instances/vm' is not ready" {
		t.Fatalf("message = %q", gerr.Message)
	}
	clk.Advance(time.Minute)
	if err := op.Wait(ctx); err != nil {
		t.Fatalf("wait: %v", err)
	}
	wantSerial(t, readSerial(t, c, "vm", nil, nil), 0, 6, "early\n")

	// Deleting: STOPPING is not RUNNING either; once gone, 404.
	dop, err := c.Delete(ctx, &computepb.DeleteInstanceRequest{Project: testProject, Zone: zoneA, Instance: "vm"})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = c.GetSerialPortOutput(ctx, serialReq("vm", nil, nil))
	wantSyncErr(t, err, 400, "resourceNotReady")
	clk.Advance(time.Minute)
	if err := dop.Wait(ctx); err != nil {
		t.Fatalf("delete wait: %v", err)
	}
	_, err = c.GetSerialPortOutput(ctx, serialReq("vm", nil, nil))
	wantSyncErr(t, err, 404, "notFound")
	mustPanic(t, "deleted instance", func() { s.AppendSerialOutput(zoneA, "vm", "x") })

	// The same name again: a new VM with an empty console.
	s.SetOperationLatency(0)
	mustInsert(t, c, zoneA, t4Instance("vm", zoneA, 1))
	wantSerial(t, readSerial(t, c, "vm", nil, nil), 0, 0, "")

	// A stopped VM keeps its name but serves no output.
	s.AddInstance(zoneA, &computepb.Instance{Name: proto.String("stopped"), Status: proto.String("TERMINATED")})
	s.AppendSerialOutput(zoneA, "stopped", "last words\n")
	_, err = c.GetSerialPortOutput(ctx, serialReq("stopped", nil, nil))
	wantSyncErr(t, err, 400, "resourceNotReady")
}

// The boot console is written once, when an inserted instance turns
// RUNNING, and is chosen from the instance.
func TestBootConsole(t *testing.T) {
	clk := newTestClock()
	s := newFake(t, WithClock(clk.Now))
	c := instancesClient(t, s)
	ctx := testCtx(t)

	var mu sync.Mutex
	calls := map[string]int{}
	s.SetBootConsole(func(zone string, inst *computepb.Instance) string {
		mu.Lock()
		defer mu.Unlock()
		calls[inst.GetName()]++
		if inst.GetStatus() != "RUNNING" || zone != zoneA {
			return "unexpected boot of " + inst.GetStatus() + " in " + zone + "\n"
		}
		// The hook gets a copy: changing it changes nothing stored.
		inst.Labels["tampered"] = "yes"
		if n := len(inst.GetGuestAccelerators()); n > 0 {
			return inst.GetName() + ": nvidia GPU ready\n"
		}
		return inst.GetName() + ": no GPU, boot failed\n"
	})
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[name]
	}

	s.SetOperationLatency(time.Minute)
	op, err := c.Insert(ctx, insertReq(zoneA, t4Instance("gpu", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if _, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "gpu"}); err != nil || count("gpu") != 0 {
		t.Fatalf("boot console ran %d times before the insert completed (%v)", count("gpu"), err)
	}
	clk.Advance(time.Minute)
	if err := op.Wait(ctx); err != nil {
		t.Fatalf("wait: %v", err)
	}
	want := "gpu: nvidia GPU ready\n"
	wantSerial(t, readSerial(t, c, "gpu", nil, nil), 0, int64(len(want)), want)
	// Later reads and writes do not boot it again.
	s.AppendSerialOutput(zoneA, "gpu", "pod started\n")
	wantSerial(t, readSerial(t, c, "gpu", nil, nil), 0, int64(len(want))+12, want+"pod started\n")
	if n := count("gpu"); n != 1 {
		t.Fatalf("boot console ran %d times, want 1", n)
	}
	inst, err := c.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: "gpu"})
	if err != nil || inst.GetLabels()["tampered"] != "" {
		t.Fatalf("the hook changed the stored instance: %v %v", inst.GetLabels(), err)
	}

	// Another instance gets its own line.
	s.SetOperationLatency(0)
	cpu := t4Instance("cpu", zoneA, 1)
	cpu.GuestAccelerators = nil
	cpu.Scheduling = nil
	mustInsert(t, c, zoneA, cpu)
	wantSerial(t, readSerial(t, c, "cpu", nil, nil), 0, 25, "cpu: no GPU, boot failed\n")

	// A failed insert and an added instance never boot.
	s.SetStockout(zoneA, true)
	fop, err := c.Insert(ctx, insertReq(zoneA, t4Instance("stocked", zoneA, 1)))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := fop.Wait(ctx); err == nil && fop.Proto().GetError() == nil {
		t.Fatal("insert into a stocked-out zone succeeded")
	}
	s.AddInstance(zoneA, &computepb.Instance{Name: proto.String("orphan")})
	wantSerial(t, readSerial(t, c, "orphan", nil, nil), 0, 0, "")
	if count("stocked") != 0 || count("orphan") != 0 {
		t.Fatalf("boot console ran for a failed insert (%d) or an added instance (%d)", count("stocked"), count("orphan"))
	}

	// nil turns it off.
	s.SetStockout(zoneA, false)
	s.SetBootConsole(nil)
	mustInsert(t, c, zoneA, t4Instance("quiet", zoneA, 1))
	wantSerial(t, readSerial(t, c, "quiet", nil, nil), 0, 0, "")
}

// contents is JSON text: bytes that are not UTF-8 (a window cut inside a
// character, binary output) come out as U+FFFD, while positions count
// console bytes.
func TestSerialPortNonUTF8(t *testing.T) {
	s := newFake(t, WithSerialBufferSize(4))
	c := instancesClient(t, s)
	mustInsert(t, c, zoneA, t4Instance("utf", zoneA, 1))

	s.AppendSerialOutput(zoneA, "utf", "xé€") // 1 + 2 + 3 bytes; the window keeps the last byte of é
	wantSerial(t, readSerial(t, c, "utf", nil, nil), 2, 6, "\uFFFD€")
	s.AppendSerialOutput(zoneA, "utf", "\xff")
	wantSerial(t, readSerial(t, c, "utf", nil, proto.Int64(6)), 6, 7, "\uFFFD")
}

// A console that writes for a long time costs at most twice its buffer.
func TestSerialPortBufferBounded(t *testing.T) {
	var p portBuffer
	for i := 0; i < 1000; i++ {
		p.write(string(rune('a'+i%26)), 10)
		if len(p.buf) >= 20 {
			t.Fatalf("after %d writes the port holds %d bytes for a 10-byte buffer", i+1, len(p.buf))
		}
	}
	if from, out := p.read(0, 10); p.total != 1000 || from != 990 || out != "cdefghijkl" {
		t.Fatalf("total %d, read from %d: %q", p.total, from, out)
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s: no panic", what)
		}
	}()
	f()
}
