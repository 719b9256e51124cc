package extender

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// case C04 across an extender restart (seen end to end: 18 sharers on a GPU of split 10): a
// restart is ready only once the cache has handled every bound pod at the version a
// consistent list returns: here the informer's first list (a lagging watch cache, played by a
// fake clientset's reactor: unit test only) shows the pod at resourceVersion 5 and the
// consistent list at 7; the extender reports ready after the pod's update to 7 arrives.
func TestReadyWaitsForAConsistentList(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	objs, _ := setupNodes(t, inv)
	p := boundPod(t, "r", "bound", "node-1", inv.GPUs[0].UUID, 1000, false)
	p.ResourceVersion = "5"
	client := fake.NewClientset(append(objs, p)...)
	var lists atomic.Int32
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 1 {
			return false, nil, nil // the informer's list: as stored (version 5)
		}
		q := p.DeepCopy()
		q.ResourceVersion = "7"
		return true, &corev1.PodList{Items: []corev1.Pod{*q}}, nil
	})
	ext, err := New(DefaultConfig(), client, record.NewFakeRecorder(100), clocktesting.NewFakeClock(t0), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ext.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the consistent list", func() bool { return lists.Load() >= 2 })
	time.Sleep(200 * time.Millisecond)
	if ext.Ready() {
		t.Fatal("ready while the cache has the pod at version 5 and the API at 7")
	}
	q := p.DeepCopy()
	q.ResourceVersion = "7"
	if _, err := client.CoreV1().Pods("r").Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ready after the update", ext.Ready)
}
