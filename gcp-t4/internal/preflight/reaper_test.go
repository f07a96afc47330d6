package preflight

import (
	"context"
	"io"
	"log"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// TestReaperRoleIsWhatTheReaperCalls: a reaper pass on gcefake (list this
// cluster's podVMs, read what stopped a lost one, delete it) records calls
// whose permissions are the reaper's role, no more and no less.
func TestReaperRoleIsWhatTheReaperCalls(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	fake.SetOperationLatency(20 * time.Millisecond)
	cfg := baseConfig(fake)
	cfg.Endpoint = ""
	ctx := context.Background()
	caa, err := gcpt4.NewProvider(ctx, cfg, log.New(io.Discard, "", 0), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer caa.Teardown()
	cc := &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: "{}"}}}
	inst, err := caa.CreateInstance(ctx, "llm", strings.Repeat("a", 64), cc, provider.InstanceTypeSpec{GPUs: 1, VCPUs: 2, Memory: 8192})
	if err != nil {
		t.Fatal(err)
	}
	fake.ResetCalls()
	reaper, err := gcpt4.NewProvider(ctx, cfg, log.New(io.Discard, "", 0), fake.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer reaper.Teardown()
	list, err := reaper.ListManagedDetail(ctx)
	if err != nil || len(list.VMs) != 1 {
		t.Fatalf("list: %v, %+v", err, list)
	}
	// A lost podVM: what ended it, then its delete.
	if err := fake.Interrupt("us-central1-a", inst.Name, gcefake.HostMaintenance); err != nil {
		t.Fatal(err)
	}
	if _, err := reaper.Interruption(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := reaper.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	need := map[string]bool{}
	for _, call := range fake.Calls() {
		perm, ok := methodPermissions[call.Kind]
		if !ok {
			t.Fatalf("the reaper calls %s (%s), which methodPermissions does not map", call.Path, call.Kind)
		}
		need[perm] = true
	}
	var got []string
	for p := range need {
		got = append(got, p)
	}
	sort.Strings(got)
	if !slices.Equal(got, ReaperPermissions) {
		t.Errorf("reaper calls need %v; the role is %v", got, ReaperPermissions)
	}
	fix := ReaperRoleFix("p", "")
	for _, s := range []string{"--permissions=" + strings.Join(ReaperPermissions, ","), "workloadIdentityPools/p.svc.id.goog/subject/ns/confidential-containers-system/sa/caa-gcp-t4-reaper", "startsWith(\"podvm-\")"} {
		if !strings.Contains(fix, s) {
			t.Errorf("fix %q lacks %q", fix, s)
		}
	}
	if strings.Contains(fix, "compute.instances.create") || strings.Contains(fix, "setMetadata") {
		t.Errorf("the reaper's role can create or rewrite VMs: %s", fix)
	}
}
