package ledger

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// case C04 under design (b) (--apply-plan-at=create-container): the runtime names the pod at
// container creation, so each of two interchangeable pods (p planned GPU-A, q planned GPU-B)
// claims its own plan, in whichever order their containers are created; nothing is matched,
// swapped or republished, and the claimed record each pod gets is its planned allocation.
func TestC04ClaimPlannedTakesThePodsOwnPlan(t *testing.T) {
	for _, order := range [][]string{{"p", "q"}, {"q", "p"}} {
		t.Run(strings.Join(order, "-then-"), func(t *testing.T) {
			l, p, q := pairLedger(t)
			var dirty []string
			l.dirty = func(r device.PodRef) { dirty = append(dirty, r.Name) }
			pods := map[string]string{"p": string(p.UID), "q": string(q.UID)}
			for _, n := range order {
				cl, planned, err := l.ClaimPlanned(types.UID(pods[n]), "main")
				if err != nil || !planned || cl.Repeat || cl.Pod.Name != n {
					t.Fatalf("ClaimPlanned(%s) = %+v, %v, %v; want %s's first claim", n, cl, planned, err, n)
				}
			}
			if got := usedGPU(t, l, p); got != "GPU-A" {
				t.Errorf("p's claimed record grants %s, want GPU-A (its own plan)", got)
			}
			if got := usedGPU(t, l, q); got != "GPU-B" {
				t.Errorf("q's claimed record grants %s, want GPU-B (its own plan)", got)
			}
			if strings.Join(dirty, ",") != strings.Join(order, ",") {
				t.Errorf("queued for writing %v, want %v (each claim once)", dirty, order)
			}
			if a := l.PlannedRewrite(p.UID); a != nil {
				t.Errorf("p's planned annotation is to be rewritten to %+v; want no republish", *a)
			}
			// The runtime creates p's container again (it exited): the same claim, nothing queued.
			dirty = nil
			cl, planned, err := l.ClaimPlanned(p.UID, "main")
			if err != nil || !planned || !cl.Repeat || cl.Container.Devices[0].UUID != "GPU-A" || len(dirty) != 0 {
				t.Errorf("second ClaimPlanned(p) = %+v, %v, %v (queued %v); want the repeat of GPU-A, nothing queued", cl, planned, err, dirty)
			}
		})
	}
}

// ClaimPlanned's answers for what is not a placed GPU container: no GPUs (let through by the
// guard), or a refusal naming why (the guard refuses the container; the kubelet retries).
func TestClaimPlannedRefusals(t *testing.T) {
	l := newTestLedger()
	placed := placedPod(t, "placed", "GPU-A")
	podtest.AddContainer(placed, device.KindApp, placed.Spec.Containers[0])
	placed.Spec.Containers[1].Name = "no-gpu"
	placed.Spec.Containers[1].Resources.Limits = nil
	unplaced := podtest.Pending("ns", "unplaced", podtest.GPU("main", 1, "1000", 0))
	unplaced.Spec.NodeName = "node-1"
	forged := placedPod(t, "forged", "GPU-A")
	forged.Spec.Containers[0].Resources.Limits[corev1.ResourceName(device.DefaultResourceNames().Memory)] = resource.MustParse("2000")
	leaving := placedPod(t, "leaving", "GPU-B")
	for _, p := range []*corev1.Pod{placed, unplaced, forged, leaving} {
		l.UpsertPod(p)
	}
	gone := leaving.DeepCopy()
	gone.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	l.UpsertPod(gone)

	for _, tc := range []struct {
		name, uid, container string
		planned              bool
		errHas               string
	}{
		{"a container of a placed pod that asks no GPU", string(placed.UID), "no-gpu", false, ""},
		{"a pod the ledger does not know (no GPUs, or not delivered yet)", "uid-unknown", "main", false, ""},
		{"a GPU pod not placed by hami-go", string(unplaced.UID), "main", true, "has no hami-go.io/allocation-planned annotation"},
		{"a plan that does not grant what the pod asks (case C36)", string(forged.UID), "main", true, "does not match the pod's own request"},
		{"a terminating pod that never claimed its container", string(leaving.UID), "main", true, "terminates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, planned, err := l.ClaimPlanned(types.UID(tc.uid), tc.container)
			if planned != tc.planned || (tc.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
				t.Fatalf("ClaimPlanned = %+v, planned %v, %v; want planned %v and an error containing %q", cl, planned, err, tc.planned, tc.errHas)
			}
		})
	}
}

// A claim made at container creation survives a plugin restart as the truth, even when the
// plugin comes back with --apply-plan-at=allocate: p (planned GPU-A) and q (planned GPU-B) were
// claimed by ClaimPlanned while the kubelet's slices named the other GPU; the restarted ledger
// restores both records, and Reconcile, seeing the kubelet's slices, moves neither (the slices
// name no GPU of the pod's), so each GPU keeps the one pod that runs on it.
func TestC04ClaimPlannedSurvivesRestartAndReconcile(t *testing.T) {
	l, p, q := pairLedger(t)
	for _, pod := range []*corev1.Pod{p, q} {
		if _, _, err := l.ClaimPlanned(pod.UID, "main"); err != nil {
			t.Fatal(err)
		}
		rec, _ := l.ClaimedRecord(pod.UID)
		setRecord(t, pod, device.AnnoClaimed, rec)
	}
	restarted := newTestLedger()
	restarted.UpsertPod(p)
	restarted.UpsertPod(q)
	changed := restarted.Reconcile([]ObservedContainer{
		{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-B::0"}},
		{Namespace: "ns", Pod: "q", Container: "main", IDs: []string{"GPU-A::0"}},
	})
	if len(changed) != 0 {
		t.Errorf("Reconcile changed %v; want no record changed", changed)
	}
	if got := usedGPU(t, restarted, p); got != "GPU-A" {
		t.Errorf("p uses %s after the restart, want GPU-A (its claim at container creation)", got)
	}
	if got := usedGPU(t, restarted, q); got != "GPU-B" {
		t.Errorf("q uses %s after the restart, want GPU-B", got)
	}
	// Not a guess: a report of another answer (a forged env) moves nothing; the guard decides.
	if changed, err := restarted.Answered(p.UID, "main", []string{"GPU-B"}); changed || err != nil || usedGPU(t, restarted, p) != "GPU-A" {
		t.Errorf("Answered(p, GPU-B) = %v, %v, p on %s; want p's claim at container creation left on GPU-A", changed, err, usedGPU(t, restarted, p))
	}
}
