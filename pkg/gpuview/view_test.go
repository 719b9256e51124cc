package gpuview

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/preflight"
)

const (
	g0 = "GPU-n1-0"
	g1 = "GPU-n1-1"
)

// TestBuildCharges asserts booked MiB, cores percent and sharers per GPU, as the extender
// charges them (allocator.ChargeOf), for shared GPUs and the init/sidecar phase rule (case C03).
func TestBuildCharges(t *testing.T) {
	type want struct {
		gpu     int
		mib     int64
		cores   int
		sharers int
		slices  int
		excl    bool
	}
	cases := []struct {
		name string
		pods func(t *testing.T) []corev1.Pod
		want []want
	}{
		{"two pods share GPU-0", func(t *testing.T) []corev1.Pod {
			return pods(
				bound(t, podtest.Pending("a", "p1", podtest.GPU("c", 1, "20000", 25)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 20000, 25)}}),
				bound(t, podtest.Pending("b", "p2", podtest.GPU("c", 1, "30000", 0)), "n1", device.AnnoPlanned, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 30000, 0)}}),
			)
		}, []want{{0, 50000, 25, 2, 2, false}, {1, 0, 0, 0, 0, false}}},
		{"C03 init then app on one GPU: the larger phase, one sharer", func(t *testing.T) []corev1.Pod {
			return pods(bound(t, podtest.Pending("a", "p", podtest.Ctr{Name: "init", Kind: device.KindInit, Count: 1, Mem: "30000"}, podtest.GPU("main", 1, "20000", 10)), "n1", device.AnnoClaimed,
				grant{"init", device.KindInit, []device.DeviceGrant{dev(g0, 30000, 0)}},
				grant{"main", device.KindApp, []device.DeviceGrant{dev(g0, 20000, 10)}}))
		}, []want{{0, 30000, 10, 1, 2, false}}},
		{"C03 sidecar runs beside the app: sums, two sharers", func(t *testing.T) []corev1.Pod {
			return pods(bound(t, podtest.Pending("a", "p", podtest.Ctr{Name: "side", Kind: device.KindSidecar, Count: 1, Mem: "5000", Cores: 5}, podtest.GPU("main", 1, "20000", 10)), "n1", device.AnnoClaimed,
				grant{"side", device.KindSidecar, []device.DeviceGrant{dev(g0, 5000, 5)}},
				grant{"main", device.KindApp, []device.DeviceGrant{dev(g0, 20000, 10)}}))
		}, []want{{0, 25000, 15, 2, 2, false}}},
		{"C03 sidecar, init, app: init phase = sidecar + init", func(t *testing.T) []corev1.Pod {
			return pods(bound(t, podtest.Pending("a", "p", podtest.Ctr{Name: "side", Kind: device.KindSidecar, Count: 1, Mem: "5000"}, podtest.Ctr{Name: "init", Kind: device.KindInit, Count: 1, Mem: "40000"}, podtest.GPU("main", 1, "20000", 0)), "n1", device.AnnoClaimed,
				grant{"side", device.KindSidecar, []device.DeviceGrant{dev(g0, 5000, 0)}},
				grant{"init", device.KindInit, []device.DeviceGrant{dev(g0, 40000, 0)}},
				grant{"main", device.KindApp, []device.DeviceGrant{dev(g0, 20000, 0)}}))
		}, []want{{0, 45000, 0, 2, 3, false}}},
		{"claimed record wins over planned", func(t *testing.T) []corev1.Pod {
			p := bound(t, podtest.Pending("a", "p", podtest.GPU("c", 1, "8000", 0)), "n1", device.AnnoPlanned, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 8000, 0)}})
			setAlloc(t, p, device.AnnoClaimed, "n1", grant{"c", device.KindApp, []device.DeviceGrant{dev(g1, 8000, 0)}})
			return pods(p)
		}, []want{{0, 0, 0, 0, 0, false}, {1, 8000, 0, 1, 1, false}}},
		{"ended and unbound pods hold nothing; a terminating pod still does", func(t *testing.T) []corev1.Pod {
			done := bound(t, podtest.Pending("a", "done", podtest.GPU("c", 1, "8000", 0)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 8000, 0)}})
			done.Status.Phase = corev1.PodSucceeded
			failed := bound(t, podtest.Pending("a", "failed", podtest.GPU("c", 1, "8000", 0)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 8000, 0)}})
			failed.Status.Phase = corev1.PodFailed
			unbound := podtest.Pending("a", "pending", podtest.GPU("c", 1, "8000", 0))
			setAlloc(t, unbound, device.AnnoPlanned, "n1", grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 8000, 0)}})
			term := bound(t, podtest.Pending("a", "term", podtest.GPU("c", 1, "7000", 0)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 7000, 0)}})
			now := metav1.NewTime(t0)
			term.DeletionTimestamp = &now
			return pods(done, failed, unbound, term)
		}, []want{{0, 7000, 0, 1, 1, false}}},
		{"100 percent cores holds the GPU exclusively", func(t *testing.T) []corev1.Pod {
			return pods(bound(t, podtest.Pending("a", "p", podtest.GPU("c", 1, "80000", 100)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g1, 80000, 100)}}))
		}, []want{{1, 80000, 100, 1, 1, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := Objects{Nodes: []corev1.Node{nodeObj(t, inventory("n1", 2, 81920, 10))}, Leases: leases(lease("n1", t0)), Pods: tc.pods(t)}
			v := Build(objs, DefaultConfig(), t0.Add(time.Second))
			if n := nodeOf(t, &v, "n1"); n.Status != StatusReady || len(n.Errors) != 0 {
				t.Fatalf("node: status %s, errors %v", n.Status, n.Errors)
			}
			for _, w := range tc.want {
				g := gpuOf(t, &v, "n1", w.gpu)
				if g.BookedMiB != w.mib || g.BookedCoresPercent != w.cores || g.Sharers != w.sharers || len(g.Slices) != w.slices || g.Exclusive != w.excl {
					t.Errorf("GPU-%d: booked %d MiB, %d%%, %d sharers, %d slices, exclusive %v; want %d MiB, %d%%, %d sharers, %d slices, exclusive %v",
						w.gpu, g.BookedMiB, g.BookedCoresPercent, g.Sharers, len(g.Slices), g.Exclusive, w.mib, w.cores, w.sharers, w.slices, w.excl)
				}
				if g.CapacityMiB != 81920 || g.MemoryMiB != 81920 || g.Health != "Healthy" {
					t.Errorf("GPU-%d: capacity %d, memory %d, health %s", w.gpu, g.CapacityMiB, g.MemoryMiB, g.Health)
				}
			}
		})
	}
}

