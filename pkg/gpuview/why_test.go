package gpuview

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

// fleet is a cluster in which each node refuses a pending 8000 MiB pod for another reason.
func fleet(t *testing.T) Objects {
	small := inventory("small", 1, 4000, 4)
	return Objects{
		Nodes: []corev1.Node{
			nodeObj(t, inventory("full", 1, 10000, 4)),
			nodeObj(t, inventory("sliced", 1, 81920, 1)),
			nodeObj(t, small),
			nodeObj(t, inventory("stale", 1, 81920, 4)),
			nodeObj(t, inventory("nolease", 1, 81920, 4)),
			nodeObj(t, inventory("fits", 2, 81920, 4)),
			rawNode("cpu", ""),
			rawNode("broken", `{"version":"v1"}`),
		},
		Leases: leases(lease("full", t0), lease("sliced", t0), lease("small", t0), lease("stale", t0.Add(-2*time.Minute)), lease("fits", t0)),
		Pods: pods(
			bound(t, podtest.Pending("a", "big", podtest.GPU("c", 1, "9000", 0)), "full", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev("GPU-full-0", 9000, 0)}}),
			bound(t, podtest.Pending("a", "one", podtest.GPU("c", 1, "1000", 0)), "sliced", device.AnnoPlanned, grant{"c", device.KindApp, []device.DeviceGrant{dev("GPU-sliced-0", 1000, 0)}}),
			bound(t, podtest.Pending("a", "half", podtest.Ctr{Name: "init", Kind: device.KindInit, Count: 1, Mem: "70000"}, podtest.GPU("c", 1, "1000", 60)), "fits", device.AnnoClaimed,
				grant{"init", device.KindInit, []device.DeviceGrant{dev("GPU-fits-0", 70000, 0)}},
				grant{"c", device.KindApp, []device.DeviceGrant{dev("GPU-fits-0", 1000, 60)}}),
		),
	}
}

// TestReasonsMatchExtenderFilter feeds the same objects to the extender's cache and asks its
// Filter: every node's verdict, reason text and resolvability, and every GPU's booked usage,
// must be what the view says. This pins the view to the extender's code, not to a copy of it.
func TestReasonsMatchExtenderFilter(t *testing.T) {
	objs := fleet(t)
	pendings := []*corev1.Pod{
		podtest.Pending("x", "p8000", podtest.GPU("c", 1, "8000", 0)),
		podtest.Pending("x", "two-gpus-sidecar", podtest.Ctr{Name: "side", Kind: device.KindSidecar, Count: 1, Mem: "2000", Cores: 10}, podtest.GPU("main", 2, "8000", 50)),
		podtest.Pending("x", "exclusive", podtest.GPU("c", 1, "1000", 100)),
	}
	for _, p := range pendings {
		t.Run(p.Name, func(t *testing.T) {
			c := extender.NewCache(extender.DefaultConfig(), clocktesting.NewFakeClock(t0))
			var names []string
			for i := range objs.Nodes {
				c.OnNode(&objs.Nodes[i])
				names = append(names, objs.Nodes[i].Name)
			}
			for i := range objs.Leases {
				c.OnLease(&objs.Leases[i])
			}
			for i := range objs.Pods {
				c.OnPod(&objs.Pods[i])
			}
			// Usage before Filter, which reserves the pod on its best node.
			v := Build(objs, DefaultConfig(), t0)
			for _, n := range v.Nodes {
				ext := c.NodeGPUUsage(n.Name)
				if len(ext) != len(n.GPUs) {
					t.Errorf("%s: view has %d GPUs, extender %d", n.Name, len(n.GPUs), len(ext))
					continue
				}
				for i, g := range n.GPUs {
					u := ext[i].Usage
					if g.BookedMiB != u.MemoryMiB || g.BookedCoresPercent != u.CoresPercent || g.Sharers != u.Sharers || g.Exclusive != u.Exclusive {
						t.Errorf("%s GPU-%d: view %d MiB %d%% %d sharers; extender %+v", n.Name, i, g.BookedMiB, g.BookedCoresPercent, g.Sharers, u)
					}
				}
			}
			res := extender.NewScheduler(c).Filter(p, names)
			e := Explain(p, objs, nil, DefaultConfig(), t0)
			if len(e.Nodes) != len(names) {
				t.Fatalf("explanation has %d nodes, want %d: %+v", len(e.Nodes), len(names), e)
			}
			fits := map[string]bool{}
			for _, n := range *res.NodeNames {
				fits[n] = true
			}
			for _, f := range e.Nodes {
				reason, unres := res.FailedNodes[f.Node], false
				if r, ok := res.FailedAndUnresolvableNodes[f.Node]; ok {
					reason, unres = r, true
				}
				if f.Fits != fits[f.Node] || f.Reason != reason || f.Unresolvable != unres {
					t.Errorf("%s: view fits=%v unresolvable=%v %q; extender fits=%v unresolvable=%v %q", f.Node, f.Fits, f.Unresolvable, f.Reason, fits[f.Node], unres, reason)
				}
			}
		})
	}
}

