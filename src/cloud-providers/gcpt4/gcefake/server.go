// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const (
	defaultProject = "demo-project"
	// apiBase is what GCE puts in selfLinks regardless of the endpoint the
	// client talked to, so the fake does the same.
	apiBase   = "https://www.googleapis.com/compute/v1/"
	pathBase  = "/compute/v1/projects/"
	timestamp = "2006-01-02T15:04:05.000-07:00"
	// defaultLongPoll is GCE's documented upper bound for operations.wait.
	defaultLongPoll = 2 * time.Minute
)

// Server is a fake Compute Engine endpoint. All state sits behind one mutex,
// so a Server is safe for concurrent use by clients and test code.
type Server struct {
	mu sync.Mutex
	ts *httptest.Server
	// closing releases long-polls on Close; httptest.Server.Close waits
	// for in-flight requests and would otherwise block for the whole poll.
	closing   chan struct{}
	closeOnce sync.Once

	project   string
	now       func() time.Time
	fakeClock bool
	longPoll  time.Duration

	// serialBuffer is how many bytes each serial port retains; bootConsole
	// is what an inserted instance writes when it boots (serial.go).
	serialBuffer int
	bootConsole  func(zone string, inst *computepb.Instance) string

	world *world
	mux   *http.ServeMux

	instances  map[string]*instanceRecord // key zone/name
	ops        map[string]*opRecord       // key operation name
	opOrder    []*opRecord
	opLog      []*opRecord       // every operation, oldest first (zoneOperations.list)
	requestIDs map[string]string // requestId -> operation name
	usedIPs    map[string]bool
	nextHost   map[string]uint32 // region -> next host offset in the subnet
	nextNAT    uint32

	stockout   map[string]bool
	silentFail bool
	latency    time.Duration
	faults     []*fault

	calls []*Call
	seq   uint64

	// notify is closed and replaced whenever a call is recorded or a
	// long-poll parks, waking AwaitCalls and AwaitLongPolls.
	notify chan struct{}
	// parked counts zoneOperations.wait requests blocked on a RUNNING
	// operation.
	parked int
	// xpnHost is the Shared VPC host project (xpn.go); "" for none.
	xpnHost string
	// v1 is the IAM and organisation policy state (v1.go).
	v1 v1State
}

// Option configures a Server at construction time.
type Option func(*Server)

// WithProject sets the only project the fake serves (default "demo-project").
func WithProject(id string) Option {
	return func(s *Server) { s.project = id }
}

// WithClock injects the time source that drives operation latency. With an
// injected clock, operations.wait polls that clock instead of sleeping for the
// remaining latency, so tests advance time explicitly.
func WithClock(now func() time.Time) Option {
	return func(s *Server) {
		s.now = now
		s.fakeClock = true
	}
}

// WithLongPollLimit bounds how long zoneOperations.wait blocks in wall time
// (GCE: about two minutes). Tests with a fake clock that is never advanced use
// it to keep a forgotten wait from stalling the suite.
func WithLongPollLimit(d time.Duration) Option {
	return func(s *Server) { s.longPoll = d }
}

// WithSerialBufferSize sets how many of the newest bytes each serial port
// keeps readable (GCE: 1 MB), so tests can make output roll over without
// writing a megabyte. Positions keep counting every byte written. n below 1
// panics: it is a bug in the calling test.
func WithSerialBufferSize(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("gcefake: WithSerialBufferSize(%d): a serial port keeps at least one byte", n))
	}
	return func(s *Server) { s.serialBuffer = n }
}

// Call is one recorded HTTP request.
type Call struct {
	Method   string
	Kind     string
	Path     string
	RawQuery string
	Body     []byte
	Status   int
}

type fault struct {
	method string
	kind   string
	code   int
	reason string
	left   int
}

// New starts a fake with the default world (see world.go).
func New(opts ...Option) *Server { return newServer(routeTable(), opts...) }

// newServer starts a fake serving routes; tests add routes of their own.
func newServer(routes []route, opts ...Option) *Server {
	s := &Server{
		project:    defaultProject,
		closing:    make(chan struct{}),
		notify:     make(chan struct{}),
		now:        time.Now,
		longPoll:   defaultLongPoll,
		instances:  map[string]*instanceRecord{},
		ops:        map[string]*opRecord{},
		requestIDs: map[string]string{},
		usedIPs:    map[string]bool{},
		nextHost:   map[string]uint32{},
		stockout:   map[string]bool{},
	}
	s.serialBuffer = defaultSerialBuffer
	for _, o := range opts {
		o(s)
	}
	s.world = defaultWorld(s.project)
	s.mux = s.newMux(routes)
	s.ts = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	// After the listener: resource references resolve against its URL.
	s.world.infra = newInfra(s)
	return s
}

