// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// caaCloudConfig is the cloud-config CAA hands the provider: apf.json with
// the pod's name and namespace (forwarder.Config, CAA v0.22.0).
func caaCloudConfig(ns, pod string) cloudinit.CloudConfigGenerator {
	return &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json",
		Content: `{"pod-network":{},"pod-namespace":"` + ns + `","pod-name":"` + pod + `","tls-client-ca":"x"}`}}}
}

func metadata(inst *computepb.Instance) map[string]string {
	out := map[string]string{}
	for _, it := range inst.GetMetadata().GetItems() {
		out[it.GetKey()] = it.GetValue()
	}
	return out
}

func TestPodVMCarriesClusterNodeAndNamespace(t *testing.T) {
	longNode := "gke-prod-gpu-pool-" + strings.Repeat("x", 60) + ".internal"
	p, fake := newTestProvider(t, func(c *Config) {
		c.ClusterName = "prod-eu"
		c.NodeName = longNode
	})
	if _, err := p.CreateInstance(context.Background(), "train-0", sandbox, caaCloudConfig("ml-team", "train-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	vm := fake.Instances()[0]
	l := vm.GetLabels()
	want := map[string]string{
		ManagedByLabel: ManagedByValue, ClusterLabel: clusterA, ClusterNameLabel: "prod-eu",
		NamespaceLabel: "ml-team", PodLabel: "train-0", SandboxLabel: sandbox[:63],
		NodeLabel: labelValue(longNode),
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("label %s = %q, want %q", k, l[k], v)
		}
	}
	if len(l[NodeLabel]) != 63 {
		t.Errorf("node label %q not cut to GCE's 63 characters", l[NodeLabel])
	}
	md := metadata(vm)
	if md[NodeMetadata] != longNode || md[NamespaceMetadata] != "ml-team" || md[SandboxMetadata] != sandbox {
		t.Errorf("metadata = %v, want the full node, namespace and sandbox", md)
	}
	// ListManaged reads the full values back.
	vms, err := p.ListManaged(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Node != longNode || vms[0].Namespace != "ml-team" || vms[0].Cluster != clusterA || vms[0].ClusterName != "prod-eu" || vms[0].Unidentified() {
		t.Errorf("ListManaged = %+v", vms)
	}
}

func TestCreateRefusedWithoutClusterID(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.ClusterID = "" })
	_, err := p.CreateInstance(context.Background(), "train-0", sandbox, caaCloudConfig("ml", "train-0"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "GCP_CLUSTER_ID") || !strings.Contains(err.Error(), "kube-system") {
		t.Fatalf("want a refusal naming GCP_CLUSTER_ID and how to find it, got %v", err)
	}
	if n := fake.CountCalls("instances.insert"); n != 0 {
		t.Errorf("%d inserts without a cluster identity", n)
	}
}

// TestTwoClustersShareAProject: each cluster's listing holds its own VMs
// and the unidentified one an older install left, never the other
// cluster's.
func TestTwoClustersShareAProject(t *testing.T) {
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	a, _ := newTestProviderOn(t, fake, func(c *Config) { c.ClusterID = clusterA })
	b, _ := newTestProviderOn(t, fake, func(c *Config) { c.ClusterID = clusterB })
	ctx := context.Background()
	if _, err := a.CreateInstance(ctx, "train-0", strings.Repeat("a", 64), caaCloudConfig("ml", "train-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInstance(ctx, "train-0", strings.Repeat("b", 64), caaCloudConfig("ml", "train-0"), oneT4); err != nil {
		t.Fatal(err)
	}
	// What a release before cluster labels left behind.
	fake.AddInstance("us-central1-a", &computepb.Instance{Name: proto.String("podvm-old-0-cccccccc"), MachineType: proto.String("n1-standard-4"),
		Labels: map[string]string{ManagedByLabel: ManagedByValue, PodLabel: "old-0", SandboxLabel: strings.Repeat("c", 63)}})
	for _, tc := range []struct {
		p    *Provider
		mine string
	}{{a, "podvm-train-0-aaaaaaaa"}, {b, "podvm-train-0-bbbbbbbb"}} {
		l, err := tc.p.ListManagedDetail(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, vm := range l.VMs {
			names = append(names, vm.Name)
		}
		if len(l.VMs) != 2 || l.VMs[0].Name != "podvm-old-0-cccccccc" || !l.VMs[0].Unidentified() || l.VMs[1].Name != tc.mine || l.OtherClusters != 1 {
			t.Errorf("cluster %s lists %v (%d other clusters'), want the unidentified VM and %s", tc.p.cfg.ClusterID, names, l.OtherClusters, tc.mine)
		}
	}
}

// adoptWithExternalIP leaves a VM of the sandbox that has an external IP,
// so the create adopts it and must get rid of it.
func adoptWithExternalIP(fake *gcefake.Server) {
	fake.AddInstance("us-central1-a", &computepb.Instance{
		Name: proto.String("podvm-train-0-01234567"), MachineType: proto.String("n1-standard-4"),
		Labels: map[string]string{ManagedByLabel: ManagedByValue, SandboxLabel: labelValue(sandbox), ClusterLabel: clusterA},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"),
			AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}}}},
	})
}

