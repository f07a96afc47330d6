package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Rollout is a DaemonSet's progress, as `kubectl rollout status` judges it.
type Rollout struct {
	Current                     bool // the controller has seen the latest spec
	Desired, Updated, Available int32
	Done                        bool
}

func rolloutOf(ds *appsv1.DaemonSet) Rollout {
	s := ds.Status
	r := Rollout{
		Current:   s.ObservedGeneration >= ds.Generation,
		Desired:   s.DesiredNumberScheduled,
		Updated:   s.UpdatedNumberScheduled,
		Available: s.NumberAvailable,
	}
	r.Done = r.Current && r.Updated >= r.Desired && r.Available >= r.Desired
	return r
}

func (r Rollout) String() string {
	if !r.Current {
		return "waiting for the DaemonSet controller to see the new spec"
	}
	return fmt.Sprintf("%d of %d nodes updated, %d available", r.Updated, r.Desired, r.Available)
}

// WaitRollout polls the CAA DaemonSet in namespace ns (at most every
// interval) until its rollout is done or ctx ends, printing a line to
// progress whenever the numbers change.
func WaitRollout(ctx context.Context, cs kubernetes.Interface, ns string, progress io.Writer, every time.Duration) (Rollout, error) {
	var last string
	// Start fast (a DaemonSet with nothing to roll is done at once), then
	// back off to every.
	delay := every / 8
	for {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return Rollout{}, fmt.Errorf("read daemonset %s/%s: %w", ns, DaemonSetName, err)
		}
		r := rolloutOf(ds)
		if s := r.String(); s != last {
			fmt.Fprintf(progress, "daemonset/%s: %s\n", DaemonSetName, s)
			last = s
		}
		if r.Done {
			return r, nil
		}
		select {
		case <-ctx.Done():
			err := ctx.Err()
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("rollout of daemonset %s/%s not finished (%s): see `kubectl -n %s describe daemonset %s` and its pods' events", ns, DaemonSetName, r, ns, DaemonSetName)
			}
			return r, err
		case <-time.After(delay):
		}
		delay = min(2*delay, every)
	}
}