// Close releases pending long-polls and shuts the HTTP server down. It is
// safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	s.ts.Close()
}

// URL is the endpoint without a trailing slash; the apiv1 REST client appends
// "/compute/v1/..." and a trailing slash would produce "//compute".
func (s *Server) URL() string { return strings.TrimSuffix(s.ts.URL, "/") }

// ClientOptions are what a compute.New*RESTClient needs to talk to the fake.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(s.URL()),
		option.WithoutAuthentication(),
		option.WithHTTPClient(s.ts.Client()),
	}
}

// Project is the project the fake serves.
func (s *Server) Project() string { return s.project }

// SetStockout makes every insert in zone fail asynchronously with
// ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS.
func (s *Server) SetStockout(zone string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stockout[zone] = on
}

// SetSilentOperationFailure makes failed operations omit httpErrorStatusCode
// and httpErrorMessage, which GCE sometimes does; the apiv1 Wait then reports
// success and only op.Proto().GetError() reveals the failure.
func (s *Server) SetSilentOperationFailure(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.silentFail = on
}

// SetOperationLatency keeps new operations RUNNING for d (measured by the
// clock) before they complete.
func (s *Server) SetOperationLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// FailNext makes the next n requests with this HTTP method and kind fail with
// code before any side effect. The reason follows the code: 429 ->
// rateLimitExceeded, 503 -> backendError, anything else -> invalid.
func (s *Server) FailNext(method, kind string, code, n int) {
	reason := "invalid"
	switch code {
	case http.StatusTooManyRequests:
		reason = "rateLimitExceeded"
	case http.StatusServiceUnavailable:
		reason = "backendError"
	}
	s.FailNextReason(method, kind, code, reason, n)
}

// FailNextReason is FailNext with an explicit errors[0].reason, e.g. GCE's
// 403 "rateLimitExceeded" or 403 "quotaExceeded".
func (s *Server) FailNextReason(method, kind string, code int, reason string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: strings.ToUpper(method), kind: kind, code: code, reason: reason, left: n})
}

// Calls returns copies of the recorded requests, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, 0, len(s.calls))
	for _, c := range s.calls {
		cp := *c
		cp.Body = slices.Clone(c.Body)
		out = append(out, cp)
	}
	return out
}

// CountCalls counts recorded requests of one kind.
func (s *Server) CountCalls(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countCalls(kind)
}

// AwaitCalls blocks until at least n requests of kind are recorded (as
// CountCalls counts them) or ctx ends. The handler of a recorded call has
// run, zoneOperations.wait excepted: it waits after it is recorded, which
// AwaitLongPolls observes.
func (s *Server) AwaitCalls(ctx context.Context, kind string, n int) error {
	return s.await(ctx, fmt.Sprintf("%d %s call(s)", n, kind), func() bool { return s.countCalls(kind) >= n })
}

// AwaitLongPolls blocks until at least n zoneOperations.wait requests are
// blocked on an operation that is still RUNNING, or ctx ends. Such a wait
// returns only when its operation completes (with WithClock: once the
// clock is advanced past it), its request ends, the long-poll limit passes
// or the Server closes.
func (s *Server) AwaitLongPolls(ctx context.Context, n int) error {
	return s.await(ctx, fmt.Sprintf("%d parked zoneOperations.wait call(s)", n), func() bool { return s.parked >= n })
}

// await blocks until cond, checked under s.mu, holds.
func (s *Server) await(ctx context.Context, what string, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.notify
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("gcefake: waiting for %s: %w", what, ctx.Err())
		}
	}
}

// changed wakes every await; s.mu must be held.
func (s *Server) changed() {
	close(s.notify)
	s.notify = make(chan struct{})
}

func (s *Server) countCalls(kind string) int {
	n := 0
	for _, c := range s.calls {
		if c.Kind == kind {
			n++
		}
	}
	return n
}