// TestExplainPending checks the reasons of the fleet by value (so a change in the extender's
// words shows here too), the request as parsed, and the newest FailedScheduling event.
func TestExplainPending(t *testing.T) {
	objs := fleet(t)
	p := podtest.Pending("x", "p8000", podtest.GPU("c", 1, "8000", 25))
	ev := func(name, reason, msg string, at time.Time, uid string) corev1.Event {
		e := corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "x", Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "x", Name: "p8000", UID: p.UID},
			Reason:         reason, Message: msg, LastTimestamp: metav1.NewTime(at), Count: 3,
		}
		if uid != "" {
			e.InvolvedObject.UID = "other-uid"
		}
		return e
	}
	events := []corev1.Event{
		ev("e1", "FailedScheduling", "older", t0.Add(-time.Minute), ""),
		ev("e2", "FailedScheduling", "0/8 nodes are available: newest", t0, ""),
		ev("e3", "Scheduled", "not this one", t0.Add(time.Minute), ""),
		ev("e4", "FailedScheduling", "an earlier pod of the same name", t0.Add(time.Hour), "x"),
	}
	e := Explain(p, objs, events, DefaultConfig(), t0)
	want := map[string]NodeFit{
		"fits":    {Node: "fits", Fits: true},
		"full":    {Node: "full", Reason: `container "c" (1 GPU, 8000 MiB, 25 percent cores): GPU-0 1000 of 10000 MiB free`},
		"sliced":  {Node: "sliced", Reason: `container "c" (1 GPU, 8000 MiB, 25 percent cores): GPU-0 1/1 slices used`},
		"small":   {Node: "small", Reason: `container "c" (1 GPU, 8000 MiB, 25 percent cores): GPU-0 4000 of 4000 MiB free (even with the node empty)`, Unresolvable: true},
		"stale":   {Node: "stale", Reason: "inventory stale since 2026-12-01T04:58:00Z (device plugin Lease not renewed for 1m0s)", Unresolvable: true},
		"nolease": {Node: "nolease", Reason: "no heartbeat from device plugin (Lease kube-node-lease/hami-go-nolease not found)", Unresolvable: true},
		"cpu":     {Node: "cpu", Reason: "no inventory from device plugin", Unresolvable: true},
		"broken":  {Node: "broken", Reason: "malformed inventory from device plugin: inventory.node is empty", Unresolvable: true},
	}
	if len(e.Nodes) != len(want) || !e.Nodes[0].Fits {
		t.Fatalf("nodes %+v (fitting nodes first)", e.Nodes)
	}
	for _, f := range e.Nodes {
		if f != want[f.Node] {
			t.Errorf("%s: %+v, want %+v", f.Node, f, want[f.Node])
		}
	}
	if len(e.Containers) != 1 || e.Containers[0] != (device.ContainerRequest{Name: "c", Kind: device.KindApp, Count: 1, MemoryMiB: 8000, CoresPercent: 25}) {
		t.Errorf("containers %+v", e.Containers)
	}
	if ev := e.LastSchedulingEvent; ev == nil || ev.Message != "0/8 nodes are available: newest" || ev.Count != 3 || !ev.Time.Equal(t0) {
		t.Errorf("last event %+v", ev)
	}
	if !strings.HasPrefix(e.Note, "fits on 1 node(s) now") {
		t.Errorf("note %q", e.Note)
	}
	var b strings.Builder
	if err := WriteExplanation(&b, &e); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"Pod x/p8000: Pending, scheduler hami-go-scheduler\n",
		`  "c" (app): 1 GPU, 8000 MiB, 25% cores per GPU` + "\n",
		"  fits: fits\n",
		`  full: container "c" (1 GPU, 8000 MiB, 25 percent cores): GPU-0 1000 of 10000 MiB free` + "\n",
		"  cpu: no inventory from device plugin\n",
		"Last FailedScheduling (2026-12-01T05:00:00Z, 3 times): 0/8 nodes are available: newest\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("explanation lacks %q:\n%s", line, b.String())
		}
	}
}

