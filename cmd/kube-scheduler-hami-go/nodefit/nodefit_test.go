package nodefit

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
)

// Resource names as the chart's plugin profile uses them: count (checked), per-GPU memory
// (ignored), the node-total GPU memory the webhook adds (checked).
const (
	gpu    = v1.ResourceName("nvidia.com/gpu")
	gpumem = v1.ResourceName("nvidia.com/gpumem")
	total  = v1.ResourceName("hami-go.io/gpu-memory")
)

func rl(kv ...any) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		name, ok := kv[i].(v1.ResourceName)
		if !ok {
			name = v1.ResourceName(kv[i].(string))
		}
		l[name] = resource.MustParse(kv[i+1].(string))
	}
	return l
}

func podWith(name string, c ...v1.ResourceList) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	for i, r := range c {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: v1.ResourceRequirements{Requests: r, Limits: r}})
	}
	return p
}

func nodeInfo(alloc v1.ResourceList, pods ...*v1.Pod) fwk.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc}})
	return ni
}

// upstreamFit is kube-scheduler's own NodeResourcesFit with the same args.
func upstreamFit(t *testing.T, args *config.NodeResourcesFitArgs) fwk.Plugin {
	t.Helper()
	pl, err := noderesources.NewFit(context.Background(), args, nil, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func filterOnce(t *testing.T, pl fwk.Plugin, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	t.Helper()
	state := framework.NewCycleState()
	if _, st := pl.(fwk.PreFilterPlugin).PreFilter(context.Background(), state, pod, []fwk.NodeInfo{ni}); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	return pl.(fwk.FilterPlugin).Filter(context.Background(), state, pod, ni)
}

func sortedReasons(st *fwk.Status) []string {
	if st == nil {
		return nil
	}
	r := slices.Clone(st.Reasons())
	slices.Sort(r)
	return r
}

// TestFilterAnswersAsUpstream: for every case the plugin's Filter answers what kube-scheduler's
// NodeResourcesFit answers (code and reasons), and the table's want pins that answer, so a
// regression in either shows.
func TestFilterAnswersAsUpstream(t *testing.T) {
	args := &config.NodeResourcesFitArgs{
		IgnoredResources:      []string{string(gpumem)},
		IgnoredResourceGroups: []string{"ignored.example.com"},
		ScoringStrategy:       &config.ScoringStrategy{Type: config.LeastAllocated, Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}},
	}
	node := rl(v1.ResourceCPU, "4", v1.ResourceMemory, "8Gi", v1.ResourcePods, "10", gpu, "4", total, "81920")
	running := podWith("running", rl(v1.ResourceCPU, "1", gpu, "3", total, "40000"))
	cases := []struct {
		name    string
		pod     *v1.Pod
		ni      fwk.NodeInfo
		code    fwk.Code
		reasons []string
	}{
		{"fits", podWith("p", rl(v1.ResourceCPU, "1", gpu, "1", gpumem, "99999", total, "1000")), nodeInfo(node, running), fwk.Success, nil},
		{"count in use", podWith("p", rl(gpu, "2", total, "1000")), nodeInfo(node, running), fwk.Unschedulable, []string{"Insufficient nvidia.com/gpu"}},
		{"count beyond the node", podWith("p", rl(gpu, "5")), nodeInfo(node), fwk.UnschedulableAndUnresolvable, []string{"Insufficient nvidia.com/gpu"}},
		{"cpu and gpu memory", podWith("p", rl(v1.ResourceCPU, "4", total, "50000")), nodeInfo(node, running), fwk.Unschedulable, []string{"Insufficient cpu", "Insufficient hami-go.io/gpu-memory"}},
		{"cpu unresolvable, gpu in use", podWith("p", rl(v1.ResourceCPU, "5", gpu, "2")), nodeInfo(node, running), fwk.UnschedulableAndUnresolvable, []string{"Insufficient cpu", "Insufficient nvidia.com/gpu"}},
		{"ignored name and group", podWith("p", rl(gpumem, "1000000", "ignored.example.com/x", "7")), nodeInfo(node), fwk.Success, nil},
		{"node without the resource", podWith("p", rl(gpu, "1")), nodeInfo(rl(v1.ResourceCPU, "4", v1.ResourcePods, "10")), fwk.UnschedulableAndUnresolvable, []string{"Insufficient nvidia.com/gpu"}},
		{"two containers sum", podWith("p", rl(gpu, "1"), rl(gpu, "1")), nodeInfo(node, running), fwk.Unschedulable, []string{"Insufficient nvidia.com/gpu"}},
		{"no extended resource", podWith("p", rl(v1.ResourceMemory, "9Gi")), nodeInfo(node), fwk.UnschedulableAndUnresolvable, []string{"Insufficient memory"}},
		{"hugepages stay upstream's", podWith("p", rl(v1.ResourceName("hugepages-2Mi"), "2Mi")), nodeInfo(node), fwk.UnschedulableAndUnresolvable, []string{"Insufficient hugepages-2Mi"}},
		{"too many pods", podWith("p", rl(gpu, "1")), nodeInfo(rl(v1.ResourcePods, "1", gpu, "4"), podWith("other")), fwk.Unschedulable, []string{"Too many pods"}},
	}
	ours, err := New(context.Background(), &runtime.Unknown{Raw: []byte(`{"ignoredResources":["nvidia.com/gpumem"],"ignoredResourceGroups":["ignored.example.com"]}`), ContentType: runtime.ContentTypeJSON}, nil, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}
	up := upstreamFit(t, args)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := filterOnce(t, up, tc.pod, tc.ni)
			got := filterOnce(t, ours, tc.pod, tc.ni)
			if got.Code() != want.Code() || !slices.Equal(sortedReasons(got), sortedReasons(want)) {
				t.Fatalf("ours %v %q, upstream %v %q", got.Code(), got.Reasons(), want.Code(), want.Reasons())
			}
			if got.Code() != tc.code || !slices.Equal(sortedReasons(got), tc.reasons) {
				t.Fatalf("got %v %q, want %v %q", got.Code(), got.Reasons(), tc.code, tc.reasons)
			}
		})
	}
}

