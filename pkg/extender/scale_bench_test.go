package extender

// Scale benchmarks for the performance report (hack/bench/run.sh writes docs/bench/report.md from
// their output). BenchmarkExtenderScale/nodes=N/<verb> runs every verb over N nodes × 8 GPUs of
// 81920 MiB (split count 10) with 4 pods per GPU already placed (N × 32 claimed pods, fed through
// the same OnNode/OnLease/OnPod entry points the informers use), for N = 100, 1,000, 5,000 and
// 10,000. The targets of issue 4 are for N = 5,000 (with 20,000 pods; here 40,000).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

const (
	scaleGPUsPerNode = 8
	scalePodsPerGPU  = 4
	scaleGPUMiB      = 81920
	// scaleProbeMiB is the request of the pod being scheduled: 1 GPU, 8000 MiB, 10% cores.
	scaleProbeMiB = 8000
)

// scaleT0 is the fake clock's time; every Lease is renewed then, so no node is stale.
var scaleT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// scaleFleet is an extender whose cache holds nodes × 8 GPUs with 4 claimed pods per GPU.
type scaleFleet struct {
	ext   *Extender
	names []string
	// cacheMiB is the heap the extender's cache holds (in use after GC, MiB); objectsMiB what the
	// informers' stores would add: the Nodes, Leases and stripped Pods (stripPod) the cache was fed.
	cacheMiB, objectsMiB float64
}

func scaleHeapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// scaleGPUPod is a pending pod of the extender asking for 1 GPU with mib MiB and cores percent.
func scaleGPUPod(ns, name string, mib, cores int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Annotations: map[string]string{},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.PodSpec{SchedulerName: device.SchedulerName, Containers: []corev1.Container{{
			Name: "main", Image: "docker.io/hami-go/workload:0.1.0",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"nvidia.com/gpu":      *resource.NewQuantity(1, resource.DecimalSI),
				"nvidia.com/gpumem":   *resource.NewQuantity(mib, resource.DecimalSI),
				"nvidia.com/gpucores": *resource.NewQuantity(cores, resource.DecimalSI),
			}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// buildScaleFleet builds nodes × 8 GPUs with podsPerNode claimed pods on each node, spread
// round-robin over its GPUs (pod j: GPU j mod 8, 4000 × (j div 8 + 1) MiB, 10% cores).
func buildScaleFleet(b *testing.B, nodes, podsPerNode int) *scaleFleet {
	b.Helper()
	base := scaleHeapMiB()
	clk := clocktesting.NewFakeClock(scaleT0)
	e, err := New(DefaultConfig(), nil, nil, clk, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	c := e.Cache()
	f := &scaleFleet{ext: e, names: make([]string, 0, nodes)}
	objects := make([]any, 0, nodes*(2+podsPerNode))
	renew := metav1.NewMicroTime(scaleT0)
	for n := 0; n < nodes; n++ {
		name := fmt.Sprintf("bench-node-%05d", n)
		inv := device.Inventory{Node: name, SplitCount: 10, MemoryScaling: 1}
		for i := 0; i < scaleGPUsPerNode; i++ {
			inv.GPUs = append(inv.GPUs, device.GPU{
				UUID:  fmt.Sprintf("GPU-%08x-%04x-4000-8000-%012x", n, i, n*scaleGPUsPerNode+i),
				Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: scaleGPUMiB, NUMANode: i / 4, Healthy: true,
			})
		}
		enc, err := device.EncodeInventory(inv)
		if err != nil {
			b.Fatal(err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{device.AnnoInventory: enc}}}
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: device.LeasePrefix + name},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &renew},
		}
		c.OnNode(node)
		c.OnLease(lease)
		objects = append(objects, node, lease)
		for j := 0; j < podsPerNode; j++ {
			g := inv.GPUs[j%scaleGPUsPerNode]
			mib := int64(j/scaleGPUsPerNode+1) * 4000 // 4000+8000+12000+16000 = 40000 of 81920 MiB per GPU
			p := scaleGPUPod("placed", name+"-"+strconv.Itoa(j), mib, 10)
			p.Spec.NodeName = name
			p.Status.Phase = corev1.PodRunning
			a, err := device.EncodeAllocation(device.Allocation{Node: name, Containers: []device.ContainerAllocation{{
				Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: g.UUID, MemoryMiB: mib, CoresPercent: 10}},
			}}})
			if err != nil {
				b.Fatal(err)
			}
			p.Annotations[device.AnnoPlanned] = a
			p.Annotations[device.AnnoClaimed] = a
			if _, err := stripPod(p); err != nil {
				b.Fatal(err)
			}
			c.OnPod(p)
			objects = append(objects, p)
		}
		f.names = append(f.names, name)
	}
	withObjects := scaleHeapMiB()
	runtime.KeepAlive(objects)
	objects = nil
	f.cacheMiB = scaleHeapMiB() - base
	f.objectsMiB = withObjects - base - f.cacheMiB
	if got := len(c.NodeNames()); got != nodes {
		b.Fatalf("cache holds %d nodes, want %d", got, nodes)
	}
	e.ready.Store(true) // the cache was fed by hand, as Run's rebuild would: the verbs answer (ErrNotReady)
	u := c.NodeGPUUsage(f.names[0])
	wantSharers, wantMiB := 0, int64(0)
	for j := 0; j < podsPerNode; j += scaleGPUsPerNode {
		wantSharers, wantMiB = wantSharers+1, wantMiB+int64(j/scaleGPUsPerNode+1)*4000
	}
	if len(u) != scaleGPUsPerNode || u[0].Usage.Sharers != wantSharers || u[0].Usage.MemoryMiB != wantMiB {
		b.Fatalf("node %s GPU 0 usage %+v, want %d sharers and %d MiB", f.names[0], u, wantSharers, wantMiB)
	}
	return f
}

