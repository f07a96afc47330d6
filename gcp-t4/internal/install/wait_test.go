package install

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// failingReads is a clientset whose DaemonSet reads fail with err.
func failingReads(err error) *fake.Clientset {
	cs := fake.NewClientset(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName, Namespace: Namespace}})
	cs.PrependReactor("get", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
	return cs
}

// An error of our side of the wire (client-go's rate limiter refusing a
// wait that would pass the deadline says so before the deadline, wrapping
// no context error) is retried until the deadline, which reports the
// rollout unfinished, naming the error: the run the CI saw under load.
func TestWaitRolloutRetriesLocalErrorsUntilTheDeadline(t *testing.T) {
	limiter := errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
	cs := failingReads(limiter)
	ctx, cancel := context.WithCancel(t.Context())
	reads := 0
	cs.PrependReactor("get", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if reads++; reads == 3 {
			cancel() // the deadline, without waiting for one
		}
		return false, nil, nil
	})
	_, err := WaitRollout(ctx, cs, Namespace, io.Discard, time.Millisecond)
	if err == nil || reads < 3 {
		t.Fatalf("reads %d, err %v: want retries until the context ends", reads, err)
	}
	if !strings.Contains(err.Error(), "rate limiter") {
		t.Errorf("err %q does not name the last read's failure", err)
	}
}

// The API server's answer ends the wait at once: retrying a refusal only
// hides it behind a timeout.
func TestWaitRolloutStopsOnTheAPIServersAnswer(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, DaemonSetName, errors.New("no RBAC"))
	cs := failingReads(forbidden)
	reads := 0
	cs.PrependReactor("get", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads++
		return false, nil, nil
	})
	_, err := WaitRollout(t.Context(), cs, Namespace, io.Discard, time.Millisecond)
	if !apierrors.IsForbidden(err) || reads != 1 {
		t.Fatalf("reads %d, err %v: want the refusal after one read", reads, err)
	}
	if !strings.Contains(err.Error(), "read daemonset") {
		t.Errorf("err %q does not say what was read", err)
	}
}
