package drapreempt

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestChoose(t *testing.T) {
	// The node: 2 GPUs × 81920 MiB, each full with one 81920 MiB claim of priority 0.
	lowA, lowB := mkPod("default", "low-a", 0), mkPod("default", "low-b", 0)
	full := []*resourceapi.ResourceClaim{held("ca", "node-1", 0, 81920, lowA), held("cb", "node-1", 1, 81920, lowB)}
	slices1 := []*resourceapi.ResourceSlice{gpuSlice("node-1", 2, 81920, 10)}
	never := mkPod("default", "high", 100)
	never.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	gone := mkPod("default", "low-a", 0)
	gone.DeletionTimestamp = &metav1.Time{}
	// half-full GPUs: 4 pods of 40960 MiB, priorities 1..4; a preemptor of 40000 takes the lowest
	p1, p2, p3, p4 := mkPod("default", "p1", 1), mkPod("default", "p2", 2), mkPod("default", "p3", 3), mkPod("default", "p4", 4)
	halves := []*resourceapi.ResourceClaim{
		held("c1", "node-1", 0, 40960, p1), held("c3", "node-1", 0, 40960, p3),
		held("c2", "node-1", 1, 40960, p2), held("c4", "node-1", 1, 40960, p4),
	}
	shA, shB := mkPod("default", "sh-a", 0), mkPod("default", "sh-b", 0)
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		needs   []*resourceapi.ResourceClaim
		claims  []*resourceapi.ResourceClaim
		pods    []*corev1.Pod
		pdb     map[string]bool // pods whose eviction violates a budget allowing 0
		slices  []*resourceapi.ResourceSlice
		node    string
		victims []string // empty: no preemption
		why     string   // substring of the reason when no preemption
	}{
		{name: "issue: one victim of two", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, node: "node-1", victims: []string{"low-a"}},
		{name: "preemptionPolicy Never", pod: never, needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, why: "Never"},
		{name: "equal priority", pod: mkPod("default", "high", 0), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, why: "no node"},
		{name: "PDB allowing 0 skips that victim", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, pdb: map[string]bool{"low-a": true}, node: "node-1", victims: []string{"low-b"}},
		{name: "two GPUs need both victims", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 2, 40000)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, node: "node-1", victims: []string{"low-a", "low-b"}},
		{name: "lowest priority first", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: halves, pods: []*corev1.Pod{p1, p2, p3, p4}, node: "node-1", victims: []string{"p1"}},
		{name: "only lower priority may go", pod: mkPod("default", "high", 2), needs: []*resourceapi.ResourceClaim{need("n", 1, 60000)},
			claims: halves, pods: []*corev1.Pod{p1, p2, p3, p4}, why: "no node"},
		{name: "whole GPU needs both on one", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 0)},
			claims: halves, pods: []*corev1.Pod{p1, p2, p3, p4}, node: "node-1", victims: []string{"p1", "p3"}},
		{name: "terminating victim counts as gone", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: full, pods: []*corev1.Pod{gone, lowB}, why: "nothing to evict"},
		{name: "shared claim goes with all its pods", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: []*resourceapi.ResourceClaim{held("s", "node-1", 0, 81920, shA, shB), held("cb", "node-1", 1, 81920, lowB)},
			pods:   []*corev1.Pod{shA, shB, mkPod("default", "low-b", 5)}, node: "node-1", victims: []string{"sh-a", "sh-b"}},
		{name: "shared with a pod that stays frees nothing", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: []*resourceapi.ResourceClaim{held("s", "node-1", 0, 81920, shA, mkPod("default", "vip", 1000)), held("cb", "node-1", 1, 81920, lowB)},
			pods:   []*corev1.Pod{shA, mkPod("default", "vip", 1000), lowB}, node: "node-1", victims: []string{"low-b"}},
		{name: "selector limits the devices", pod: mkPod("default", "high", 100),
			needs:  []*resourceapi.ResourceClaim{need("n", 1, 40000, `device.attributes["gpu.hami-go.io"].uuid in ["GPU-node-1-1"]`)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, node: "node-1", victims: []string{"low-b"}},
		{name: "selector nobody matches", pod: mkPod("default", "high", 100),
			needs:  []*resourceapi.ResourceClaim{need("n", 1, 40000, `device.attributes["gpu.hami-go.io"].productName.matches("A100")`)},
			claims: full, pods: []*corev1.Pod{lowA, lowB}, why: "no node"},
		{name: "fewest victims across nodes", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 0)},
			claims: append(slices.Clone(halves), held("z", "node-2", 0, 81920, lowA)),
			slices: []*resourceapi.ResourceSlice{gpuSlice("node-1", 2, 81920, 10), gpuSlice("node-2", 1, 81920, 10)},
			pods:   []*corev1.Pod{p1, p2, p3, p4, lowA}, node: "node-2", victims: []string{"low-a"}},
		{name: "fits already", pod: mkPod("default", "high", 100), needs: []*resourceapi.ResourceClaim{need("n", 1, 40000)},
			claims: halves[:1], pods: []*corev1.Pod{p1}, why: "nothing to evict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl := tc.slices
			if sl == nil {
				sl = slices1
			}
			snap := &Snapshot{Slices: sl, Claims: tc.claims, Pods: podsByUID(tc.pods...)}
			if tc.pdb != nil {
				snap.Disruptions = func(vs []*corev1.Pod) []bool {
					out := make([]bool, len(vs))
					for i, v := range vs {
						out[i] = tc.pdb[v.Name]
					}
					return out
				}
			}
			plan, err := NewChooser().Choose(tc.pod, tc.needs, snap)
			if len(tc.victims) == 0 {
				var np *NoPreemption
				if !errors.As(err, &np) {
					t.Fatalf("want no preemption, got %+v (err %v)", plan, err)
				}
				if !contains(np.Reason, tc.why) {
					t.Fatalf("reason %q does not mention %q", np.Reason, tc.why)
				}
				return
			}
			if err != nil {
				t.Fatalf("want victims %v, got %v", tc.victims, err)
			}
			var names []string
			for _, v := range plan.Victims {
				names = append(names, v.Name)
			}
			if plan.Node != tc.node || !slices.Equal(names, tc.victims) {
				t.Fatalf("got node %s victims %v, want %s %v", plan.Node, names, tc.node, tc.victims)
			}
		})
	}
}

func TestChooseRefusesWhatItDoesNotEvaluate(t *testing.T) {
	lowA := mkPod("default", "low-a", 0)
	other := need("n", 1, 40000)
	other.Spec.Devices.Requests[0].Exactly.DeviceClassName = "other.example.com"
	snap := &Snapshot{Slices: []*resourceapi.ResourceSlice{gpuSlice("node-1", 1, 81920, 10)},
		Claims: []*resourceapi.ResourceClaim{held("ca", "node-1", 0, 81920, lowA)}, Pods: podsByUID(lowA)}
	_, err := NewChooser().Choose(mkPod("default", "high", 100), []*resourceapi.ResourceClaim{other}, snap)
	if err == nil || !contains(err.Error(), "other.example.com") {
		t.Fatalf("want a refusal naming the class, got %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