// scaleReportLatency reports the p50 and p99 of lat (one entry per op) in microseconds, as
// <prefix>p50-µs and <prefix>p99-µs.
func scaleReportLatency(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, prefix+"p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, prefix+"p99-µs")
}

// scaleRepeats is how many times each verb is measured on one fleet ($HAMI_GO_BENCH_REPEAT,
// default 1): building a 10,000-node fleet costs more than measuring it, so repetitions share
// it; go test names the repeats <verb>#01, <verb>#02, ...
func scaleRepeats(b *testing.B) int {
	s := os.Getenv("HAMI_GO_BENCH_REPEAT")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("HAMI_GO_BENCH_REPEAT: %q is not a positive integer", s)
	}
	return n
}

// BenchmarkExtenderScale/nodes=N[,pods=P]/<verb> runs, on one fleet of N nodes × 8 GPUs (4 pods
// per GPU placed, or P pods in all for the fleet of issue 4's targets), one op of:
//   - filter: Cache.Filter of a new 1-GPU 8000 MiB pod over every node (every node fits; the
//     speculative reservation is replaced each time), reporting the cache's heap (cache-MiB) and
//     what the informers' stores would add (objects-MiB);
//   - prioritize: Cache.Prioritize of that pod over every node;
//   - bind: the in-memory part of a bind (BookForBind, FinishBind as bound) of a fresh pod on
//     node i mod N, then Release of it (so the fleet stays the same);
//   - prioritize-client-decode: kube-scheduler's part of a prioritize round trip that grows with
//     N, decoding a reply that lists all N nodes (HostPriority entries) with encoding/json: the
//     worst case, where every node scores above 0;
//   - filter-http, prioritize-http: the whole HTTP round trip on loopback (JSON ExtenderArgs
//     with every node name in, the result decoded as kube-scheduler does) from a client in
//     another process (scale_client_test.go), p50/p99 in µs; prioritize's reply lists the nodes
//     scored above 0 (hosts-listed).
func BenchmarkExtenderScale(b *testing.B) {
	for _, fl := range []struct{ nodes, podsPerNode int }{{100, 32}, {1000, 32}, {5000, 32}, {10000, 32}, {5000, 4}} {
		name := fmt.Sprintf("nodes=%d", fl.nodes)
		if fl.podsPerNode != scaleGPUsPerNode*scalePodsPerGPU {
			name += fmt.Sprintf(",pods=%d", fl.nodes*fl.podsPerNode)
		}
		b.Run(name, func(b *testing.B) { benchScaleFleet(b, fl.nodes, fl.podsPerNode) })
	}
}

