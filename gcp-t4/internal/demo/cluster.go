package demo

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// cluster is the demo's Kubernetes, in memory: pods, and the PeerPods the
// adaptor records for them, with the garbage collector's one move that
// matters here (deleting a pod deletes its PeerPods, which their finalizer
// holds). It is the adaptor's Recorder and the reaper's Cluster.
type cluster struct {
	mu       sync.Mutex
	pods     map[string]gc.Pod // namespace/name
	peerPods map[string]*peerpod.PeerPod
	next     int
}

func newCluster() *cluster {
	return &cluster{pods: map[string]gc.Pod{}, peerPods: map[string]*peerpod.PeerPod{}}
}

func (c *cluster) addPod(ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	c.pods[ns+"/"+name] = gc.Pod{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("pod-uid-%d", c.next)), Phase: corev1.PodRunning, Created: time.Now()}
}

func (c *cluster) deletePod(ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[ns+"/"+name]
	if !ok {
		return
	}
	delete(c.pods, ns+"/"+name)
	for key, pp := range c.peerPods {
		if pp.OwnerUID != p.UID {
			continue
		}
		if pp.Finalized {
			pp.Deleting = true
		} else {
			delete(c.peerPods, key)
		}
	}
}

// Own records a PeerPod, as CAA's OwnPeerPod does.
func (c *cluster) Own(_ context.Context, ns, pod, instanceID string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[ns+"/"+pod]
	if !ok {
		return "", fmt.Errorf("pod %s/%s not found", ns, pod)
	}
	c.next++
	name := fmt.Sprintf("%s-resource-%05d", pod, c.next)
	c.peerPods[ns+"/"+name] = &peerpod.PeerPod{Namespace: ns, Name: name, UID: types.UID(name), OwnerName: pod, OwnerUID: p.UID,
		InstanceID: instanceID, CloudProvider: gcpt4.ProviderName, Created: time.Now(), Finalized: true}
	return name, nil
}

// Release removes a PeerPod's finalizer (and the PeerPod, if it was
// being deleted).
func (c *cluster) Release(_ context.Context, ns, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pp, ok := c.peerPods[ns+"/"+name]; ok {
		pp.Finalized = false
		if pp.Deleting {
			delete(c.peerPods, ns+"/"+name)
		}
	}
	return nil
}

func (c *cluster) ListPods(context.Context) ([]gc.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []gc.Pod
	for _, p := range c.pods {
		out = append(out, p)
	}
	return out, nil
}

func (c *cluster) ListPeerPods(context.Context) ([]peerpod.PeerPod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []peerpod.PeerPod
	for _, pp := range c.peerPods {
		out = append(out, *pp)
	}
	return out, nil
}

func (c *cluster) ReleasePeerPod(ctx context.Context, ns, name string) error {
	return c.Release(ctx, ns, name)
}

func (c *cluster) peerPodNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for key := range c.peerPods {
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}
