package gc

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// child is `gcp-t4 adaptor` in a process of its own (this test binary,
// see TestMain), so that it can be killed as the kernel kills it.
type child struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startChild(t *testing.T, args []string) *child {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), childArgsEnv+"="+string(raw))
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

// waitFor polls a condition until it holds or a minute has passed; the
// test then fails with what the adaptor printed.
func waitFor(t *testing.T, what string, c *child, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; adaptor output:\n%s", what, c.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestScenarioAdaptorKilledBetweenInsertAndReturn: GCE accepts the insert
// for sandbox 1111, then the adaptor is SIGKILLed before CreateInstance
// returns, so CAA never records the VM. It restarts; the kubelet retries
// the pod as sandbox 2222, which gets its VM and PeerPod. The reaper
// deletes exactly the leaked VM, and the restarted adaptor, stopped with
// SIGTERM, leaves the live one as upstream CAA does.
func TestScenarioAdaptorKilledBetweenInsertAndReturn(t *testing.T) {
	k := startKube(t)
	fake := gcefake.New(gcefake.WithLongPollLimit(50 * time.Millisecond))
	defer fake.Close()
	k.pod(t, "ml", "train-0")
	args := k.adaptorFlags(fake, shortTempDir(t))
	shim := shimclient.New(args[1], 0)
	up := func() bool { _, err := shim.Version(t.Context()); return err == nil }

	first := startChild(t, args)
	waitFor(t, "the adaptor's socket", first, up)
	const sid1111 = "1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa"
	const sid2222 = "2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb"
	sb := shimclient.Sandbox{Name: "train-0", Namespace: "ml", VCPUs: 3, MemoryMiB: 12288, GPUs: 1}
	if _, err := shim.CreateVM(t.Context(), sid1111, "", sb); err != nil {
		t.Fatal(err)
	}
	// GCE takes its time with the insert; the create waits on it.
	fake.SetOperationLatency(time.Hour)
	started := make(chan error, 1)
	go func() { started <- shim.StartVM(t.Context(), sid1111, 0) }()
	waitFor(t, "GCE to accept the insert", first, func() bool { return vmOfSandbox(fake, sid1111) != "" })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	if err := <-started; err == nil {
		t.Fatal("StartVM returned success from a killed adaptor")
	}
	leaked := vmOfSandbox(fake, sid1111)

	fake.SetOperationLatency(0)
	second := startChild(t, args)
	waitFor(t, "the restarted adaptor's socket", second, up)
	if _, err := shim.CreateVM(t.Context(), sid2222, "", sb); err != nil {
		t.Fatal(err)
	}
	if err := shim.StartVM(t.Context(), sid2222, 0); err != nil {
		t.Fatalf("the retried sandbox: %v\n%s", err, second.out.String())
	}
	live := vmOfSandbox(fake, sid2222)
	pps, err := peerpod.Client{Dynamic: k.dyn}.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(pps) != 1 || pps[0].InstanceID != live {
		t.Fatalf("PeerPods %+v: want one, naming the retried sandbox's VM %s (the killed create recorded nothing)", pps, live)
	}

	p := k.reap(t, fake)
	if p.Count(Deleted) != 1 || p.Count(InUse) != 1 {
		t.Errorf("reaper pass: %d deleted, %d in use; want 1 and 1: %+v", p.Count(Deleted), p.Count(InUse), p.Findings)
	}
	outcome(t, "adaptor SIGKILLed between insert and return", fake, []string{live}, []string{leaked})

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("adaptor after SIGTERM: %v\n%s", err, second.out.String())
	}
	if vmOfSandbox(fake, sid2222) == "" || fake.CountCalls("instances.delete") != 1 {
		t.Errorf("after SIGTERM the live VM must stay (upstream CAA leaves it); VM present=%v, deletes=%d", vmOfSandbox(fake, sid2222) != "", fake.CountCalls("instances.delete"))
	}
}
