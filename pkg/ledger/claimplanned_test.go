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

// case C04: the runtime names the pod at container creation, so each of two interchangeable pods
// (p planned GPU-A, q planned GPU-B) claims its own plan, in whichever order their containers are
// created; the claimed record each pod gets is its planned allocation.
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
// NRI plugin), or a refusal naming why (the NRI plugin refuses the container; the kubelet retries).
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

// case C04 across a plugin restart: p (planned GPU-A) and q (planned GPU-B) claimed their plans;
// the restarted ledger restores both claimed records, and each container the runtime creates
// again gets its own claim back (Repeat), nothing queued for writing, so each GPU keeps the one
// pod that runs on it. A claimed record that does not grant what the pod asks (case C36) is not
// restored: that container claims its plan again.
func TestC04ClaimPlannedSurvivesRestart(t *testing.T) {
	l, p, q := pairLedger(t)
	for _, pod := range []*corev1.Pod{p, q} {
		if _, _, err := l.ClaimPlanned(pod.UID, "main"); err != nil {
			t.Fatal(err)
		}
		rec, _ := l.ClaimedRecord(pod.UID)
		setRecord(t, pod, device.AnnoClaimed, rec)
	}
	forged := q.DeepCopy()
	forged.UID, forged.Name = "uid-forged", "forged"
	setRecord(t, forged, device.AnnoClaimed, device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-A", MemoryMiB: 8000}}}}})

	restarted := newTestLedger()
	var dirty []string
	restarted.dirty = func(r device.PodRef) { dirty = append(dirty, r.Name) }
	for _, pod := range []*corev1.Pod{p, q, forged} {
		restarted.UpsertPod(pod)
	}
	for pod, want := range map[*corev1.Pod]string{p: "GPU-A", q: "GPU-B"} {
		if got := usedGPU(t, restarted, pod); got != want {
			t.Errorf("%s's restored claim grants %s, want %s (its claim at container creation)", pod.Name, got, want)
		}
		cl, planned, err := restarted.ClaimPlanned(pod.UID, "main")
		if err != nil || !planned || !cl.Repeat || cl.Container.Devices[0].UUID != want {
			t.Errorf("ClaimPlanned(%s) after the restart = %+v, %v, %v; want the repeat of %s", pod.Name, cl, planned, err, want)
		}
	}
	if len(dirty) != 0 {
		t.Errorf("queued for writing %v after the restart; want nothing (every record stands)", dirty)
	}
	if rec, _ := restarted.ClaimedRecord(forged.UID); len(rec.Containers) != 0 {
		t.Errorf("the forged record was restored as %+v; want no claim", rec)
	}
	cl, _, err := restarted.ClaimPlanned(forged.UID, "main")
	if err != nil || cl.Repeat || cl.Container.Devices[0].UUID != "GPU-B" || cl.Container.Devices[0].MemoryMiB != 1000 {
		t.Errorf("ClaimPlanned(forged) = %+v, %v; want a new claim of its plan, 1000 MiB of GPU-B", cl, err)
	}
}
