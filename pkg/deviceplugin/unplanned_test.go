package deviceplugin

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/hami-go/hami-go/pkg/nri"
)

// A container the NRI plugin finds running without its plan when it (re)connects (created while
// the node agent was away) has no GPU limit: its pod gets a Warning Event naming the container
// and is deleted, so that its controller makes one whose containers get their plan. A pod hami-go
// planned no GPUs for is left alone. (The UID precondition that spares a pod re-created under
// the same name is the API server's; client-go's fake tracker does not apply it.)
func TestUnplannedContainerStopsItsPod(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	planned := testPod("planned", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	plain := testPod("plain", t0, testNode, ctr{name: "main"})
	p.Ledger().UpsertPod(planned)
	p.Ledger().UpsertPod(plain)
	client := fake.NewClientset(planned, plain)
	rec := record.NewFakeRecorder(10)
	s := unplannedStopper{p: p, client: client, recorder: rec}
	ctx := context.Background()
	for _, pod := range []*struct{ uid, ns, name string }{
		{string(planned.UID), planned.Namespace, planned.Name},
		{string(plain.UID), plain.Namespace, plain.Name},
	} {
		s.stop(ctx, nri.Container{PodUID: pod.uid, PodNamespace: pod.ns, PodName: pod.name, Name: "main"})
	}

	if _, err := client.CoreV1().Pods(planned.Namespace).Get(ctx, planned.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s: Get = %v; want it deleted", planned.Name, err)
	}
	if _, err := client.CoreV1().Pods(plain.Namespace).Get(ctx, plain.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("pod %s (no GPUs planned): %v; want it left alone", plain.Name, err)
	}
	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	if len(events) != 1 {
		t.Fatalf("events %q; want one, for the planned pod", events)
	}
	for _, e := range events {
		if !strings.HasPrefix(e, "Warning "+ReasonPlanNotApplied+" container main was created while hami-go's NRI plugin was away") {
			t.Errorf("event %q; want a Warning %s naming the container", e, ReasonPlanNotApplied)
		}
	}
}
