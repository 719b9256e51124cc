package deviceplugin

import (
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/podevents/podeventstest"
)

// case C34: pod default/p (1000 MiB, claimed) is deleted and re-created under the same name with
// 2000 MiB while the plugin's pod watch is down; the watch ends with 410 Gone, the reflector
// relists, and the informer delivers one update from the old UID to the new one and no delete
// (asserted). The kubelet then admits the new pod on the slice the old one left (GPU-A::3): its
// container gets the new pod's own 2000 MiB, and the old pod is gone from the ledger. Its
// metrics (C35) name only the new pod.
func TestC34RelistForgetsPodRecreatedUnderSameName(t *testing.T) {
	old := testPod("p", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	client := fake.NewClientset(old)
	gate := podeventstest.Gate(client, "pods")
	p, s, ctx := startPodSync(t, client)

	var mu sync.Mutex
	var crossings []string
	if _, err := s.factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			if op, np := o.(*corev1.Pod), n.(*corev1.Pod); op.UID != np.UID {
				mu.Lock()
				crossings = append(crossings, string(op.UID)+"->"+string(np.UID))
				mu.Unlock()
			}
		},
		DeleteFunc: func(o any) {
			mu.Lock()
			crossings = append(crossings, "delete")
			mu.Unlock()
		},
	}); err != nil {
		t.Fatal(err)
	}

	if r := mustCreate(t, p, old, "c", "GPU-A::3"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("old pod's container: %v", r.Envs)
	}
	waitFor(t, "the old pod's claimed record", func() bool {
		got, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		return err == nil && strings.Contains(got.Annotations[device.AnnoClaimed], `"memoryMiB":1000`)
	})

	gate.Deafen()
	if err := client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := testPod("p", t0.Add(time.Minute), testNode, ctr{name: "c", mem: 2000, gpus: []string{"GPU-A"}})
	if _, err := client.CoreV1().Pods("default").Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gate.Expire()
	want := string(old.UID) + "->" + string(fresh.UID)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(crossings, ",")
		mu.Unlock()
		if got == want {
			break
		}
		if got != "" || time.Now().After(deadline) {
			t.Fatalf("informer events after the 410: %q, want exactly one update %q (a relist)", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, known := p.Ledger().ClaimedRecord(old.UID); known {
		t.Errorf("the ledger still holds the old pod %s after the update across UIDs", old.UID)
	}
	r := mustCreate(t, p, fresh, "c", "GPU-A::3")
	if got := r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"]; got != "2000m" {
		t.Fatalf("the re-created pod got CUDA_DEVICE_MEMORY_LIMIT_0=%q, want its own 2000m", got)
	}
	if rec, ok := p.Ledger().ClaimedRecord(fresh.UID); !ok || len(rec.Containers) != 1 || rec.Containers[0].Devices[0].MemoryMiB != 2000 {
		t.Errorf("the re-created pod's claimed record: %+v, %v; want 2000 MiB", rec, ok)
	}

	c := NewCollector(p, nil)
	wantMetrics := `
# HELP hami_go_slice_memory_limit_bytes Memory limit of the container on the GPU, bytes.
# TYPE hami_go_slice_memory_limit_bytes gauge
hami_go_slice_memory_limit_bytes{container="c",index="0",model="NVIDIA H100 80GB HBM3",namespace="default",node="node-1",pod="p",pod_uid="` + string(fresh.UID) + `",uuid="GPU-A"} 2.097152e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantMetrics), "hami_go_slice_memory_limit_bytes"); err != nil {
		t.Error(err)
	}
}

// case C40: [init 60%][app 50%] of one pod on one GPU, and another pod's app 10% there. The
// per-GPU metrics charge the first pod as the extender does (allocator.ChargeOf: the init
// container runs before the app container, so the larger of the two, 60%, one sharer), plus
// the other pod: 57344 MiB (70%), 70% cores, 2 sharers. Before: each claimed container was
// added, 98304 MiB (120%), 120% cores and 3 sharers.
func TestC40InitAndAppChargedOnceInGPUMetrics(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	ia := testPod("ia", t0, testNode,
		ctr{name: "init", kind: device.KindInit, mem: 49152, cores: 60, gpus: []string{"GPU-A"}},
		ctr{name: "app", mem: 40960, cores: 50, gpus: []string{"GPU-A"}})
	other := testPod("other", t0.Add(time.Second), testNode, ctr{name: "app", mem: 8192, cores: 10, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(ia)
	if r := mustCreate(t, p, ia, "init", "GPU-A::0"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "49152m" {
		t.Fatalf("init container: %v", r.Envs)
	}
	if r := mustCreate(t, p, ia, "app", "GPU-A::0"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "40960m" {
		t.Fatalf("app container reusing the init container's device: %v", r.Envs)
	}
	p.Ledger().UpsertPod(other)
	mustCreate(t, p, other, "app", "GPU-A::1")

	// The extender's charge of the same allocations, by the same function.
	planned := func(pod *corev1.Pod) *device.Allocation {
		a, err := device.DecodeAllocation(pod.Annotations[device.AnnoPlanned])
		if err != nil {
			t.Fatal(err)
		}
		return &a
	}
	ext := allocator.NodeUsage{}
	ext.Add(allocator.ChargeOf(planned(ia)))
	ext.Add(allocator.ChargeOf(planned(other)))
	if g := ext["GPU-A"]; g.MemoryMiB != 57344 || g.CoresPercent != 70 || g.Sharers != 2 {
		t.Fatalf("the extender's charge of GPU-A: %+v, want 57344 MiB, 70%%, 2 sharers", g)
	}

	c := NewCollector(p, nil)
	want := `
# HELP hami_go_gpu_cores_allocated_percent Compute booked on the GPU by the pods placed there, percent of the GPU, charged as scheduling charges it.
# TYPE hami_go_gpu_cores_allocated_percent gauge
hami_go_gpu_cores_allocated_percent{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-A"} 70
hami_go_gpu_cores_allocated_percent{index="1",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-B"} 0
# HELP hami_go_gpu_memory_allocated_bytes GPU memory booked on the GPU by the pods placed there, bytes, charged as scheduling charges it (init containers one at a time, case C40).
# TYPE hami_go_gpu_memory_allocated_bytes gauge
hami_go_gpu_memory_allocated_bytes{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-A"} 6.0129542144e+10
hami_go_gpu_memory_allocated_bytes{index="1",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-B"} 0
# HELP hami_go_gpu_sharers Slices of the GPU held by containers that can run at one time (scheduling's count).
# TYPE hami_go_gpu_sharers gauge
hami_go_gpu_sharers{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-A"} 2
hami_go_gpu_sharers{index="1",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-B"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "hami_go_gpu_cores_allocated_percent",
		"hami_go_gpu_memory_allocated_bytes", "hami_go_gpu_sharers"); err != nil {
		t.Fatal(err)
	}
	// Per-slice limits stay per container: each container's own limit.
	if n := testutil.CollectAndCount(c, "hami_go_slice_memory_limit_bytes"); n != 3 {
		t.Errorf("%d slice series, want 3 (init, app, other's app)", n)
	}
}

// case C35: a backend that lists one GPU twice still yields one series per GPU, and the plugin's
// /metrics answers 200.
func TestC35GPUListedTwiceExportedOnce(t *testing.T) {
	b := newTestBackend(1, 81920)
	b.gpus = append(b.gpus, b.gpus[0])
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), b)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(p, nil))
	if n := testutil.CollectAndCount(NewCollector(p, nil), "hami_go_gpu_memory_total_bytes"); n != 1 {
		t.Errorf("%d GPU series for one GPU listed twice, want 1", n)
	}
	srv := httptest.NewServer(nodeagent.Handler(reg, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics status %d, want 200", resp.StatusCode)
	}
}