// TestExplainOtherCases: a bound pod shows what it got; a pod of another scheduler, a pod with no
// GPU and a pod whose request does not parse say so; the pod's own booking is not counted
// against it.
func TestExplainOtherCases(t *testing.T) {
	objs := fleet(t)
	// The bound pod "a/big" holds 9000 of 10000 MiB on "full": explained as itself, its own
	// booking is left out, so a copy of it still fits there.
	big := objs.Pods[0]
	e := Explain(&big, objs, nil, DefaultConfig(), t0)
	if e.Node != "full" || e.AllocationSource != "claimed" || e.Allocation == nil || e.Allocation.Containers[0].Devices[0].MemoryMiB != 9000 || e.Nodes != nil {
		t.Errorf("bound: %+v", e)
	}
	if !strings.HasPrefix(e.Note, "bound to node full") {
		t.Errorf("bound note %q", e.Note)
	}
	again := big.DeepCopy()
	again.Spec.NodeName, again.Status.Phase = "", corev1.PodPending
	e = Explain(again, objs, nil, DefaultConfig(), t0)
	for _, f := range e.Nodes {
		if f.Node == "full" && !f.Fits {
			t.Errorf("the pod's own booking counted against it: %+v", f)
		}
	}

	other := podtest.Pending("x", "other", podtest.GPU("c", 1, "1000", 0))
	other.Spec.SchedulerName = "default-scheduler"
	if e := Explain(other, objs, nil, DefaultConfig(), t0); e.Nodes != nil || !strings.Contains(e.Note, "scheduler default-scheduler is not hami-go-scheduler") {
		t.Errorf("other scheduler: %+v", e)
	}
	cpu := podtest.Pending("x", "cpu")
	cpu.Spec.Containers = []corev1.Container{{Name: "c"}}
	if e := Explain(cpu, objs, nil, DefaultConfig(), t0); e.Nodes != nil || !strings.HasPrefix(e.Note, "the pod asks for no GPU") {
		t.Errorf("no GPU: %+v", e)
	}
	bad := podtest.Pending("x", "bad", podtest.GPU("c", 1, "", 0))
	bad.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] = resource.MustParse("3000M")
	e = Explain(bad, objs, nil, DefaultConfig(), t0)
	if e.Nodes != nil || !strings.Contains(e.RequestError, "spec.containers[c].resources.limits[nvidia.com/gpumem]") {
		t.Errorf("bad request: %+v", e)
	}
	unplaced := podtest.Pending("x", "unplaced", podtest.GPU("c", 1, "1000", 0))
	unplaced.Spec.NodeName, unplaced.Status.Phase = "fits", corev1.PodRunning
	if e := Explain(unplaced, objs, nil, DefaultConfig(), t0); e.Allocation != nil || !strings.Contains(e.Note, "without a hami-go allocation") {
		t.Errorf("unplaced: %+v", e)
	}
}
