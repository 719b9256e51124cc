package deviceplugin

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/ledger"
)

// case C04: interchangeable pods c (planned on GPU-A) and d (planned on GPU-B): the kubelet admits d with
// the call the plugin matched to c, Reconcile swaps their records (d holds GPU-A, c will run on
// GPU-B), and d is deleted before c is admitted. Planned annotations would then say GPU-A for c
// and nothing for GPU-B, which is what a restarted extender rebuilds from; the plugin
// republishes c's plan as GPU-B in the same patch as its claimed record (fake clientset: unit
// test only).
func TestRepublishPlanAfterSwappedPodLeaves(t *testing.T) {
	c := testPod("c", t0, testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	d := testPod("d", t0.Add(time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-B"}})
	client := fake.NewClientset(c, d)
	pr := &fakePodResources{}
	pr.set()
	p, sync, ctx := startPodSync(t, client, pr)
	annos := func(name string) map[string]string {
		got, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Annotations
	}
	gpuOf := func(name, anno string) string {
		a, err := device.DecodeAllocation(annos(name)[anno])
		if err != nil {
			return "none"
		}
		return a.Containers[0].Devices[0].UUID
	}

	if r := mustAlloc(t, p, "GPU-A::0"); r.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-A" {
		t.Fatalf("first call got %v, want c's plan GPU-A", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
	waitFor(t, "c's claimed record", func() bool { return gpuOf("c", device.AnnoClaimed) == "GPU-A" })
	pr.set(podRes("default", "d", "x", "nvidia.com/gpu", "GPU-A::0"))
	sync.reconcile(ctx)
	// Written at once after c's own claim: the writer must not take the informer's copy of c
	// (which may not show that claim yet) for the truth.
	waitFor(t, "the swap written", func() bool {
		return gpuOf("d", device.AnnoClaimed) == "GPU-A" && gpuOf("c", device.AnnoClaimed) == "none"
	})
	if got := p.Ledger().PlannedRewrite(c.UID); got != nil {
		t.Fatalf("c's plan republished while d lives: %v (the swapped pair still adds up)", got)
	}

	if err := client.CoreV1().Pods("default").Delete(ctx, "d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c's planned annotation republished", func() bool { return gpuOf("c", device.AnnoPlanned) == "GPU-B" })
	planned, err := device.DecodeAllocation(annos("c")[device.AnnoPlanned])
	if err != nil || planned.Containers[0].Name != "x" || planned.Containers[0].Devices[0].MemoryMiB != 5000 || len(planned.Containers[0].SliceIDs) != 0 {
		t.Fatalf("c's republished plan = %+v, %v; want container x, 5000 MiB on GPU-B, no slice IDs", planned, err)
	}
	if _, has := annos("c")[device.AnnoClaimed]; has {
		t.Fatalf("c has a claimed record %q before its Allocate", annos("c")[device.AnnoClaimed])
	}
	waitFor(t, "the rewrite seen by the informer", func() bool { return p.Ledger().PlannedRewrite(c.UID) == nil })

	// c's Allocate hands out GPU-B, where its annotation now says it runs.
	if r := mustAlloc(t, p, "GPU-B::0"); r.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-B" {
		t.Fatalf("c got %v, want GPU-B", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
	// A restarted plugin rebuilds c's plan from the republished annotation.
	cNow, err := client.CoreV1().Pods("default").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	cNow.Annotations = map[string]string{device.AnnoPlanned: cNow.Annotations[device.AnnoPlanned]}
	p2.Ledger().UpsertPod(cNow)
	if r := mustAlloc(t, p2, "GPU-B::1"); !strings.Contains(r.Envs[gpuenv.EnvCUDAVisibleDevices], "GPU-B") {
		t.Fatalf("restarted plugin gave c %v, want GPU-B", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
}

// case C04: the member republished is one planned on the lost slot, preferably the one that will run on
// the kept slot; a pod that leaves on its own plan republishes nothing.
func TestRepublishPicksTheMemberThatRunsOnTheKeptSlot(t *testing.T) {
	var dirty []string
	p, _ := newTestPluginDirty(t, testConfig(t.TempDir()), newTestBackend(2, 81559), func(r device.PodRef) { dirty = append(dirty, r.Name) })
	l := p.Ledger()
	e := testPod("e", t0, testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}}) // first seen, on GPU-A, stays
	c := testPod("c", t0.Add(time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	d := testPod("d", t0.Add(2*time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-B"}})
	o := testPod("o", t0.Add(3*time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-B"}}) // leaves on its own plan
	for _, x := range []*corev1.Pod{e, c, d, o} {
		l.UpsertPod(x)
	}
	l.DeletePod(o.UID)
	if len(dirty) != 0 {
		t.Fatalf("a pod leaving on its own plan queued %v", dirty)
	}
	mustAlloc(t, p, "GPU-A::0") // e
	mustAlloc(t, p, "GPU-A::1") // c
	// The kubelet gave c's call to d: swap c and d.
	l.Reconcile([]ledger.ObservedContainer{
		{Namespace: "default", Pod: "e", Container: "x", IDs: []string{"GPU-A::0"}},
		{Namespace: "default", Pod: "d", Container: "x", IDs: []string{"GPU-A::1"}},
	})
	dirty = nil
	l.DeletePod(d.UID)
	if strings.Join(dirty, ",") != "c" {
		t.Fatalf("republished %v, want c (planned on GPU-A, runs on GPU-B; e runs on GPU-A)", dirty)
	}
	if got := l.PlannedRewrite(c.UID); got == nil || got.Containers[0].Devices[0].UUID != "GPU-B" {
		t.Fatalf("c's rewrite = %v, want GPU-B", got)
	}
	if got := l.PlannedRewrite(e.UID); got != nil {
		t.Fatalf("e's rewrite = %v, want none", got)
	}
}

// swappedPair plans c on GPU-A and d on GPU-B (interchangeable), lets the kubelet give c's call
// to d (Reconcile swaps: d holds GPU-A, c will run on GPU-B), and returns the ledger with the
// names of the pods queued for writing.
func swappedPair(t *testing.T) (p *Plugin, c, d *corev1.Pod, dirty *[]string) {
	t.Helper()
	dirty = &[]string{}
	p, _ = newTestPluginDirty(t, testConfig(t.TempDir()), newTestBackend(2, 81559), func(r device.PodRef) { *dirty = append(*dirty, r.Name) })
	c = testPod("c", t0, testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	d = testPod("d", t0.Add(time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-B"}})
	p.Ledger().UpsertPod(c)
	p.Ledger().UpsertPod(d)
	mustAlloc(t, p, "GPU-A::0") // matched to c, the kubelet's call was d's
	p.Ledger().Reconcile([]ledger.ObservedContainer{{Namespace: "default", Pod: "d", Container: "x", IDs: []string{"GPU-A::0"}}})
	*dirty = nil
	return p, c, d, dirty
}

// case C04, graceful deletion: the extender charges a terminating pod until it is gone, so the plugin
// republishes only then; a rewrite while d terminates would land before the release it makes
// up for, and the extender would count the difference twice.
func TestRepublishWaitsUntilTheTerminatingPodIsGone(t *testing.T) {
	p, c, d, dirty := swappedPair(t)
	now := metav1.NewTime(t0.Add(time.Minute))
	terminating := d.DeepCopy()
	terminating.DeletionTimestamp = &now
	p.Ledger().UpsertPod(terminating)
	if len(*dirty) != 0 || p.Ledger().PlannedRewrite(c.UID) != nil {
		t.Fatalf("republished while d terminates: queued %v, c's rewrite %v", *dirty, p.Ledger().PlannedRewrite(c.UID))
	}
	p.Ledger().DeletePod(d.UID)
	if got := p.Ledger().PlannedRewrite(c.UID); strings.Join(*dirty, ",") != "c" || got == nil || got.Containers[0].Devices[0].UUID != "GPU-B" {
		t.Fatalf("after d is gone: queued %v, c's rewrite %v; want c rewritten to GPU-B", *dirty, got)
	}
}

// case C04: the member chosen to carry the difference goes before its rewrite is written: the sums are
// taken again without it (here the rest adds up, so nothing more is written).
func TestRepublishRetargetsWhenTheRewrittenPodGoes(t *testing.T) {
	p, c, d, dirty := swappedPair(t)
	e := testPod("e", t0.Add(2*time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(e)
	p.Ledger().DeletePod(d.UID) // held GPU-A, planned GPU-B: c (planned GPU-A, runs on GPU-B) is rewritten
	if got := p.Ledger().PlannedRewrite(c.UID); got == nil || got.Containers[0].Devices[0].UUID != "GPU-B" {
		t.Fatalf("c's rewrite %v, want GPU-B", got)
	}
	*dirty = nil
	p.Ledger().DeletePod(c.UID) // gone before its write: e (planned and running on GPU-A) adds up alone
	if len(*dirty) != 0 || p.Ledger().PlannedRewrite(e.UID) != nil {
		t.Fatalf("after c went: queued %v, e's rewrite %v; want nothing (e's annotation is its plan)", *dirty, p.Ledger().PlannedRewrite(e.UID))
	}
}
