package adaptor

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
)

// frame is one ttrpc frame as channel.go at v1.2.10 lays it out.
func frame(typ byte, payload []byte) []byte {
	h := make([]byte, frameHeaderLen)
	binary.BigEndian.PutUint32(h[:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[4:8], 7)
	h[frameTypeByteOffset] = typ
	return append(h, payload...)
}

// nopConn takes every write.
type nopConn struct{ net.Conn }

func (nopConn) Write(p []byte) (int, error) { return len(p), nil }

func TestDrainCountsResponseFramesHoweverWritesSplit(t *testing.T) {
	var stream []byte
	stream = append(stream, frame(frameTypeResponse, []byte("answer one"))...)
	stream = append(stream, frame(0x3, bytes.Repeat([]byte{frameTypeResponse}, 40))...) // data frame whose payload looks like headers
	stream = append(stream, frame(frameTypeResponse, nil)...)
	stream = append(stream, frame(0x1, []byte("request"))...)
	stream = append(stream, frame(frameTypeResponse, bytes.Repeat([]byte("x"), 5000))...)
	// Every chunk size, so each header and payload boundary falls inside
	// a write, between two, and at its end.
	for size := 1; size <= len(stream); size += max(1, size/3) {
		d := newDrain()
		c := &drainConn{Conn: nopConn{}, d: d}
		for p := stream; len(p) > 0; {
			k := min(size, len(p))
			if _, err := c.Write(p[:k]); err != nil {
				t.Fatal(err)
			}
			p = p[k:]
		}
		if d.written != 3 {
			t.Fatalf("writes of %d bytes: %d response frames counted, want 3", size, d.written)
		}
	}
}

func TestDrainSettledWaitsForTheAnswer(t *testing.T) {
	d := newDrain()
	d.update(func() { d.running++ })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.settled(ctx); err == nil {
		t.Fatal("settled with a call in its handler")
	}
	d.update(func() { d.running--; d.answered++ })
	if err := d.settled(ctx); err == nil {
		t.Fatal("settled with an answer not yet written")
	}
	c := &drainConn{Conn: nopConn{}, d: d}
	if _, err := c.Write(frame(frameTypeResponse, []byte("ok"))); err != nil {
		t.Fatal(err)
	}
	if err := d.settled(ctx); err != nil {
		t.Fatalf("settled after the answer was written: %v", err)
	}
}