// ResetCalls forgets the recorded requests.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// Instances returns deep copies of all stored instances, sorted by zone then
// name.
func (s *Server) Instances() []*computepb.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	recs := make([]*instanceRecord, 0, len(s.instances))
	for _, r := range s.instances {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].zone != recs[j].zone {
			return recs[i].zone < recs[j].zone
		}
		return recs[i].inst.GetName() < recs[j].inst.GetName()
	})
	out := make([]*computepb.Instance, 0, len(recs))
	for _, r := range recs {
		out = append(out, proto.Clone(r.inst).(*computepb.Instance))
	}
	return out
}

// reqCtx carries what a handler needs about one request.
type reqCtx struct {
	r       *http.Request
	project string
	params  map[string]string
	body    []byte
}

func (rc *reqCtx) query(name string) (string, bool) {
	v, ok := rc.r.URL.Query()[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// handlerFunc returns the response message; an *apiError becomes GCE's JSON
// error shape.
type handlerFunc func(s *Server, rc *reqCtx) (proto.Message, error)

type route struct {
	method string
	kind   string
	// path is a ServeMux pattern below /compute/v1/projects/{project}/.
	path string
	h    handlerFunc
	// unlocked handlers manage the mutex themselves (long-polls must not
	// hold it while they wait).
	unlocked bool
	// anyProject lets read-only image lookups reach public image projects
	// (GCE serves e.g. debian-cloud to everyone).
	anyProject bool
	// vpc routes read the VPC, which lives in the Shared VPC host
	// project when one is set (xpn.go).
	vpc bool
}

// serve records one Compute request and answers it: with routeErr when
// routing already failed, else through rt's handler.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt *route, project string, params map[string]string, routeErr *apiError) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.writeError(w, apiErr(http.StatusBadRequest, "badRequest", fmt.Sprintf("reading request body: %v", err)))
		return
	}
	msg, err := s.dispatch(&reqCtx{r: r, project: project, params: params, body: body}, rt, routeErr)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeProto(w, msg)
}

// dispatch records the call and runs its handler. Recording and a locked
// handler happen under one hold of s.mu, so once a call is visible in
// Calls its handler has run (zoneOperations.wait excepted: it waits
// without the lock). Every exit, a panicking handler's included, releases
// s.mu: net/http recovers the panic, and later requests must not hang.
func (s *Server) dispatch(rc *reqCtx, rt *route, routeErr *apiError) (msg proto.Message, err error) {
	r := rc.r
	kind := ""
	if rt != nil {
		kind = rt.kind
	}
	s.mu.Lock()
	locked := true
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	call := &Call{Method: r.Method, Kind: kind, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Body: bytes.Clone(rc.body)}
	s.calls = append(s.calls, call)
	s.changed()

	if routeErr == nil {
		routeErr = s.takeFault(r.Method, kind)
	}
	if routeErr == nil {
		routeErr = s.projectGate(rt, rc.project, r.URL.Path)
	}
	if routeErr != nil {
		call.Status = routeErr.code
		return nil, routeErr
	}
	if rt.unlocked {
		s.mu.Unlock()
		locked = false
		msg, err = rt.h(s, rc)
		s.mu.Lock()
		locked = true
	} else {
		s.settle()
		msg, err = rt.h(s, rc)
	}
	call.Status = http.StatusOK
	if err != nil {
		call.Status = errorCode(err)
	}
	return msg, err
}

func (s *Server) takeFault(method, kind string) *apiError {
	for i, f := range s.faults {
		if f.method != method || f.kind != kind || f.left <= 0 {
			continue
		}
		f.left--
		if f.left == 0 {
			s.faults = slices.Delete(s.faults, i, i+1)
		}
		return apiErr(f.code, f.reason, fmt.Sprintf("Injected failure (%d %s) for %s %s.", f.code, f.reason, method, kind))
	}
	return nil
}

func (s *Server) writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.Marshal(m)
	if err != nil {
		s.writeError(w, fmt.Errorf("marshalling %T response: %w", m, err))
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Server) writeError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	code := errorCode(err)
	w.WriteHeader(code)
	_, _ = w.Write(errorBody(err))
}

// nextSeq hands out unique numbers for ids, operation names and fingerprints.
func (s *Server) nextSeq() uint64 {
	s.seq++
	return s.seq
}

func (s *Server) stamp() string { return s.now().Format(timestamp) }
