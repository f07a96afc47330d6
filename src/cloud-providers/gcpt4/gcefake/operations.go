// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
)

// opRecord is a zonal operation. Its outcome is decided when it is created
// (so concurrent inserts see consistent quota), and applied when the clock
// reaches doneAt.
type opRecord struct {
	op     *computepb.Operation
	zone   string
	doneAt time.Time
	done   bool
	// onDone applies a successful outcome; failure replaces it.
	onDone  func()
	failure *opFailure
	// body is what made the request (for requestId replays); otherBodies
	// counts repeats of its requestId that sent something else.
	body        []byte
	otherBodies int
}

type opFailure struct {
	errs     []*computepb.Errors
	httpCode int32
	httpMsg  string
}

// newOperation registers an operation that completes after the configured
// latency; with zero latency it is DONE before the response is written.
func (s *Server) newOperation(zone, opType, targetName string, targetID uint64, requestID string) *opRecord {
	now := s.now()
	n := s.nextSeq()
	// Real names look like operation-<ms>-<hex>-<hex>-<hex>; uniqueness is
	// what callers rely on.
	name := fmt.Sprintf("operation-%d-%s", now.UnixMilli(), uuid.New().String()[:13])
	op := &computepb.Operation{
		Kind:          proto.String("compute#operation"),
		Id:            proto.Uint64(1_000_000_000_000 + n),
		Name:          proto.String(name),
		Zone:          proto.String(s.zoneURL(zone)),
		OperationType: proto.String(opType),
		TargetLink:    proto.String(s.instanceURL(zone, targetName)),
		TargetId:      proto.Uint64(targetID),
		Status:        computepb.Operation_RUNNING.Enum(),
		Progress:      proto.Int32(0),
		InsertTime:    proto.String(now.Format(timestamp)),
		StartTime:     proto.String(now.Format(timestamp)),
		User:          proto.String("demo@" + s.project + ".iam.gserviceaccount.com"),
		SelfLink:      proto.String(s.zoneURL(zone) + "/operations/" + name),
	}
	if requestID != "" {
		op.ClientOperationId = proto.String(requestID)
		s.requestIDs[requestKey("instances."+opType, zone, requestID)] = name
	}
	rec := &opRecord{op: op, zone: zone, doneAt: now.Add(s.latency)}
	s.ops[name] = rec
	s.opOrder = append(s.opOrder, rec)
	s.opLog = append(s.opLog, rec)
	return rec
}

// settle completes every operation whose time has come. Handlers call it
// (with s.mu held) before looking at state, so the world always reflects the
// clock.
func (s *Server) settle() {
	now := s.now()
	for _, rec := range s.opOrder {
		if !rec.done && !now.Before(rec.doneAt) {
			s.complete(rec)
		}
	}
	s.opOrder = slices.DeleteFunc(s.opOrder, func(r *opRecord) bool { return r.done })
}

func (s *Server) complete(rec *opRecord) {
	rec.done = true
	op := rec.op
	op.Status = computepb.Operation_DONE.Enum()
	op.Progress = proto.Int32(100)
	op.EndTime = proto.String(s.stamp())
	if f := rec.failure; f != nil {
		op.Error = &computepb.Error{Errors: f.errs}
		// GCE sometimes leaves these out; the apiv1 Wait then returns nil
		// and only op.Error tells the caller the insert failed.
		if !s.silentFail {
			op.HttpErrorStatusCode = proto.Int32(f.httpCode)
			op.HttpErrorMessage = proto.String(f.httpMsg)
		}
		return
	}
	if rec.onDone != nil {
		rec.onDone()
	}
}

func (s *Server) lookupOp(rc *reqCtx) (*opRecord, error) {
	rec := s.ops[rc.params["operation"]]
	if rec == nil || rec.zone != rc.params["zone"] {
		return nil, resourceNotFound(fmt.Sprintf("projects/%s/zones/%s/operations/%s", s.project, rc.params["zone"], rc.params["operation"]))
	}
	return rec, nil
}

func (s *Server) handleZoneOperationGet(rc *reqCtx) (proto.Message, error) {
	rec, err := s.lookupOp(rc)
	if err != nil {
		return nil, err
	}
	return proto.Clone(rec.op), nil
}

// handleZoneOperationWait is GCE's long-poll: it returns when the operation
// is DONE or when the long-poll limit (wall time) passes, whichever is first.
// With the real clock it sleeps for the remaining latency; with an injected
// clock it polls that clock, since only the test can move it.
func (s *Server) handleZoneOperationWait(rc *reqCtx) (proto.Message, error) {
	deadline := time.Now().Add(s.longPoll)
	parked := false
	for {
		out, wait, err := s.pollOperation(rc, deadline, &parked)
		if out != nil || err != nil {
			return out, err
		}
		t := time.NewTimer(min(wait, time.Until(deadline)))
		select {
		case <-rc.r.Context().Done():
		case <-s.closing:
		case <-t.C:
		}
		t.Stop()
	}
}

// pollOperation is one look at a waited-for operation, under s.mu (released
// by defer, also on panic). It returns the operation when the wait is over,
// else how long to sleep before looking again; *parked says whether this
// wait counts in s.parked, as it does while it sleeps.
func (s *Server) pollOperation(rc *reqCtx, deadline time.Time, parked *bool) (proto.Message, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *parked {
		s.parked--
		*parked = false
	}
	s.settle()
	rec, err := s.lookupOp(rc)
	if err != nil {
		return nil, 0, err
	}
	if rec.done || !time.Now().Before(deadline) || rc.r.Context().Err() != nil || s.isClosing() {
		return proto.Clone(rec.op), 0, nil
	}
	s.parked++
	*parked = true
	s.changed()
	if s.fakeClock {
		return nil, 5 * time.Millisecond, nil
	}
	return nil, max(rec.doneAt.Sub(s.now()), time.Millisecond), nil
}

func (s *Server) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

func httpStatusText(code int32) string {
	switch code {
	case http.StatusServiceUnavailable:
		return "SERVICE UNAVAILABLE"
	case http.StatusForbidden:
		return "FORBIDDEN"
	}
	return http.StatusText(int(code))
}