// TestBuildSlicesListed names the pods holding slices, sorted, with container, MiB, percent and
// source.
func TestBuildSlicesListed(t *testing.T) {
	objs := Objects{
		Nodes:  []corev1.Node{nodeObj(t, inventory("n1", 2, 81920, 10))},
		Leases: leases(lease("n1", t0)),
		Pods: pods(
			bound(t, podtest.Pending("zz", "p", podtest.GPU("c", 1, "20000", 25)), "n1", device.AnnoPlanned, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 20000, 25)}}),
			bound(t, podtest.Pending("aa", "p", podtest.GPU("w", 1, "10000", 0)), "n1", device.AnnoClaimed, grant{"w", device.KindApp, []device.DeviceGrant{dev(g0, 10000, 0)}}),
		),
	}
	v := Build(objs, DefaultConfig(), t0)
	got := gpuOf(t, &v, "n1", 0).Slices
	want := []Slice{
		{Namespace: "aa", Pod: "p", Container: "w", Kind: "app", MemoryMiB: 10000, CoresPercent: 0, Source: "claimed"},
		{Namespace: "zz", Pod: "p", Container: "c", Kind: "app", MemoryMiB: 20000, CoresPercent: 25, Source: "planned"},
	}
	if len(got) != len(want) {
		t.Fatalf("slices %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("slice %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestBuildNodeStatus covers staleness by the extender's threshold, missing heartbeats, missing,
// malformed and misaddressed inventories, unhealthy/MIG GPUs and memory scaling.
func TestBuildNodeStatus(t *testing.T) {
	scaled := inventory("scaled", 1, 10000, 4)
	scaled.MemoryScaling = 1.5
	sick := inventory("sick", 2, 10000, 4)
	sick.GPUs[0].Healthy = false
	sick.GPUs[1].MIGEnabled = true
	objs := Objects{
		Nodes: []corev1.Node{
			nodeObj(t, inventory("fresh", 1, 10000, 4)),
			nodeObj(t, inventory("stale", 1, 10000, 4)),
			nodeObj(t, inventory("nolease", 1, 10000, 4)),
			rawNode("cpu", ""),
			rawNode("broken", `{"version":"v1","node":"broken","splitCount":0,"memoryScaling":1,"gpus":[]}`),
			rawNode("notjson", `{"version":`),
			nodeObj(t, inventory("other", 1, 10000, 4)),
			nodeObj(t, scaled),
			nodeObj(t, sick),
		},
		Leases: leases(lease("fresh", t0.Add(-60*time.Second)), lease("stale", t0.Add(-61*time.Second)), lease("scaled", t0), lease("sick", t0)),
	}
	objs.Nodes[6].Name = "renamed" // inventory says "other"
	v := Build(objs, DefaultConfig(), t0)
	cases := []struct {
		node    string
		status  NodeStatus
		problem string
		gpus    int
	}{
		{"fresh", StatusReady, "", 1},
		{"stale", StatusStale, "inventory stale since 2026-12-01T04:58:59Z (device plugin Lease not renewed for 1m0s)", 1},
		{"nolease", StatusNoHeartbeat, "no heartbeat from device plugin (Lease kube-node-lease/hami-go-nolease not found)", 1},
		{"cpu", StatusNoInventory, "no inventory from device plugin", 0},
		{"broken", StatusMalformed, "malformed inventory from device plugin: inventory.splitCount: 0 is outside 1..1000", 0},
		{"notjson", StatusMalformed, "malformed inventory from device plugin: inventory: not JSON: unexpected end of JSON input", 0},
		{"renamed", StatusMalformed, `malformed inventory from device plugin: inventory.node: "other" is not this node`, 0},
	}
	for _, tc := range cases {
		n := nodeOf(t, &v, tc.node)
		if n.Status != tc.status || n.Problem != tc.problem || len(n.GPUs) != tc.gpus || n.Mode != ModeDevicePlugin {
			t.Errorf("%s: status %s, problem %q, %d GPUs, mode %s; want %s, %q, %d GPUs", tc.node, n.Status, n.Problem, len(n.GPUs), n.Mode, tc.status, tc.problem, tc.gpus)
		}
	}
	if g := gpuOf(t, &v, "scaled", 0); g.CapacityMiB != 15000 || g.MemoryMiB != 10000 {
		t.Errorf("scaled: capacity %d, memory %d; want 15000, 10000", g.CapacityMiB, g.MemoryMiB)
	}
	if a, b := gpuOf(t, &v, "sick", 0).Health, gpuOf(t, &v, "sick", 1).Health; a != "Unhealthy" || b != "MIG" {
		t.Errorf("sick: health %s, %s; want Unhealthy, MIG", a, b)
	}
	// A shorter threshold (the extender's --inventory-stale-after) makes "fresh" stale too.
	cfg := DefaultConfig()
	cfg.StaleAfter = 30 * time.Second
	if n := nodeOf(t, ptr(Build(objs, cfg, t0)), "fresh"); n.Status != StatusStale {
		t.Errorf("fresh with 30s threshold: %s, want Stale", n.Status)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBuildMalformedAllocation: a pod's unreadable or misaddressed allocation is a clear error on
// its node, the other pods still count, and nothing panics.
func TestBuildMalformedAllocation(t *testing.T) {
	badJSON := bound(t, podtest.Pending("a", "bad", podtest.GPU("c", 1, "1000", 0)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 1000, 0)}})
	badJSON.Annotations[device.AnnoClaimed] = `{"version":"v2"}`
	delete(badJSON.Annotations, device.AnnoPlanned)
	elsewhere := podtest.Pending("a", "elsewhere", podtest.GPU("c", 1, "1000", 0))
	setAlloc(t, elsewhere, device.AnnoPlanned, "n2", grant{"c", device.KindApp, []device.DeviceGrant{dev(g0, 1000, 0)}})
	elsewhere.Spec.NodeName, elsewhere.Status.Phase = "n1", corev1.PodRunning
	unknownGPU := bound(t, podtest.Pending("a", "ghost", podtest.GPU("c", 1, "3000", 0)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev("GPU-gone", 3000, 0)}})
	good := bound(t, podtest.Pending("a", "good", podtest.GPU("c", 1, "4000", 0)), "n1", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev(g1, 4000, 0)}})
	objs := Objects{Nodes: []corev1.Node{nodeObj(t, inventory("n1", 2, 81920, 10))}, Leases: leases(lease("n1", t0)), Pods: pods(badJSON, elsewhere, unknownGPU, good)}
	v := Build(objs, DefaultConfig(), t0)
	n := nodeOf(t, &v, "n1")
	want := []string{
		`pod a/bad: annotation hami-go.io/allocation-claimed: allocation.version: "v2" is not supported (want "v1")`,
		`pod a/elsewhere: annotation hami-go.io/allocation-planned is for node "n2", the pod is on "n1"`,
		`pod a/ghost container "c": GPU GPU-gone is not in the node's inventory`,
	}
	if strings.Join(n.Errors, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(n.Errors, "\n"), strings.Join(want, "\n"))
	}
	if g := gpuOf(t, &v, "n1", 0); g.BookedMiB != 0 || g.Sharers != 0 {
		t.Errorf("GPU-0 booked %d MiB / %d sharers from unreadable records", g.BookedMiB, g.Sharers)
	}
	if g := gpuOf(t, &v, "n1", 1); g.BookedMiB != 4000 || g.Sharers != 1 {
		t.Errorf("GPU-1 booked %d MiB / %d sharers, want 4000 / 1", g.BookedMiB, g.Sharers)
	}
	if n.Status != StatusReady {
		t.Errorf("status %s, want Ready (pod errors do not make the node unusable)", n.Status)
	}
}

