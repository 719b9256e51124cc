package deviceplugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// case C46 (issue 28 item 5): the device plugin's per-GPU charge (the metrics' figures) equals the
// extender's (allocator.ChargeOf of the pod's plan) at every stage of a pod's life, and its
// slices stay exported while the pod is charged: placed (no container created yet), running,
// terminating; nothing once it finished. Before, a placed pod counted nothing until its
// containers were created, and a terminating one vanished from the charge and the slice series
// while the extender still held its GPUs.
func TestChargeAgreesWithExtenderThroughPodLife(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	pod := testPod("p", t0, testNode,
		ctr{name: "init", kind: device.KindInit, mem: 30000, cores: 40, gpus: []string{"GPU-A"}},
		ctr{name: "app", mem: 20000, cores: 30, gpus: []string{"GPU-A", "GPU-B"}})
	plan, err := device.DecodeAllocation(pod.Annotations[device.AnnoPlanned])
	if err != nil {
		t.Fatal(err)
	}
	ext := allocator.NodeUsage{}
	ext.Add(allocator.ChargeOf(&plan))
	check := func(stage string, want allocator.NodeUsage, slices int) {
		t.Helper()
		got := p.Ledger().Charged()
		for _, u := range []string{"GPU-A", "GPU-B"} {
			if got[u] != want[u] {
				t.Errorf("%s: %s charged %+v, the extender %+v", stage, u, got[u], want[u])
			}
		}
		if s, _ := p.Ledger().Snapshot(); len(s) != slices {
			t.Errorf("%s: %d slices exported, want %d", stage, len(s), slices)
		}
	}
	if g := ext["GPU-A"]; g.MemoryMiB != 30000 || g.CoresPercent != 40 || g.Sharers != 1 {
		t.Fatalf("the extender's charge of GPU-A: %+v, want 30000 MiB, 40%%, 1 sharer (the init container's, C40)", g)
	}

	p.Ledger().UpsertPod(pod)
	check("placed, no container created", ext, 0)
	mustCreate(t, p, pod, "init", "GPU-A::0")
	check("init container running", ext, 1)
	mustCreate(t, p, pod, "app", "GPU-A::0", "GPU-B::0")
	check("app container running", ext, 3)

	terminating := pod.DeepCopy()
	now := metav1.NewTime(t0)
	terminating.DeletionTimestamp = &now
	p.Ledger().UpsertPod(terminating)
	check("terminating", ext, 3)

	finished := terminating.DeepCopy()
	finished.Status.Phase = corev1.PodSucceeded
	p.Ledger().UpsertPod(finished)
	check("finished", allocator.NodeUsage{}, 0)
}
