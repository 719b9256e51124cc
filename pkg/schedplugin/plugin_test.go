package schedplugin

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

// TestPodsNotOursAreSkipped: a pod without GPUs and a GPU pod of another scheduler get Skip at
// PreFilter, PreScore and Bind (DefaultBinder binds them), nothing is booked, and Reserve and
// Unreserve leave them alone.
func TestPodsNotOursAreSkipped(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a"}, map[string]int64{"node-a": 8192})
	other := podtest.Pending("default", "other-scheduler", podtest.GPU("c", 1, "1024", 0))
	other.Spec.SchedulerName = "default-scheduler"
	for _, pod := range []*corev1.Pod{podtest.Pending("default", "cpu", podtest.Ctr{Name: "c", NoGPU: true}), other} {
		st, s := e.preFilter(pod)
		if s.Code() != fwk.Skip {
			t.Fatalf("%s: PreFilter %v, want Skip", pod.Name, s)
		}
		if s := e.p.PreScore(context.Background(), st, pod, e.nodes); s.Code() != fwk.Skip {
			t.Fatalf("%s: PreScore %v, want Skip", pod.Name, s)
		}
		if s := e.p.Reserve(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
			t.Fatalf("%s: Reserve %v", pod.Name, s)
		}
		if s := e.p.Bind(context.Background(), st, pod, "node-a"); s.Code() != fwk.Skip {
			t.Fatalf("%s: Bind %v, want Skip", pod.Name, s)
		}
		if node, _, _ := e.p.cache.PodState(device.RefOf(pod)); node != "" || e.gpuMiB("node-a") != 0 {
			t.Fatalf("%s: booked on %q, %d MiB", pod.Name, node, e.gpuMiB("node-a"))
		}
	}
	for _, a := range e.client.Actions() {
		if a.GetSubresource() == "binding" {
			t.Fatalf("the plugin bound a pod that is not its own: %v", a)
		}
	}
}