// TestBuildPodOnUnknownNode: a pod bound to a node without a Node object shows that node as
// NoInventory with the pod's slice, as the extender keeps the booking.
func TestBuildPodOnUnknownNode(t *testing.T) {
	p := bound(t, podtest.Pending("a", "p", podtest.GPU("c", 1, "1000", 0)), "gone", device.AnnoClaimed, grant{"c", device.KindApp, []device.DeviceGrant{dev("GPU-x", 1000, 0)}})
	v := Build(Objects{Pods: pods(p)}, DefaultConfig(), t0)
	n := nodeOf(t, &v, "gone")
	if n.Status != StatusNoInventory || len(n.GPUs) != 0 {
		t.Errorf("gone: %s, %d GPUs", n.Status, len(n.GPUs))
	}
	if v.APIVersion != APIVersion || v.Kind != KindView || !v.Time.Equal(t0) {
		t.Errorf("header %s %s %v", v.APIVersion, v.Kind, v.Time)
	}
}

// case C42: a node whose agent publishes its enforcement missing shows as Unenforced with the
// agent's reason (the extender's Filter refuses it with the same words), its GPUs still listed;
// the node's enforcement (mode, library version, sha256) is in the view as published.
func TestViewEnforcement(t *testing.T) {
	missing := inventory("gone", 1, 10000, 4)
	missing.Enforcement = &device.Enforcement{Mode: device.EnforcementHAMiCore, Reason: "HAMi-core library /usr/local/vgpu/libvgpu.so not found on the host"}
	ready := inventory("ok", 1, 10000, 4)
	ready.Enforcement = &device.Enforcement{Mode: device.EnforcementHAMiCore, Ready: true, Library: "/usr/local/vgpu/libvgpu.so.v2.10.0", Version: "v2.10.0", SHA256: strings.Repeat("a", 64)}
	objs := Objects{Nodes: []corev1.Node{nodeObj(t, missing), nodeObj(t, ready)}, Leases: leases(lease("gone", t0), lease("ok", t0))}
	v := Build(objs, DefaultConfig(), t0)
	if n := nodeOf(t, &v, "gone"); n.Status != StatusUnenforced || n.Problem != "enforcement hami-core missing on the node: HAMi-core library /usr/local/vgpu/libvgpu.so not found on the host" || len(n.GPUs) != 1 {
		t.Errorf("gone: status %s, problem %q, %d GPUs; want Unenforced with the agent's reason and its GPU", n.Status, n.Problem, len(n.GPUs))
	}
	if n := nodeOf(t, &v, "ok"); n.Status != StatusReady || n.Enforcement == nil || n.Enforcement.Version != "v2.10.0" || n.Enforcement.SHA256 != strings.Repeat("a", 64) {
		t.Errorf("ok: status %s, enforcement %+v; want Ready with the library's version and sha256", n.Status, n.Enforcement)
	}
}