func benchScaleFleet(b *testing.B, nodes, podsPerNode int) {
	f := buildScaleFleet(b, nodes, podsPerNode)
	c := f.ext.Cache()
	probe := scaleGPUPod("bench", "probe", scaleProbeMiB, 10)
	req, ours, err := c.ParseRequest(probe)
	if err != nil || !ours {
		b.Fatalf("probe request: ours=%v err=%v", ours, err)
	}
	timed := &timedHandler{h: f.ext.Handler(nil)}
	srv := httptest.NewServer(timed)
	defer srv.Close()
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: probe, NodeNames: &f.names})
	if err != nil {
		b.Fatal(err)
	}
	bodyFile := filepath.Join(b.TempDir(), "args.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		b.Fatal(err)
	}
	seq := 0 // bind keys stay unique across b.Run's calls: a released key is gone for good
	for r := 0; r < scaleRepeats(b); r++ {
		b.Run("filter", func(b *testing.B) {
			b.ReportAllocs()
			b.ReportMetric(f.cacheMiB, "cache-MiB")
			b.ReportMetric(f.objectsMiB, "objects-MiB")
			for i := 0; i < b.N; i++ {
				res := NewScheduler(c).Filter(probe, f.names)
				if len(*res.NodeNames) != nodes {
					b.Fatalf("filter: %d of %d nodes fit; failed %v", len(*res.NodeNames), nodes, res.FailedNodes)
				}
			}
		})
		b.Run("prioritize", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				out := NewScheduler(c).Prioritize(probe, f.names)
				if len(out) != nodes || out[nodes-1].Host != f.names[nodes-1] || out[0].Score < 0 || out[0].Score > extenderv1.MaxExtenderPriority {
					b.Fatalf("prioritize: %d scores, first %+v", len(out), out[0])
				}
			}
		})
		b.Run("bind", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				seq++
				k := device.PodRef{Namespace: "bench", Name: "bind-" + strconv.Itoa(seq), UID: types.UID("uid-bind-" + strconv.Itoa(seq))}
				node := f.names[i%nodes]
				a, _, err := NewScheduler(c).BookForBind(k, req, node)
				if err != nil || a == nil || a.Node != node {
					b.Fatalf("BookForBind on %s: %v, %+v", node, err, a)
				}
				NewScheduler(c).FinishBind(k, node, outcomeBound)
				c.Release(k)
			}
		})
		// Preemption (case C43): a pod of priority 1000 that fits no node as placed
		// (scalePreemptor), for which every node offers a 2-victim set. preempt-plan is the
		// extender's own preemption offered every node; preempt-verb the verb with the candidate
		// nodes kube-scheduler would propose.
		big := scalePreemptor(podsPerNode)
		prio := int32(1000)
		big.Spec.Priority = &prio
		bigReq, _, err := c.ParseRequest(big)
		if err != nil {
			b.Fatal(err)
		}
		if res := NewScheduler(c).Filter(big, f.names); len(*res.NodeNames) != 0 {
			b.Fatalf("the preemptor fits %d of %d nodes without preemption: the fleet must leave it no room", len(*res.NodeNames), nodes)
		}
		b.Run("preempt-plan", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				plan, ok := c.PlanPreemption(device.RefOf(big), bigReq, prio, f.names, nil)
				if !ok || len(plan.Victims) != 2 {
					b.Fatalf("plan %+v ok=%v; want 2 victims", plan, ok)
				}
			}
		})
		b.Run("preempt-verb", func(b *testing.B) {
			// kube-scheduler proposes max(100, 10%) candidate nodes (DefaultPreemption's
			// minCandidateNodesAbsolute and minCandidateNodesPercentage).
			cands := min(nodes, max(minPreemptionCandidates, nodes/10))
			args := &extenderv1.ExtenderPreemptionArgs{Pod: big, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
			for _, n := range f.names[:cands] {
				args.NodeNameToMetaVictims[n] = &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{{UID: "uid-placed-" + n + "-0"}}}
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if res := NewScheduler(c).Preempt(args); len(res.NodeNameToMetaVictims) != cands {
					b.Fatalf("preempt: %d of %d candidate nodes kept", len(res.NodeNameToMetaVictims), cands)
				}
			}
		})
		b.Run("prioritize-client-decode", func(b *testing.B) {
			reply, err := json.Marshal(NewScheduler(c).Prioritize(probe, f.names))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var got extenderv1.HostPriorityList
				if err := json.Unmarshal(reply, &got); err != nil || len(got) != nodes {
					b.Fatalf("decoded %d entries: %v", len(got), err)
				}
			}
		})
		for _, verb := range []string{"filter", "prioritize"} {
			b.Run(verb+"-http", func(b *testing.B) {
				// filter answers every node (all fit); prioritize lists the nodes scored above 0.
				want := nodes
				if verb == "prioritize" {
					want = len(scoredOnly(NewScheduler(c).Prioritize(probe, f.names)))
					b.ReportMetric(float64(want), "hosts-listed")
				}
				benchScaleHTTP(b, timed, srv.URL+"/"+verb, verb, bodyFile, want)
			})
		}
	}
}

