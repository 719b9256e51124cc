package ledger

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// placedPod is pod ns/name asking one GPU of 1000 MiB, placed by the extender on node-1's gpu.
func placedPod(t *testing.T, name, gpu string) *corev1.Pod {
	t.Helper()
	p := podtest.Pending("ns", name, podtest.GPU("main", 1, "1000", 0))
	p.Spec.NodeName = "node-1"
	setRecord(t, p, device.AnnoPlanned, device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: gpu, MemoryMiB: 1000}}}}})
	return p
}

func setRecord(t *testing.T, p *corev1.Pod, key string, a device.Allocation) {
	t.Helper()
	enc, err := device.EncodeAllocation(a)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[key] = enc
}

func newTestLedger() *Ledger {
	return New(Config{Node: "node-1", Names: device.DefaultResourceNames(), Clock: clocktesting.NewFakeClock(time.Unix(0, 0)),
		GPUMemory: func(string) (int64, bool) { return 24576, true }})
}

// usedGPU is the GPU a pod's claimed record grants (its only container's only device).
func usedGPU(t *testing.T, l *Ledger, p *corev1.Pod) string {
	t.Helper()
	rec, ok := l.ClaimedRecord(p.UID)
	if !ok || len(rec.Containers) != 1 || len(rec.Containers[0].Devices) != 1 {
		t.Fatalf("claimed record of %s = %+v, %v; want one container on one GPU", p.Name, rec, ok)
	}
	return rec.Containers[0].Devices[0].UUID
}

// case C04: a device-plugin restart in the middle of a swap (issue 15's second open window). Two
// interchangeable pods p (planned GPU-A) and q (planned GPU-B); the kubelet gives p a slice of
// GPU-B and q one of GPU-A, so Allocate answers p's call with q's slot (env of GPU-B) and q's
// with p's (GPU-A), and Reconcile swaps their records. Only p's rewritten record reaches the API
// before the plugin restarts; q's still says GPU-B. The restarted plugin must find, from the
// kubelet's report and the group's planned slots, that q runs on GPU-A: each GPU is charged once,
// as the containers really use them, and no GPU is charged twice while another runs uncharged.
func TestC04ReconcileAfterRestartMidSwap(t *testing.T) {
	l := newTestLedger()
	p, q := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-B")
	l.UpsertPod(p)
	l.UpsertPod(q)
	cp, err := l.TryAllocate([]string{"GPU-B::0"}) // really p's call
	if err != nil || cp.Pod.Name != "q" || cp.Container.Devices[0].UUID != "GPU-B" {
		t.Fatalf("first call matched %+v, %v; want q's slot on GPU-B", cp, err)
	}
	setRecord(t, q, device.AnnoClaimed, mustRecord(t, l, q)) // q's record written: GPU-B
	cq, err := l.TryAllocate([]string{"GPU-A::0"})           // really q's call
	if err != nil || cq.Pod.Name != "p" || cq.Container.Devices[0].UUID != "GPU-A" {
		t.Fatalf("second call matched %+v, %v; want p's slot on GPU-A", cq, err)
	}
	truth := []ObservedContainer{
		{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-B::0"}},
		{Namespace: "ns", Pod: "q", Container: "main", IDs: []string{"GPU-A::0"}},
	}
	if changed := l.Reconcile(truth); len(changed) != 2 {
		t.Fatalf("Reconcile changed %v, want p and q swapped", changed)
	}
	if got := usedGPU(t, l, p) + " " + usedGPU(t, l, q); got != "GPU-B GPU-A" {
		t.Fatalf("after the swap p, q use %s; want GPU-B GPU-A", got)
	}
	setRecord(t, p, device.AnnoClaimed, mustRecord(t, l, p)) // p's rewrite lands; q's does not

	tests := []struct {
		name  string
		order []*corev1.Pod // the restarted plugin's informer delivers the pods in this order
	}{{"p first", []*corev1.Pod{p, q}}, {"q first", []*corev1.Pod{q, p}}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestLedger()
			for _, pod := range tc.order {
				r.UpsertPod(pod.DeepCopy())
			}
			r.Reconcile(append([]ObservedContainer(nil), truth...))
			if got := usedGPU(t, r, p) + " " + usedGPU(t, r, q); got != "GPU-B GPU-A" {
				t.Errorf("after the restart p, q use %s; want GPU-B GPU-A (what their containers were given)", got)
			}
			u := r.Charged()
			for _, gpu := range []string{"GPU-A", "GPU-B"} {
				if got := u[gpu].Sharers; got != 1 {
					t.Errorf("%s charged to %d pods, want 1 (usage %+v)", gpu, got, u)
				}
			}
			for _, pod := range []*corev1.Pod{p, q} {
				rec, _ := r.ClaimedRecord(pod.UID)
				if c := rec.Containers[0]; SliceGPUs(c.SliceIDs)[0] != c.Devices[0].UUID {
					t.Errorf("%s's record grants %s under slice %v", pod.Name, c.Devices[0].UUID, c.SliceIDs)
				}
			}
		})
	}
}

func mustRecord(t *testing.T, l *Ledger, p *corev1.Pod) device.Allocation {
	t.Helper()
	rec, ok := l.ClaimedRecord(p.UID)
	if !ok {
		t.Fatalf("%s unknown to the ledger", p.Name)
	}
	return rec
}

// A pod alone in its signature group whose restored claimed record is not on the GPU the
// kubelet's IDs name (the kubelet skipped GetPreferredAllocation) keeps the record's GPU: that is
// what Allocate answered, and no other pod holds it.
func TestC04ReconcileLonePodKeepsRecordedGPU(t *testing.T) {
	p := placedPod(t, "p", "GPU-A")
	setRecord(t, p, device.AnnoClaimed, device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-B", MemoryMiB: 1000}}, SliceIDs: []string{"GPU-C::4"}}}})
	l := newTestLedger()
	l.UpsertPod(p)
	l.Reconcile([]ObservedContainer{{Namespace: "ns", Pod: "p", Container: "main", IDs: []string{"GPU-A::0"}}})
	if got := usedGPU(t, l, p); got != "GPU-B" {
		t.Fatalf("p uses %s after Reconcile; want GPU-B, its recorded answer", got)
	}
	if rec := mustRecord(t, l, p); rec.Containers[0].SliceIDs[0] != "GPU-A::0" {
		t.Fatalf("p's slice IDs %v; want the kubelet's GPU-A::0", rec.Containers[0].SliceIDs)
	}
}