// TestPreFilterRefusals: a GPU request that does not parse is UnschedulableAndUnresolvable
// naming the error; before the extender is ready a GPU pod is Unschedulable with its not-ready
// reason, while a pod without GPUs is still skipped.
func TestPreFilterRefusals(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a"}, map[string]int64{"node-a": 8192})
	bad := podtest.Pending("default", "bad", podtest.Ctr{Name: "c", Kind: device.KindApp, Count: 1, Pct: 150})
	if _, s := e.preFilter(bad); s.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(s.Message(), "hami-go: ") || !strings.Contains(s.Message(), "150") {
		t.Fatalf("PreFilter of a bad request: %v", s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run stops before its informers sync: never ready
	p, err := start(ctx, extender.DefaultConfig(), e.client, nil, clock.RealClock{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gpu := podtest.Pending("default", "gpu", podtest.GPU("c", 1, "1024", 0))
	if _, s := p.PreFilter(context.Background(), newCycleState(), gpu, e.nodes); s.Code() != fwk.Unschedulable || s.Message() != extender.ErrNotReady.Error() {
		t.Fatalf("PreFilter before ready: %v", s)
	}
	cpu := podtest.Pending("default", "cpu", podtest.Ctr{Name: "c", NoGPU: true})
	if _, s := p.PreFilter(context.Background(), newCycleState(), cpu, e.nodes); s.Code() != fwk.Skip {
		t.Fatalf("PreFilter of a CPU pod before ready: %v", s)
	}
}

// TestFilterOneOfThree: a 6000 MiB pod fits node-a (8 GiB free) only; node-b (8 GiB, 4 GiB taken)
// is Unschedulable with the extender's reason (preemption may help), node-c (4 GiB) is
// UnschedulableAndUnresolvable (too small even empty).
func TestFilterOneOfThree(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a", "node-b", "node-c"}, map[string]int64{"node-a": 8192, "node-b": 8192, "node-c": 4096})
	first := podtest.Pending("default", "first", podtest.GPU("c", 1, "4096", 0))
	st, _ := e.preFilter(first)
	if s := e.p.Reserve(context.Background(), st, first, "node-b"); !s.IsSuccess() {
		t.Fatal(s)
	}
	pod := podtest.Pending("default", "big", podtest.GPU("c", 1, "6000", 0))
	st, s := e.preFilter(pod)
	if !s.IsSuccess() {
		t.Fatal(s)
	}
	want := extenderVerdicts(e, pod)
	got := e.filter(st, pod)
	if !got["node-a"].IsSuccess() {
		t.Fatalf("node-a: %v, want Success", got["node-a"])
	}
	if s := got["node-b"]; s.Code() != fwk.Unschedulable || s.Message() != want.FailedNodes["node-b"] || s.Message() == "" {
		t.Fatalf("node-b: %v, want Unschedulable %q", s, want.FailedNodes["node-b"])
	}
	if s := got["node-c"]; s.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(s.Message(), "even with the node empty") {
		t.Fatalf("node-c: %v, want UnschedulableAndUnresolvable (even with the node empty)", s)
	}
	unknown := fakeNodeInfo{node: &corev1.Node{}}
	unknown.node.Name = "node-new"
	if s := e.p.Filter(context.Background(), st, pod, unknown); s.Code() != fwk.Unschedulable {
		t.Fatalf("a node PreFilter did not see: %v", s)
	}
}

// extenderVerdicts is the extender's own Filter answer for pod over the env's nodes.
func extenderVerdicts(e *env, pod *corev1.Pod) extenderFilterResult {
	names := make([]string, 0, len(e.nodes))
	for _, n := range e.nodes {
		names = append(names, n.Node().Name)
	}
	return e.p.sched.Filter(pod, names)
}

// TestScoreRanksBinpack: under binpack a node with GPU memory in use outranks an empty one;
// Score is the extender's 0..10 ×10, the reserved (best) node 100.
func TestScoreRanksBinpack(t *testing.T) {
	e := newEnv(t, nil, []string{"node-empty", "node-used"}, map[string]int64{"node-empty": 8192, "node-used": 8192})
	first := podtest.Pending("default", "first", podtest.GPU("c", 1, "2048", 0))
	st, _ := e.preFilter(first)
	if s := e.p.Reserve(context.Background(), st, first, "node-used"); !s.IsSuccess() {
		t.Fatal(s)
	}
	pod := podtest.Pending("default", "second", podtest.GPU("c", 1, "2048", 0))
	st, _ = e.preFilter(pod)
	if s := e.p.PreScore(context.Background(), st, pod, e.nodes); !s.IsSuccess() {
		t.Fatal(s)
	}
	score := map[string]int64{}
	for _, n := range e.nodes {
		v, s := e.p.Score(context.Background(), st, pod, n)
		if !s.IsSuccess() {
			t.Fatal(s)
		}
		score[n.Node().Name] = v
	}
	if score["node-used"] != fwk.MaxNodeScore || score["node-empty"] >= score["node-used"] || score["node-empty"]%scoreScale != 0 {
		t.Fatalf("scores %v: want node-used 100 above node-empty, multiples of 10", score)
	}
	if e.p.ScoreExtensions() != nil {
		t.Fatal("ScoreExtensions: want nil (Score is already 0..100)")
	}
}

// TestReserveIsSeenAndUnreserveFrees: Reserve moves the first pod's booking to the node chosen
// (not Filter's pick); the next pod's PreFilter sees that GPU taken; Unreserve frees it without
// marking the pod gone (it can be reserved again).
func TestReserveIsSeenAndUnreserveFrees(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a", "node-b"}, map[string]int64{"node-a": 8192, "node-b": 8192})
	first := podtest.Pending("default", "first", podtest.GPU("c", 1, "6000", 0))
	st1, _ := e.preFilter(first)
	if node, stage, _ := e.p.cache.PodState(device.RefOf(first)); node != "node-a" || stage != "reserved" {
		t.Fatalf("after PreFilter: %q %q, want Filter's reservation on node-a", node, stage)
	}
	if s := e.p.Reserve(context.Background(), st1, first, "node-b"); !s.IsSuccess() {
		t.Fatal(s)
	}
	if e.gpuMiB("node-a") != 0 || e.gpuMiB("node-b") != 6000 {
		t.Fatalf("after Reserve on node-b: node-a %d MiB, node-b %d MiB", e.gpuMiB("node-a"), e.gpuMiB("node-b"))
	}
	second := podtest.Pending("default", "second", podtest.GPU("c", 1, "6000", 0))
	st2, _ := e.preFilter(second)
	got := e.filter(st2, second)
	if !got["node-a"].IsSuccess() || got["node-b"].Code() != fwk.Unschedulable {
		t.Fatalf("second pod: node-a %v, node-b %v; want node-a only", got["node-a"], got["node-b"])
	}
	e.p.Unreserve(context.Background(), st2, second, "node-a") // the second pod's own Filter reservation
	e.p.Unreserve(context.Background(), st1, first, "node-b")
	e.p.Unreserve(context.Background(), st1, first, "node-b") // idempotent
	if e.gpuMiB("node-a") != 0 || e.gpuMiB("node-b") != 0 {
		t.Fatalf("after Unreserve: node-a %d MiB, node-b %d MiB", e.gpuMiB("node-a"), e.gpuMiB("node-b"))
	}
	st2, _ = e.preFilter(second)
	if got := e.filter(st2, second); !got["node-a"].IsSuccess() || !got["node-b"].IsSuccess() {
		t.Fatalf("after Unreserve: %v, want both nodes", got)
	}
	if s := e.p.Reserve(context.Background(), st1, first, "node-b"); !s.IsSuccess() {
		t.Fatalf("Reserve after Unreserve (the pod is not gone): %v", s)
	}
	if s := e.p.Reserve(context.Background(), st2, second, "node-b"); s.Code() != fwk.Unschedulable || !strings.Contains(s.Message(), "node node-b") {
		t.Fatalf("Reserve where the GPU was taken since Filter: %v", s)
	}
}

// TestPostFilterDropsTheReservation: when another plugin refused the node the extender's Filter
// reserved, PostFilter drops that reservation and answers Unschedulable (no nomination).
func TestPostFilterDropsTheReservation(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a"}, map[string]int64{"node-a": 8192})
	pod := podtest.Pending("default", "p", podtest.GPU("c", 1, "4096", 0))
	st, _ := e.preFilter(pod)
	if e.gpuMiB("node-a") != 4096 {
		t.Fatalf("Filter's reservation: %d MiB", e.gpuMiB("node-a"))
	}
	r, s := e.p.PostFilter(context.Background(), st, pod, nil)
	if r != nil || s.Code() != fwk.Unschedulable {
		t.Fatalf("PostFilter: %v %v", r, s)
	}
	if e.gpuMiB("node-a") != 0 {
		t.Fatalf("after PostFilter: %d MiB booked", e.gpuMiB("node-a"))
	}
}

// TestBindWritesThePlan: Bind creates one Binding carrying the planned allocation
// (device.AnnoPlanned) for the reserved GPU, and the pod ends bound with it.
func TestBindWritesThePlan(t *testing.T) {
	e := newEnv(t, runtimeArgs(`{"gpuPolicy":"binpack"}`), []string{"node-a"}, map[string]int64{"node-a": 8192})
	pod := podtest.Pending("default", "p", podtest.GPU("c", 1, "3000", 40))
	e.create(pod)
	st, _ := e.preFilter(pod)
	if s := e.p.Reserve(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
		t.Fatal(s)
	}
	if s := e.p.Bind(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
		t.Fatalf("Bind: %v", s)
	}
	var bindings []*corev1.Binding
	for _, a := range e.client.Actions() {
		if a.GetSubresource() == "binding" {
			bindings = append(bindings, a.(k8stesting.CreateAction).GetObject().(*corev1.Binding))
		}
	}
	if len(bindings) != 1 || bindings[0].Target.Name != "node-a" || bindings[0].UID != pod.UID {
		t.Fatalf("bindings %+v, want one to node-a with the pod's UID", bindings)
	}
	a, err := device.DecodeAllocation(bindings[0].Annotations[device.AnnoPlanned])
	if err != nil {
		t.Fatal(err)
	}
	c := a.Container("c")
	if c == nil || len(c.Devices) != 1 || c.Devices[0].UUID != "GPU-node-a-0" || c.Devices[0].MemoryMiB != 3000 || c.Devices[0].CoresPercent != 40 {
		t.Fatalf("plan %+v", a)
	}
	got, err := e.client.CoreV1().Pods("default").Get(context.Background(), "p", getOpts)
	if err != nil || got.Spec.NodeName != "node-a" || got.Annotations[device.AnnoPlanned] != bindings[0].Annotations[device.AnnoPlanned] {
		t.Fatalf("pod after Bind: %v %+v", err, got)
	}
	if node, stage, _ := e.p.cache.PodState(device.RefOf(pod)); node != "node-a" || (stage != "planned" && stage != "claimed") {
		t.Fatalf("booking after Bind: %q %q", node, stage)
	}
	e.p.Unreserve(context.Background(), st, pod, "node-a")
	if e.gpuMiB("node-a") != 3000 {
		t.Fatalf("Unreserve freed a bound pod's GPU: %d MiB", e.gpuMiB("node-a"))
	}
}

func runtimeArgs(s string) runtime.Object {
	return &runtime.Unknown{Raw: []byte(s), ContentType: runtime.ContentTypeJSON}
}

// TestPreFilterFollowsTheLeaderLease: with leaderElectionLease the plugin places GPU pods only
// while this host's kube-scheduler holds that Lease (the extender's leadership, pkg/extender
// leader.go): held by another, PreFilter answers Unschedulable with extender.ErrNotLeading's
// reason (retried) and a CPU pod is still skipped; held by this host's kube-scheduler from the
// first sight (no takeover: no hold), the GPU pod is weighed.
func TestPreFilterFollowsTheLeaderLease(t *testing.T) {
	args := &runtime.Unknown{Raw: []byte(`{"leaderElectionLease":"hami/hami-go-scheduler","leaderIdentity":"me"}`), ContentType: runtime.ContentTypeJSON}
	lease := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "hami", Name: "hami-go-scheduler"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	}
	gpu := podtest.Pending("default", "gpu", podtest.GPU("c", 1, "1024", 0))
	cpu := podtest.Pending("default", "cpu", podtest.Ctr{Name: "c", NoGPU: true})

	other := newEnv(t, args, []string{"node-a"}, map[string]int64{"node-a": 8192}, lease("other-host_1f2e"))
	if _, s := other.preFilter(gpu); s.Code() != fwk.Unschedulable || s.Message() != extender.ErrNotLeading.Error() {
		t.Fatalf("PreFilter while another holds the Lease: %v", s)
	}
	if _, s := other.preFilter(cpu); s.Code() != fwk.Skip {
		t.Fatalf("PreFilter of a CPU pod while another holds the Lease: %v", s)
	}

	ours := newEnv(t, args, []string{"node-a"}, map[string]int64{"node-a": 8192}, lease("me_3c4d"))
	ours.eventually("the plugin leads", func() bool { return ours.p.ext.FilterRefusal(gpu) == nil })
	st, s := ours.preFilter(gpu)
	if !s.IsSuccess() || ours.filter(st, gpu)["node-a"] != nil {
		t.Fatalf("PreFilter while this host's kube-scheduler holds the Lease: %v, Filter %v", s, ours.filter(st, gpu))
	}
}

// statusMap is a fwk.NodeToStatusReader over a map (nodes absent: nil).
type statusMap map[string]*fwk.Status

func (m statusMap) Get(n string) *fwk.Status { return m[n] }
func (m statusMap) NodesForStatusCode(fwk.NodeInfoLister, fwk.Code) ([]fwk.NodeInfo, error) {
	return nil, nil
}

// TestPostFilterOffersOnlyNodesHamiGoRefused (case C65): a 6000 MiB pod finds both nodes' GPUs taken, so
// PreFilter's weighing fails both for GPUs; NodeAffinity refused node-a before HamiGo's Filter
// ran there, so PostFilter offers the pod for the extender's own preemption on node-b alone
// (evicting on node-a would free GPUs the pod may not use). With node-b refused by another
// plugin as well, nothing is offered; once the pod is Reserved somewhere, its offer is dropped.
func TestPostFilterOffersOnlyNodesHamiGoRefused(t *testing.T) {
	// preemption own (the default): the extender's loop takes an offer only a second after it
	// is made (preemptSettle), and each case below takes it at once.
	e := newEnv(t, nil, []string{"node-a", "node-b"}, map[string]int64{"node-a": 8192, "node-b": 8192})
	for _, n := range []string{"node-a", "node-b"} {
		p := podtest.Pending("default", "holder-"+n, podtest.GPU("c", 1, "6000", 0))
		st, _ := e.preFilter(p)
		if s := e.p.Reserve(context.Background(), st, p, n); !s.IsSuccess() {
			t.Fatal(s)
		}
	}
	pod := podtest.Pending("default", "big", podtest.GPU("c", 1, "6000", 0))
	k := device.RefOf(pod)
	refused := func(plugin string) *fwk.Status {
		return fwk.NewStatus(fwk.Unschedulable, "refused by "+plugin).WithPlugin(plugin)
	}
	for _, tc := range []struct {
		name     string
		statuses statusMap
		want     []string
	}{
		{"node-a refused by NodeAffinity", statusMap{"node-a": refused("NodeAffinity"), "node-b": refused(Name)}, []string{"node-b"}},
		{"both refused by HamiGo", statusMap{"node-a": refused(Name), "node-b": refused(Name)}, []string{"node-a", "node-b"}},
		{"both refused by others", statusMap{"node-a": refused("NodeAffinity"), "node-b": refused("TaintToleration")}, nil},
	} {
		st, s := e.preFilter(pod)
		if !s.IsSuccess() || len(readFilter(st).failed) != 2 {
			t.Fatalf("%s: PreFilter %v, failed %v; want both nodes failed for GPUs", tc.name, s, readFilter(st).failed)
		}
		if _, s := e.p.PostFilter(context.Background(), st, pod, tc.statuses); s.Code() != fwk.Unschedulable {
			t.Fatalf("%s: PostFilter %v", tc.name, s)
		}
		got := e.p.cache.TakePreemptionOffers()[k]
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: offered on %v, want %v", tc.name, got, tc.want)
		}
	}
	st, _ := e.preFilter(pod)
	e.p.PostFilter(context.Background(), st, pod, statusMap{"node-a": refused(Name), "node-b": refused(Name)})
	e.p.Unreserve(context.Background(), st, podtest.Pending("default", "holder-node-b", podtest.GPU("c", 1, "6000", 0)), "node-b")
	st, _ = e.preFilter(pod)
	if s := e.p.Reserve(context.Background(), st, pod, "node-b"); !s.IsSuccess() {
		t.Fatalf("Reserve once node-b's GPU is free: %v", s)
	}
	if offers := e.p.cache.TakePreemptionOffers(); len(offers) != 0 {
		t.Errorf("offers after the pod was reserved: %v, want none", offers)
	}
}

// requeued reports whether the extender set its requeue annotation on pod default/name.
func (e *env) requeued(name string) bool {
	p, err := e.client.CoreV1().Pods("default").Get(context.Background(), name, getOpts)
	return err == nil && p.Annotations[device.AnnoRequeue] != ""
}

// TestPostFilterRefusalDatedAtTheWeighing: the refusal PostFilter notes is dated at PreFilter's
// weighing, so GPUs released while the Filters ran requeue the pod (the extender's requeue
// annotation, requeue.go: its verdicts did not see them); when the only release is PostFilter
// dropping the pod's own reservation, the pod is not requeued (else it would be every cycle).
func TestPostFilterRefusalDatedAtTheWeighing(t *testing.T) {
	e := newEnv(t, runtimeArgs(`{"preemption":"none"}`), []string{"node-a", "node-b"}, map[string]int64{"node-a": 8192, "node-b": 8192})
	holders := map[string]*corev1.Pod{}
	for _, n := range []string{"node-a", "node-b"} {
		holders[n] = podtest.Pending("default", "holder-"+n, podtest.GPU("c", 1, "6000", 0))
		st, _ := e.preFilter(holders[n])
		if s := e.p.Reserve(context.Background(), st, holders[n], n); !s.IsSuccess() {
			t.Fatal(s)
		}
	}
	gpuRefused := fwk.NewStatus(fwk.Unschedulable, "GPUs in use").WithPlugin(Name)
	pod := podtest.Pending("default", "big", podtest.GPU("c", 1, "6000", 0))
	e.create(pod)
	st, _ := e.preFilter(pod)                                            // refused on both nodes
	e.p.Unreserve(context.Background(), st, holders["node-a"], "node-a") // freed while the Filters run
	e.p.PostFilter(context.Background(), st, pod, statusMap{"node-a": gpuRefused, "node-b": gpuRefused})
	e.eventually("the pod refused before the release requeued", func() bool { return e.requeued("big") })

	// 3000 MiB fits node-a (now free; the weighing reserves it there) but not node-b (2192 MiB
	// free). Another plugin refused node-a, so PostFilter drops that reservation and notes the
	// pod refused for GPUs on node-b.
	self := podtest.Pending("default", "self", podtest.GPU("c", 1, "3000", 0))
	e.create(self)
	st, _ = e.preFilter(self)
	if e.gpuMiB("node-a") != 3000 || len(readFilter(st).failed) != 1 {
		t.Fatalf("the weighing: %d MiB booked on node-a, failed %v; want its reservation there and node-b failed", e.gpuMiB("node-a"), readFilter(st).failed)
	}
	e.p.PostFilter(context.Background(), st, self, statusMap{"node-a": fwk.NewStatus(fwk.Unschedulable, "taint").WithPlugin("TaintToleration"), "node-b": gpuRefused})
	if e.gpuMiB("node-a") != 0 {
		t.Fatalf("after PostFilter: %d MiB booked on node-a", e.gpuMiB("node-a"))
	}
	time.Sleep(time.Second) // the requeue loop acts 250 ms after a release
	if e.requeued("self") {
		t.Error("a pod requeued by the drop of its own reservation (it would be every cycle)")
	}
}