// scalePreemptor is the preemption benchmarks' pod for a fleet of podsPerNode placed pods per
// node: a pod that fits no node as placed and needs exactly 2 victims on every node.
//   - Every GPU occupied (podsPerNode ≥ 8; 40000 of 81920 MiB used on each GPU at 32 pods per
//     node): 1 GPU of 60000 MiB; freeing one GPU's 2 largest pods makes room.
//   - Fewer pods than GPUs (the fleet of issue 4's targets: 4 pods per node, one 4000 MiB pod on
//     each of GPUs 0..3, GPUs 4..7 empty): a 1-GPU pod would fit on an empty GPU, so the pod asks
//     every empty GPU and 2 more, 78000 MiB each (more than an occupied GPU's 77920 MiB free), so
//     2 of the occupied GPUs must be emptied. The fleet stays as issue 4 defines it (its filter
//     and prioritize figures are the targets').
func scalePreemptor(podsPerNode int) *corev1.Pod {
	empty := scaleGPUsPerNode - podsPerNode
	if empty <= 0 {
		return scaleGPUPod("bench", "big", 60000, 10)
	}
	if empty+2 > scaleGPUsPerNode {
		panic(fmt.Sprintf("scalePreemptor: %d pods per node leave too few occupied GPUs for a 2-victim set", podsPerNode))
	}
	p := scaleGPUPod("bench", "big", 78000, 10)
	p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = *resource.NewQuantity(int64(empty+2), resource.DecimalSI)
	return p
}

// timedHandler records how long the extender's handler takes per call (from the request's
// arrival to the reply's last byte written), its side of a round trip.
type timedHandler struct {
	h   http.Handler
	mu  sync.Mutex
	lat []time.Duration
}

func (t *timedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	t.h.ServeHTTP(w, r)
	d := time.Since(start)
	t.mu.Lock()
	t.lat = append(t.lat, d)
	t.mu.Unlock()
}

// take returns the recorded latencies but the first skip, and forgets them all.
func (t *timedHandler) take(skip int) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	lat := t.lat[min(skip, len(t.lat)):]
	t.lat = nil
	return lat
}

// benchScaleHTTP has a client process (runClientProcess) post body to url b.N times, each reply
// checked to name want nodes, and reports its round trips: ns/op is their mean, p50/p99 in µs;
// server-p50/p99 are the extender handler's share of them; allocs/op and B/op are the
// extender's side (this process) per call.
func benchScaleHTTP(b *testing.B, timed *timedHandler, url, verb, bodyFile string, want int) {
	b.ReportAllocs()
	timed.take(0)
	lat := runClientProcess(b, clientJob{URL: url, Verb: verb, BodyFile: bodyFile, Calls: b.N, Nodes: want})
	b.StopTimer()
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat)), "ns/op")
	scaleReportLatency(b, "", lat)
	scaleReportLatency(b, "server-", timed.take(clientWarmup))
}
