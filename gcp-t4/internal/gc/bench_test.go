package gc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
)

// BenchmarkReaperPass is one reaper pass over a project holding n live
// podVMs of this cluster and n of another, each of ours with its pod and
// PeerPod: its GCE cost is the aggregated list pages (500 instances a
// page, both clusters' VMs counted), whatever the number of zones or
// nodes. Recorded in docs/benchmarks.md.
func BenchmarkReaperPass(b *testing.B) {
	for _, n := range []int{10, 300, 1000} {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			fake := gcefake.New()
			defer fake.Close()
			m := newMemCluster()
			created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			for i := 0; i < n; i++ {
				for _, cl := range []string{clusterA, "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"} {
					name := fmt.Sprintf("podvm-p%d-%.8s", i, cl)
					fake.AddInstance("us-central1-a", &computepb.Instance{Name: proto.String(name), MachineType: proto.String("n1-standard-4"),
						Labels: map[string]string{gcpt4.ManagedByLabel: gcpt4.ManagedByValue, gcpt4.ClusterLabel: cl, gcpt4.PodLabel: fmt.Sprintf("p%d", i), gcpt4.NamespaceLabel: "ml"}})
					if cl != clusterA {
						continue
					}
					uid := types.UID(fmt.Sprintf("uid-%d", i))
					m.pods[uid] = Pod{Namespace: "ml", Name: fmt.Sprintf("p%d", i), UID: uid, Phase: corev1.PodRunning, Created: created}
					m.peerPods[uid] = &peerpod.PeerPod{Namespace: "ml", Name: name, UID: uid, OwnerUID: uid, InstanceID: gcpt4.InstanceID("us-central1-a", name),
						CloudProvider: gcpt4.ProviderName, Created: created, Finalized: true}
				}
			}
			c := &Collector{VMs: newProvider(b, fake, clusterA), Cluster: m, Policy: DefaultPolicy(), Delete: true, Now: func() time.Time { return created.Add(time.Hour) }, Log: quiet()}
			fake.ResetCalls()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := c.Run(context.Background())
				if err != nil || p.Count(InUse) != n || p.OtherClusters != n {
					b.Fatalf("pass: %d in use, %d other clusters', %v", p.Count(InUse), p.OtherClusters, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(fake.CountCalls("instances.aggregatedList"))/float64(b.N), "gce-list-calls/pass")
			b.ReportMetric(float64(len(fake.Calls()))/float64(b.N), "gce-calls/pass")
		})
	}
}
