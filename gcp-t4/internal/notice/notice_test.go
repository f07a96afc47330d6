package notice

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"google.golang.org/protobuf/proto"
)

const zone = "us-central1-a"

func status(t *testing.T, fake *gcefake.Server, name string) string {
	t.Helper()
	for _, in := range fake.Instances() {
		if in.GetName() == name {
			return in.GetStatus()
		}
	}
	return "gone"
}

func readNotice(t *testing.T, ctx context.Context, url string) Notice {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	var n Notice
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return n
}

// emulator is a GCE emulator on a clock of its own holding one instance
// with the given scheduling, whose operations take 30 s of that clock: a
// stop stays STOPPING until the test moves the clock.
func emulator(t *testing.T, name string, sc *computepb.Scheduling) (*gcefake.Server, *gcefake.Clock) {
	t.Helper()
	clk := gcefake.NewClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	fake := gcefake.New(gcefake.WithClock(clk.Now))
	t.Cleanup(fake.Close)
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String(name), MachineType: proto.String("n1-standard-8"), Scheduling: sc})
	fake.SetOperationLatency(30 * time.Second)
	return fake, clk
}

func spot() *computepb.Scheduling {
	return &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), OnHostMaintenance: proto.String("TERMINATE")}
}

func gpuVM() *computepb.Scheduling {
	return &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)}
}

// podVM runs what the podVM runs for one emulator instance: the watcher on
// the instance's guest metadata and the server the containers ask. It
// returns the server's URL and the notices the console got.
func podVM(t *testing.T, ctx context.Context, fake *gcefake.Server, clk *gcefake.Clock, name string) (string, <-chan Notice) {
	t.Helper()
	md := httptest.NewServer(fake.GuestMetadata(zone, name))
	t.Cleanup(md.Close)
	st := NewState(clk.Now)
	console := make(chan Notice, 8)
	w := &Watcher{Base: md.URL, Client: md.Client(), State: st, Log: slog.New(slog.DiscardHandler),
		Hang: time.Minute, Retry: 10 * time.Millisecond, OnChange: func(n Notice) { console <- n }}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(wctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(Handler(st, time.Minute))
	t.Cleanup(srv.Close)
	return srv.URL + Path, console
}

// The acceptance of a notice turned into something the workload can act
// on, on the emulator: a container hanging on the podVM's endpoint gets
// the preemption notice while the VM is still stopping, with GCE's 30 s,
// and the host maintenance notice while the VM still runs, with 60 s; the
// hard off comes only after.
func TestNoticeReachesTheWorkloadBeforeHardOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, clk := emulator(t, "spot", spot())
	fake.AddInstance(zone, &computepb.Instance{Name: proto.String("gpu"), MachineType: proto.String("n1-standard-8"), Scheduling: gpuVM()})

	for _, tc := range []struct {
		name  string
		ev    gcefake.HostEvent
		first func() error // GCE's notice
		want  Event
		left  int
	}{
		{"spot", gcefake.Preemption, func() error { return fake.Interrupt(zone, "spot", gcefake.Preemption) }, Preemption, 30},
		{"gpu", gcefake.HostMaintenance, func() error { return fake.Notice(zone, "gpu", gcefake.HostMaintenance) }, Maintenance, 60},
	} {
		url, console := podVM(t, ctx, fake, clk, tc.name)
		if n := readNotice(t, ctx, url); n.Drain || n.Event != None {
			t.Fatalf("%s: before any notice the workload read %+v", tc.name, n)
		}
		got := make(chan Notice, 1)
		go func() { got <- readNotice(t, ctx, url+"?wait=true") }()
		if err := tc.first(); err != nil {
			t.Fatal(err)
		}
		n := <-got
		st := status(t, fake, tc.name)
		if !n.Drain || n.Event != tc.want || n.RemainingSeconds != tc.left || n.Deadline == nil {
			t.Fatalf("%s: the workload read %+v, want %s with %d s left", tc.name, n, tc.want, tc.left)
		}
		if st == "TERMINATED" || st == "gone" {
			t.Fatalf("%s: the notice reached the workload only after the hard off (%s)", tc.name, st)
		}
		if c := <-console; c.Event != tc.want {
			t.Fatalf("%s: the console line said %s", tc.name, c.Event)
		}
		if tc.ev == gcefake.HostMaintenance {
			if err := fake.Interrupt(zone, tc.name, tc.ev); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
		if st := status(t, fake, tc.name); st != "TERMINATED" {
			t.Fatalf("%s: after the stop the VM is %s", tc.name, st)
		}
		// The deadline has passed: nothing left, and the answer says so.
		if n := readNotice(t, ctx, url); n.RemainingSeconds != 0 || !n.Drain {
			t.Fatalf("%s: after the deadline the workload read %+v", tc.name, n)
		}
	}
}

// A wait with nothing coming ends at the server's limit with the quiet
// notice; a live migration is reported but says not to drain; a bad wait
// value is refused with the field named.
func TestHandler(t *testing.T) {
	clk := gcefake.NewClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	st := NewState(clk.Now)
	srv := httptest.NewServer(Handler(st, 10*time.Millisecond))
	defer srv.Close()
	ctx := context.Background()
	if n := readNotice(t, ctx, srv.URL+Path+"?wait=true"); n.Event != None || n.Drain {
		t.Fatalf("quiet wait: %+v", n)
	}
	if n, changed := st.Set(KeyMaintenance, "MIGRATE_ON_HOST_MAINTENANCE"); !changed || n.Event != Migration || n.Drain {
		t.Fatalf("migration: %+v changed=%v", n, changed)
	}
	if _, changed := st.Set(KeyMaintenance, "MIGRATE_ON_HOST_MAINTENANCE"); changed {
		t.Fatal("the same value counted as a change")
	}
	// A preemption outranks maintenance and restarts the clock.
	st.Set(KeyMaintenance, "TERMINATE_ON_HOST_MAINTENANCE")
	clk.Advance(20 * time.Second)
	if n, _ := st.Set(KeyPreempted, "TRUE"); n.Event != Preemption || n.RemainingSeconds != 30 {
		t.Fatalf("preemption after maintenance: %+v", n)
	}
	// A value this package does not know is read as a stop.
	st2 := NewState(clk.Now)
	if n, _ := st2.Set(KeyMaintenance, "SOMETHING_NEW"); !n.Drain || n.Event != Maintenance {
		t.Fatalf("unknown maintenance value: %+v", n)
	}
	resp, err := http.Get(srv.URL + Path + "?wait=soon")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || string(b) != "wait: want true or false\n" {
		t.Fatalf("bad wait: %s %q", resp.Status, b)
	}
}
