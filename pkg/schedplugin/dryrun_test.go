package schedplugin

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/internal/podtest"
)

// podInfo is a PodInfo of which the plugin reads only GetPod.
type podInfo struct {
	fwk.PodInfo
	pod *corev1.Pod
}

func (p podInfo) GetPod() *corev1.Pod { return p.pod }

// TestDryRunFollowsAddAndRemove (case C66): with preemption verb, Filter follows the pods the
// framework removes from and adds back to a node in a CycleState copy, as DefaultPreemption's
// SelectVictimsOnNode does (kube-scheduler v1.37.2 default_preemption.go: remove every
// lower-priority pod, Filter, then add back each while the pod still fits), so that it chooses
// GPU victims. One GPU of 8192 MiB holds low-a (2000 MiB) and low-b (3000 MiB); big asks 5000.
// Without PreFilterExtensions, Filter kept PreFilter's verdict and kube-scheduler's preemption
// found no victim for a GPU pod.
func TestDryRunFollowsAddAndRemove(t *testing.T) {
	args := &runtime.Unknown{Raw: []byte(`{"preemption":"verb"}`), ContentType: runtime.ContentTypeJSON}
	e := newEnv(t, args, []string{"node-a"}, map[string]int64{"node-a": 8192})
	ctx := context.Background()
	lowA := podtest.Pending("default", "low-a", podtest.GPU("c", 1, "2000", 0))
	lowB := podtest.Pending("default", "low-b", podtest.GPU("c", 1, "3000", 0))
	for _, p := range []*corev1.Pod{lowA, lowB} {
		st, _ := e.preFilter(p)
		if s := e.p.Reserve(ctx, st, p, "node-a"); !s.IsSuccess() {
			t.Fatal(s)
		}
	}
	big := podtest.Pending("default", "big", podtest.GPU("c", 1, "5000", 0))
	st, s := e.preFilter(big)
	if !s.IsSuccess() {
		t.Fatal(s)
	}
	node := e.nodes[0]
	ext := e.p.PreFilterExtensions()
	if ext == nil {
		t.Fatal("PreFilterExtensions is nil with preemption verb")
	}
	filter := func(st fwk.CycleState) *fwk.Status { return e.p.Filter(ctx, st, big, node) }
	if got := filter(st); got.Code() != fwk.Unschedulable {
		t.Fatalf("before the dry run: %v, want Unschedulable (5000 MiB used of 8192)", got)
	}
	dry := st.Clone()
	for _, p := range []*corev1.Pod{lowA, lowB} {
		if s := ext.RemovePod(ctx, dry, big, podInfo{pod: p}, node); !s.IsSuccess() {
			t.Fatal(s)
		}
	}
	if got := filter(dry); !got.IsSuccess() {
		t.Fatalf("both lower-priority pods removed: %v, want Success", got)
	}
	// Reprieve: low-b back (3000 + 5000 <= 8192) fits; low-a then does not (10000).
	ext.AddPod(ctx, dry, big, podInfo{pod: lowB}, node)
	if got := filter(dry); !got.IsSuccess() {
		t.Fatalf("low-b added back: %v, want Success", got)
	}
	ext.AddPod(ctx, dry, big, podInfo{pod: lowA}, node)
	if got := filter(dry); got.Code() != fwk.Unschedulable {
		t.Fatalf("low-a added back too: %v, want Unschedulable", got)
	}
	ext.RemovePod(ctx, dry, big, podInfo{pod: lowA}, node)
	if got := filter(dry); !got.IsSuccess() {
		t.Fatalf("low-a removed again (the victim): %v, want Success", got)
	}
	// A nominated GPU pod the cache does not book counts (placed); a CPU pod changes nothing.
	nominated := dry.Clone()
	ext.AddPod(ctx, nominated, big, podInfo{pod: podtest.Pending("default", "cpu", podtest.Ctr{Name: "c"})}, node)
	if got := filter(nominated); !got.IsSuccess() {
		t.Fatalf("a CPU pod added: %v, want Success", got)
	}
	ext.AddPod(ctx, nominated, big, podInfo{pod: podtest.Pending("default", "nominated", podtest.GPU("c", 1, "1000", 0))}, node)
	if got := filter(nominated); got.Code() != fwk.Unschedulable {
		t.Fatalf("a nominated 1000 MiB pod added: %v, want Unschedulable (3000 + 1000 + 5000 > 8192)", got)
	}
	// Each copy keeps its own changes; the cycle's own state and the cache are untouched.
	if got := filter(dry); !got.IsSuccess() {
		t.Fatalf("the copy before the nominated pod: %v, want Success", got)
	}
	if got := filter(st); got.Code() != fwk.Unschedulable {
		t.Fatalf("the original CycleState after the dry run: %v, want Unschedulable", got)
	}
	if got := e.gpuMiB("node-a"); got != 5000 {
		t.Fatalf("booked on node-a after the dry run: %d MiB, want 5000", got)
	}
}

// TestDryRunNotFollowedWithoutVerb: with preemption own (the default) or none, Filter keeps
// PreFilter's verdicts (PreFilterExtensions nil), so kube-scheduler's DefaultPreemption frees
// no GPUs beside the extender's own loop (own) or at all (none).
func TestDryRunNotFollowedWithoutVerb(t *testing.T) {
	for _, mode := range []string{"own", "none"} {
		args := &runtime.Unknown{Raw: []byte(`{"preemption":"` + mode + `"}`), ContentType: runtime.ContentTypeJSON}
		e := newEnv(t, args, []string{"node-a"}, map[string]int64{"node-a": 8192})
		if ext := e.p.PreFilterExtensions(); ext != nil {
			t.Errorf("preemption %s: PreFilterExtensions %v, want nil", mode, ext)
		}
	}
}
