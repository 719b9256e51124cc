package ledger

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// pairLedger is a ledger serving p (planned GPU-A) and q (planned GPU-B): one signature group.
func pairLedger(t *testing.T) (*Ledger, *corev1.Pod, *corev1.Pod) {
	t.Helper()
	l := newTestLedger()
	p, q := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-B")
	l.UpsertPod(p)
	l.UpsertPod(q)
	return l, p, q
}

// case C04, the window a restart opens before a claim is written: p (planned GPU-A) and q
// (planned GPU-B) are interchangeable; the kubelet skipped GetPreferredAllocation and gave p a
// slice of GPU-C, Allocate answered p's call with q's slot (env of GPU-B), and the plugin
// restarted before any record was written. The restarted plugin's Reconcile sees p's IDs, which
// name no slot of the group, and claims p from its own plan, GPU-A. The runtime's copy of the
// answer (NRI, at p's container creation) says GPU-B: p must take q's slot and q p's, so that
// q's later Allocate is answered GPU-A and each GPU has one sharer.
func TestC04AnsweredAfterRestartBeforeClaimWritten(t *testing.T) {
	restarted := func(t *testing.T) (*Ledger, *[]device.PodRef) {
		t.Helper()
		var dirty []device.PodRef
		l, _, _ := pairLedger(t)
		l.dirty = func(r device.PodRef) { dirty = append(dirty, r) }
		l.Reconcile([]ObservedContainer{{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-C::0"}}})
		return l, &dirty
	}

	t.Run("the answered slot is free: the claim moves", func(t *testing.T) {
		l, dirty := restarted(t)
		p := placedPod(t, "p", "GPU-A")
		if got := usedGPU(t, l, p); got != "GPU-A" {
			t.Fatalf("before the runtime's report p uses %s; want GPU-A (its own plan)", got)
		}
		*dirty = nil
		changed, err := l.Answered(p.UID, "main", []string{"GPU-B"})
		if err != nil || !changed {
			t.Fatalf("Answered = %v, %v; want changed", changed, err)
		}
		if got := usedGPU(t, l, p); got != "GPU-B" {
			t.Fatalf("p uses %s; want GPU-B, the GPU its container was answered", got)
		}
		if rec := mustRecord(t, l, p); rec.Containers[0].SliceIDs[0] != "GPU-C::0" {
			t.Errorf("p's slice IDs %v; want the kubelet's GPU-C::0", rec.Containers[0].SliceIDs)
		}
		if len(*dirty) != 1 || (*dirty)[0].Name != "p" {
			t.Errorf("queued %v; want p's record", *dirty)
		}
		cq, err := l.TryAllocate([]string{"GPU-A::0"})
		if err != nil || cq.Pod.Name != "q" || cq.Container.Devices[0].UUID != "GPU-A" {
			t.Fatalf("q's call matched %+v, %v; want q on GPU-A, the slot p left", cq, err)
		}
		u := l.Charged()
		for gpu, want := range map[string]int{"GPU-A": 1, "GPU-B": 1, "GPU-C": 0} {
			if u[gpu].Sharers != want {
				t.Errorf("%s charged to %d pods, want %d (%+v)", gpu, u[gpu].Sharers, want, u)
			}
		}
		if changed, err := l.Answered(p.UID, "main", []string{"GPU-B"}); changed || err != nil {
			t.Errorf("a second report of the same answer = %v, %v; want no change", changed, err)
		}
	})

	t.Run("the answered slot is held: the container is refused", func(t *testing.T) {
		l, dirty := restarted(t)
		p, q := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-B")
		cq, err := l.TryAllocate([]string{"GPU-B::1"}) // q's own call, after the restart
		if err != nil || cq.Pod.Name != "q" || cq.Container.Devices[0].UUID != "GPU-B" {
			t.Fatalf("q's call matched %+v, %v; want q on GPU-B", cq, err)
		}
		*dirty = nil
		changed, err := l.Answered(p.UID, "main", []string{"GPU-B"})
		var ae *AnsweredError
		if changed || !errors.As(err, &ae) || ae.Pod != "ns/p" || ae.Container != "main" || ae.Answered[0] != "GPU-B" || ae.Claimed[0] != "GPU-A" {
			t.Fatalf("Answered = %v, %v; want an *AnsweredError for ns/p main answered GPU-B, claimed GPU-A", changed, err)
		}
		if got := usedGPU(t, l, p) + " " + usedGPU(t, l, q); got != "GPU-A GPU-B" || len(*dirty) != 0 {
			t.Errorf("after the refusal p, q use %s, queued %v; want GPU-A GPU-B and nothing written", got, *dirty)
		}
	})

	t.Run("an answer equal to the claim and an unclaimed container change nothing", func(t *testing.T) {
		l, _ := restarted(t)
		p, q := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-B")
		if changed, err := l.Answered(p.UID, "main", []string{"GPU-A"}); changed || err != nil {
			t.Errorf("p answered its claim's GPU: %v, %v; want no change", changed, err)
		}
		if changed, err := l.Answered(q.UID, "main", []string{"GPU-A"}); changed || err != nil {
			t.Errorf("q (not claimed): %v, %v; want no change", changed, err)
		}
		if changed, err := l.Answered("no-such-uid", "main", []string{"GPU-A"}); changed || err != nil {
			t.Errorf("unknown pod: %v, %v; want no change", changed, err)
		}
	})
}

// case C04: after a restart, an unclaimed member of a signature group for which the kubelet
// reports slices takes the group's free slot on those slices' GPUs (the kubelet followed
// GetPreferredAllocation, so the call was answered that slot), not its own plan.
func TestC04ReconcileAfterRestartFollowsReportedGPU(t *testing.T) {
	l, p, _ := pairLedger(t)
	l.Reconcile([]ObservedContainer{{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-B::0"}}})
	if got := usedGPU(t, l, p); got != "GPU-B" {
		t.Fatalf("p uses %s; want GPU-B, the free slot on the GPU of its slices", got)
	}
	cq, err := l.TryAllocate([]string{"GPU-A::0"})
	if err != nil || cq.Pod.Name != "q" || cq.Container.Devices[0].UUID != "GPU-A" {
		t.Fatalf("q's call matched %+v, %v; want q on GPU-A", cq, err)
	}
	if changed, err := l.Answered(p.UID, "main", []string{"GPU-B"}); changed || err != nil {
		t.Errorf("the runtime's report of p's answer (GPU-B) = %v, %v; want no change", changed, err)
	}
}

// case C04: only a claim the plugin did not make itself moves. A claim Allocate made in this
// process is the answer; a different report (an env a tenant forged) changes nothing here, and
// the guard's env check refuses the container.
func TestC04AnsweredLeavesAllocateClaims(t *testing.T) {
	l, p, _ := pairLedger(t)
	if cl, err := l.TryAllocate([]string{"GPU-A::0"}); err != nil || cl.Pod.Name != "p" {
		t.Fatalf("p's call matched %+v, %v", cl, err)
	}
	if changed, err := l.Answered(p.UID, "main", []string{"GPU-B"}); changed || err != nil {
		t.Fatalf("Answered on an Allocate claim = %v, %v; want no change", changed, err)
	}
	if got := usedGPU(t, l, p); got != "GPU-A" {
		t.Fatalf("p uses %s; want GPU-A, what Allocate answered", got)
	}
}

// case C04: claims restored from records are guesses too (a record may hold a guess a restart
// wrote before the runtime reported the answer). Two restarts: p and q, answered each other's
// slots, are first guessed crossed, their records written; the second restart restores them,
// and the runtime's reports still uncross them.
func TestC04AnsweredAfterTwoRestarts(t *testing.T) {
	p, q := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-B")
	truth := []ObservedContainer{
		{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-C::0"}},
		{Namespace: "ns", Pod: "q", Container: "main", IDs: []string{"GPU-C::1"}},
	}
	first := newTestLedger()
	first.UpsertPod(p.DeepCopy())
	first.UpsertPod(q.DeepCopy())
	first.Reconcile(append([]ObservedContainer(nil), truth...)) // p guessed A, q guessed B
	setRecord(t, p, device.AnnoClaimed, mustRecord(t, first, p))
	setRecord(t, q, device.AnnoClaimed, mustRecord(t, first, q))

	second := newTestLedger()
	second.UpsertPod(p)
	second.UpsertPod(q)
	second.Reconcile(append([]ObservedContainer(nil), truth...))
	if changed, err := second.Answered(p.UID, "main", []string{"GPU-B"}); !changed || err != nil {
		t.Fatalf("p answered GPU-B: %v, %v; want the claims swapped", changed, err)
	}
	if changed, err := second.Answered(q.UID, "main", []string{"GPU-A"}); changed || err != nil {
		t.Fatalf("q answered GPU-A: %v, %v; want nothing left to change", changed, err)
	}
	if got := usedGPU(t, second, p) + " " + usedGPU(t, second, q); got != "GPU-B GPU-A" {
		t.Fatalf("p, q use %s; want GPU-B GPU-A", got)
	}
}

// case C04: an answer on a slot the group's planned annotations publish and no member holds
// (the pod's guessed slot is held twice) takes that slot.
func TestC04AnsweredTakesFreeSlot(t *testing.T) {
	l := newTestLedger()
	p, q, r := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-A"), placedPod(t, "r", "GPU-B")
	// p and q run on GPU-A by their records; r's record, from an earlier guess, put r on GPU-A
	// too: GPU-A is held three times and published twice, GPU-B published once and held by
	// nobody, and no member is unclaimed to give a slot.
	for i, pod := range []*corev1.Pod{p, q, r} {
		setRecord(t, pod, device.AnnoClaimed, device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
			Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-A", MemoryMiB: 1000}}, SliceIDs: []string{device.SliceID("GPU-A", i)}}}})
		l.UpsertPod(pod)
	}
	l.Reconcile([]ObservedContainer{
		{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-A::0"}},
		{Namespace: "ns", Pod: "q", Container: "main", IDs: []string{"GPU-A::1"}},
		{Namespace: "ns", Pod: "r", Container: "main", IDs: []string{"GPU-A::2"}},
	})
	if changed, err := l.Answered(r.UID, "main", []string{"GPU-B"}); !changed || err != nil {
		t.Fatalf("Answered = %v, %v; want r moved to the free GPU-B slot", changed, err)
	}
	if got := usedGPU(t, l, r); got != "GPU-B" {
		t.Fatalf("r uses %s; want GPU-B", got)
	}
	if got := usedGPU(t, l, p) + " " + usedGPU(t, l, q); got != "GPU-A GPU-A" {
		t.Errorf("p, q use %s; want GPU-A GPU-A (untouched)", got)
	}
}