// TestPreFilterLeavesThePodAlone: the pod PreFilter strips for upstream is a copy; the pod the
// framework holds keeps every resource.
func TestPreFilterLeavesThePodAlone(t *testing.T) {
	pl, err := New(context.Background(), nil, nil, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}
	pod := podWith("p", rl(v1.ResourceCPU, "1", gpu, "1", total, "1000"))
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: rl(gpu, "1")}}}
	before := pod.DeepCopy()
	if st := filterOnce(t, pl, pod, nodeInfo(rl(v1.ResourceCPU, "4", v1.ResourcePods, "10", gpu, "1", total, "1000"))); !st.IsSuccess() {
		t.Fatalf("Filter: %v", st)
	}
	if pod.Spec.Containers[0].Resources.Requests[gpu] != before.Spec.Containers[0].Resources.Requests[gpu] ||
		len(pod.Spec.Containers[0].Resources.Limits) != 3 || len(pod.Spec.InitContainers[0].Resources.Requests) != 1 {
		t.Fatalf("pod changed: %+v", pod.Spec)
	}
}

// TestArgs: defaults as upstream's (LeastAllocated over cpu and memory), and a bad value named.
func TestArgs(t *testing.T) {
	a, err := argsFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.ScoringStrategy == nil || a.ScoringStrategy.Type != config.LeastAllocated || len(a.ScoringStrategy.Resources) != 2 {
		t.Fatalf("defaults %+v", a.ScoringStrategy)
	}
	_, err = New(context.Background(), &runtime.Unknown{Raw: []byte(`{"ignoredResourceGroups":["a/b"]}`), ContentType: runtime.ContentTypeJSON}, nil, feature.Features{})
	if err == nil || !strings.Contains(err.Error(), "ignoredResourceGroups") {
		t.Fatalf("bad group: %v", err)
	}
}

// BenchmarkFilter: one GPU pod's Filter on one node, upstream against this plugin (the regular
// expression per name per node is what the plugin saves).
func BenchmarkFilter(b *testing.B) {
	raw := &runtime.Unknown{Raw: []byte(`{"ignoredResources":["nvidia.com/gpumem"]}`), ContentType: runtime.ContentTypeJSON}
	args, _ := argsFrom(raw)
	node := nodeInfo(rl(v1.ResourceCPU, "4", v1.ResourceMemory, "8Gi", v1.ResourcePods, "110", gpu, "40", total, "81920"))
	pod := podWith("p", rl(v1.ResourceCPU, "1", gpu, "1", gpumem, "1000", total, "1000"))
	up, _ := noderesources.NewFit(context.Background(), args, nil, feature.Features{})
	ours, _ := New(context.Background(), raw, nil, feature.Features{})
	for _, pl := range []fwk.Plugin{up, ours} {
		b.Run(pl.Name(), func(b *testing.B) {
			state := framework.NewCycleState()
			pl.(fwk.PreFilterPlugin).PreFilter(context.Background(), state, pod, nil)
			for b.Loop() {
				if st := pl.(fwk.FilterPlugin).Filter(context.Background(), state, pod, node); !st.IsSuccess() {
					b.Fatal(st)
				}
			}
		})
	}
}

// TestNodeChangeHintC49: the queueing hint a Node change runs for a pod this plugin refused is
// upstream's, over the pod as written (case C49: the GPU pod refused for a node that had not yet
// published nvidia.com/gpu and its slice names is retried when the node's allocatable grows to
// hold them all, and not while one of them is still missing).
func TestNodeChangeHintC49(t *testing.T) {
	pl, err := New(context.Background(), &runtime.Unknown{Raw: []byte(`{"ignoredResources":["nvidia.com/gpumem"]}`), ContentType: runtime.ContentTypeJSON}, nil, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := pl.(fwk.EnqueueExtensions).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var hint fwk.QueueingHintFn
	for _, e := range events {
		if e.Event.Resource == fwk.Node && e.Event.ActionType&fwk.UpdateNodeAllocatable != 0 {
			hint = e.QueueingHintFn
		}
	}
	if hint == nil {
		t.Fatalf("no Node UpdateNodeAllocatable event among %+v", events)
	}
	pod := podWith("p", rl(gpu, "1", gpumem, "4000", total, "4000"))
	node := func(alloc v1.ResourceList) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Allocatable: alloc}}
	}
	bare := node(rl(v1.ResourceCPU, "4", v1.ResourcePods, "110"))
	for _, tc := range []struct {
		name     string
		modified *v1.Node
		want     fwk.QueueingHint
	}{
		{"every name published", node(rl(v1.ResourceCPU, "4", v1.ResourcePods, "110", gpu, "80", gpumem, "655360", total, "655360")), fwk.Queue},
		{"the slice name still missing", node(rl(v1.ResourceCPU, "4", v1.ResourcePods, "110", gpu, "80", total, "655360")), fwk.QueueSkip},
	} {
		got, err := hint(klog.Background(), pod, bare, tc.modified)
		if err != nil || got != tc.want {
			t.Errorf("%s: hint %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
}
