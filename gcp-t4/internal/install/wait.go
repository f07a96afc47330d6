package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

// WaitRollout polls the CAA DaemonSet in namespace ns every interval (the
// first look at once: a DaemonSet with nothing to roll is done) until its
// rollout is done or ctx ends, printing a line to progress whenever the
// numbers change.
func WaitRollout(ctx context.Context, cs kubernetes.Interface, ns string, progress io.Writer, every time.Duration) (Rollout, error) {
	var last string
	var r Rollout
	var readErr error
	err := wait.PollUntilContextCancel(ctx, every, true, func(ctx context.Context) (bool, error) {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			var status apierrors.APIStatus
			if ctx.Err() != nil || !errors.As(err, &status) {
				// The context's end, or a failure on our side of the
				// wire: client-go's rate limiter refuses a wait that
				// would pass the deadline before the deadline itself
				// (its error wraps no context error), and a dropped
				// connection heals. Both are retried until the deadline,
				// which reports the rollout unfinished, naming this
				// error; an answer of the API server (forbidden, not
				// found) ends the wait at once.
				readErr = err
				return false, nil
			}
			return false, fmt.Errorf("read daemonset %s/%s: %w", ns, DaemonSetName, err)
		}
		readErr = nil
		r = rolloutOf(ds)
		if s := r.String(); s != last {
			fmt.Fprintf(progress, "daemonset/%s: %s\n", DaemonSetName, s)
			last = s
		}
		return r.Done, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("rollout of daemonset %s/%s not finished (%s): see `kubectl -n %s describe daemonset %s` and its pods' events", ns, DaemonSetName, r, ns, DaemonSetName)
	}
	if readErr != nil && err != nil {
		err = fmt.Errorf("%w; the last read failed: %v", err, readErr)
	}
	return r, err
}