// case C45: a node whose device plugin released its Lease (restarting) shows as Released with
// the extender's reason.
func TestViewReleasedLease(t *testing.T) {
	l := lease("n1", t0)
	empty := ""
	l.Spec.HolderIdentity = &empty
	v := Build(Objects{Nodes: []corev1.Node{nodeObj(t, inventory("n1", 1, 10000, 4))}, Leases: leases(l)}, DefaultConfig(), t0)
	if n := nodeOf(t, &v, "n1"); n.Status != StatusReleased || n.Problem != "device plugin not serving the kubelet (Lease kube-node-lease/hami-go-n1 released: starting or restarting)" {
		t.Errorf("n1: status %s, problem %q; want Released with the extender's reason", n.Status, n.Problem)
	}
}

// issue 28: during a mode switch the node shows what its arriving agent waits for (the
// preflight condition's OldModeInUse message), in the table's notes too; another reason shows
// nothing.
func TestViewModeSwitch(t *testing.T) {
	waiting := nodeObj(t, inventory("n1", 1, 10000, 4))
	msg := "OldModeInUse: mode switch: GPU pods wait until the other mode has left the node: waiting for the DRA mode's GPU pods and node agent to leave the node (1: ml/a (holds claim c))"
	waiting.Status.Conditions = []corev1.NodeCondition{{Type: preflight.ConditionType, Status: corev1.ConditionFalse, Reason: preflight.FindingOldModeInUse, Message: msg}}
	other := nodeObj(t, inventory("n2", 1, 10000, 4))
	other.Status.Conditions = []corev1.NodeCondition{{Type: preflight.ConditionType, Status: corev1.ConditionFalse, Reason: preflight.FindingNRIConnected, Message: "x"}}
	v := Build(Objects{Nodes: []corev1.Node{waiting, other}, Leases: leases(lease("n1", t0), lease("n2", t0))}, DefaultConfig(), t0)
	if n := nodeOf(t, &v, "n1"); n.ModeSwitch != msg {
		t.Errorf("n1: modeSwitch %q, want the condition's message", n.ModeSwitch)
	}
	if n := nodeOf(t, &v, "n2"); n.ModeSwitch != "" {
		t.Errorf("n2: modeSwitch %q, want none", n.ModeSwitch)
	}
	var b strings.Builder
	if err := WriteTable(&b, &v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "! n1: mode switch: "+msg+"\n") {
		t.Errorf("table lacks the mode switch note:\n%s", b.String())
	}
}
