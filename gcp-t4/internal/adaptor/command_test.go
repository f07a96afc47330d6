package adaptor

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// TestRunServesUntilCancelledThenLeavesVMs drives the `gcp-t4 adaptor`
// command: it serves until its context ends (SIGTERM in main), then stops
// and, as upstream CAA, leaves the VMs of the sandboxes still live.
func TestRunServesUntilCancelledThenLeavesVMs(t *testing.T) {
	fake := gcefake.New()
	defer fake.Close()
	dir := shortDir(t)
	sock := filepath.Join(dir, "hypervisor.sock")
	args := []string{
		"-socket", sock, "-pods-dir", filepath.Join(dir, "pods"),
		"-gcp-endpoint", fake.URL(), "-gcp-project-id", fake.Project(), "-zone", "us-central1-a",
		"-image-name", "podvm-t4", "-network", "global/networks/default", "-subnetwork", "default",
		"-cluster-id", testClusterID,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, "v-run", &stdout, &stderr, quietLogger()) }()

	shim := shimclient.New(sock, 0)
	// Wait until the socket answers; the command binds it after verifying
	// the provider's configuration.
	var v string
	var err error
	for i := 0; i < 500; i++ {
		if v, err = shim.Version(ctx); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run ended early: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err != nil || v != "v-run" {
		t.Fatalf("Version: %q, %v", v, err)
	}
	if _, err := shim.CreateVM(ctx, sid0, "", gpuPod("mistral-tp-0")); err != nil {
		t.Fatal(err)
	}
	if err := shim.StartVM(ctx, sid0, 0); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Instances()); n != 1 {
		t.Fatalf("%d VMs, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(fake.Instances()); n != 1 || fake.CountCalls("instances.delete") != 0 {
		t.Errorf("%d VMs left after the adaptor stopped (%d deletes), want the live sandbox's 1 and no delete", n, fake.CountCalls("instances.delete"))
	}
	if !strings.Contains(stdout.String(), "1 podVM(s) of live sandboxes left running") {
		t.Errorf("stdout does not say which VMs it left: %q", stdout.String())
	}
	if !strings.Contains(stdout.String(), sock) {
		t.Errorf("stdout does not say where it serves: %q", stdout.String())
	}
}

// Misuse is reported on stderr, the usage after it, and comes back as
// exit status 2; -h is the usage on stdout.
func TestRunRejectsBadFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"-no-such-flag"}, "v", &stdout, &stderr, quietLogger())
	if err != cli.ExitStatus(2) || !strings.Contains(stderr.String(), "gcp-t4 adaptor: flag provided but not defined: -no-such-flag") {
		t.Errorf("unknown flag: %v\n%s", err, stderr.String())
	}
	stderr.Reset()
	err = Run(context.Background(), []string{"-gcp-project-id", "p", "-zone", "us-central1-a", "stray"}, "v", &stdout, &stderr, quietLogger())
	if err != cli.ExitStatus(2) || !strings.Contains(stderr.String(), `unexpected argument "stray"`) {
		t.Errorf("stray argument: %v\n%s", err, stderr.String())
	}
	stderr.Reset()
	stdout.Reset()
	if err := Run(context.Background(), []string{"-h"}, "v", &stdout, &stderr, quietLogger()); err != nil || stderr.Len() != 0 {
		t.Errorf("-h: %v, stderr %q", err, stderr.String())
	}
	for _, want := range []string{"usage: gcp-t4 adaptor ", "-socket", "-pods-dir", "-gcp-project-id"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("usage lacks %s:\n%s", want, stdout.String())
		}
	}
}