// TestExternalIPCleanupIsAFailedCreate: a VM that came up with an external
// IP is cleaned up like any other failed create; when that delete fails,
// the instance is returned so that CAA deletes it.
func TestExternalIPCleanupIsAFailedCreate(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	adoptWithExternalIP(fake)
	inst, err := p.CreateInstance(context.Background(), "train-0", sandbox, caaCloudConfig("ml", "train-0"), oneT4)
	if err == nil || !strings.Contains(err.Error(), "external IP") || inst != nil {
		t.Fatalf("want an error and no instance, got %+v, %v", inst, err)
	}
	if n := len(fake.Instances()); n != 0 {
		t.Fatalf("%d VMs left; the external-IP VM must be deleted", n)
	}

	p, fake = newTestProvider(t, nil)
	adoptWithExternalIP(fake)
	fake.FailNext("DELETE", "instances.delete", 500, callAttempts)
	inst, err = p.CreateInstance(context.Background(), "train-0", sandbox, caaCloudConfig("ml", "train-0"), oneT4)
	if err == nil || inst == nil || inst.ID != "zones/us-central1-a/instances/podvm-train-0-01234567" || len(inst.IPs) != 0 {
		t.Fatalf("a failed clean-up must hand the VM back for deletion without an address: %+v, %v", inst, err)
	}
}

// TestCreateIsBoundedAndCleansUpOnItsOwnContext: a create whose insert
// never finishes is cut off at its bound, and the VM GCE accepted is
// deleted on a context of its own rather than the expired one.
func TestCreateIsBoundedAndCleansUpOnItsOwnContext(t *testing.T) {
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	fake := gcefake.New(gcefake.WithClock(clk.Now), gcefake.WithLongPollLimit(20*time.Millisecond))
	t.Cleanup(fake.Close)
	p, _ := newTestProviderOn(t, fake, nil)
	p.createTimeout = 200 * time.Millisecond
	fake.SetOperationLatency(time.Hour)
	type result struct {
		err  error
		none bool
	}
	done := make(chan result, 1)
	go func() {
		inst, err := p.CreateInstance(context.Background(), "train-0", sandbox, caaCloudConfig("ml", "train-0"), oneT4)
		done <- result{err, inst == nil}
	}()
	// The clean-up's delete is issued after the create's context expired;
	// its operation then finishes when GCE's clock moves on.
	if err := fake.AwaitCalls(t.Context(), "instances.delete", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	r := <-done
	if r.err == nil || !errors.Is(r.err, context.DeadlineExceeded) || !r.none {
		t.Fatalf("want the create cut off (deadline exceeded) and nothing returned, got none=%v %v", r.none, r.err)
	}
	if n := len(fake.Instances()); n != 0 {
		t.Fatalf("%d VMs left after a bounded create", n)
	}
}
