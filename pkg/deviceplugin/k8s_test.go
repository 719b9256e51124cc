package deviceplugin

import (
	"context"
	coordinationv1 "k8s.io/api/coordination/v1"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// startPodSync starts a plugin of 2 test GPUs whose claimed records a PodSync on client writes
// (a fake clientset: unit tests only). It stops when the test ends.
func startPodSync(t *testing.T, client kubernetes.Interface) (*Plugin, *PodSync, context.Context) {
	t.Helper()
	sync := NewPodSync(client, testNode, "")
	p, _ := newTestPluginDirty(t, testConfig(t.TempDir()), newTestBackend(2, 81559), sync.Dirty)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := sync.Start(ctx, p.Ledger()); err != nil {
		t.Fatal(err)
	}
	return p, sync, ctx
}

// Restart with a fake clientset: the informer feeds the ledger, a's claim comes back from its
// written record (its container created again gets the same env, and nothing is rewritten), and a
// new claim (b's container created) is written on b.
func TestPodSyncWritesClaims(t *testing.T) {
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	b := testPod("b", t0, testNode, ctr{name: "c", mem: 2000, gpus: []string{"GPU-B"}})
	written := `{"version":"v1","node":"node-1","containers":[{"name":"c","kind":"app","devices":[{"uuid":"GPU-A","memoryMiB":1000}]}]}`
	a.Annotations[device.AnnoClaimed] = written
	client := fake.NewClientset(a, b)
	p, _, ctx := startPodSync(t, client)
	claimed := func(name string) string {
		got, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Annotations[device.AnnoClaimed]
	}
	if _, ok := p.Ledger().ClaimedRecord(a.UID); !ok {
		t.Fatal("the informer did not deliver a before Start returned")
	}
	if r := mustCreate(t, p, a, "c", "GPU-B::3"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("repeat for a = %v", r.Envs)
	}
	mustCreate(t, p, b, "c", "GPU-A::0")
	waitFor(t, "b's claimed record", func() bool { return claimed("b") != "" })
	dec, err := device.DecodeAllocation(claimed("b"))
	if err != nil || dec.Node != testNode || dec.Containers[0].Devices[0].UUID != "GPU-B" || dec.Containers[0].Devices[0].MemoryMiB != 2000 {
		t.Fatalf("b record = %v, %v; want 2000 MiB of GPU-B", dec, err)
	}
	if got := claimed("a"); got != written {
		t.Fatalf("a's record became %s; want it left as written", got)
	}
}

func TestPublishNodeAndLease(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"keep": "me"}}})
	p, clk := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	ctx := context.Background()
	if changed, err := PublishNode(ctx, client, p.Inventory(), gpuenv.EnforceHAMiCore); err != nil || !changed {
		t.Fatalf("first publish: %v %v", changed, err)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	for k, v := range map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/gpu.replicas": "10", "nvidia.com/gpu.sharing-strategy": "time-slicing", "keep": "me"} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	inv, err := device.DecodeInventory(n.Annotations[device.AnnoInventory])
	if err != nil || len(inv.GPUs) != 2 || inv.SplitCount != 10 || !inv.GPUs[1].Healthy {
		t.Fatalf("inventory = %v, %v", inv, err)
	}
	if changed, err := PublishNode(ctx, client, p.Inventory(), gpuenv.EnforceHAMiCore); err != nil || changed {
		t.Fatalf("unchanged publish patched: %v %v", changed, err)
	}
	p.OnXID(device.XIDEvent{UUID: "GPU-B", XID: 79})
	if changed, _ := PublishNode(ctx, client, p.Inventory(), gpuenv.EnforceHAMiCore); !changed {
		t.Fatal("health change not published")
	}
	if err := RenewLease(ctx, client, "kube-node-lease", testNode, testNode, clk, true); err != nil {
		t.Fatal(err)
	}
	acquired := clk.Now()
	clk.Step(10 * time.Second)
	if err := RenewLease(ctx, client, "kube-node-lease", testNode, testNode, clk, true); err != nil {
		t.Fatal(err)
	}
	lease := func() *coordinationv1.Lease {
		l, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, "hami-go-node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := lease(); *l.Spec.HolderIdentity != testNode || !l.Spec.RenewTime.Time.Equal(clk.Now()) || !l.Spec.AcquireTime.Time.Equal(acquired) {
		t.Fatalf("lease = %+v", l)
	}
	// case C45: released while the kubelet does not have the devices (renewed all the same),
	// taken again, with a new acquire time, once it has.
	clk.Step(10 * time.Second)
	if err := RenewLease(ctx, client, "kube-node-lease", testNode, testNode, clk, false); err != nil {
		t.Fatal(err)
	}
	if l := lease(); !device.LeaseReleased(l) || !l.Spec.RenewTime.Time.Equal(clk.Now()) || !l.Spec.AcquireTime.Time.Equal(acquired) {
		t.Fatalf("released lease = %+v", l)
	}
	clk.Step(time.Second)
	if err := RenewLease(ctx, client, "kube-node-lease", testNode, testNode, clk, true); err != nil {
		t.Fatal(err)
	}
	if l := lease(); device.LeaseReleased(l) || *l.Spec.HolderIdentity != testNode || !l.Spec.AcquireTime.Time.Equal(clk.Now()) {
		t.Fatalf("lease taken again = %+v", l)
	}
}

func TestMetrics(t *testing.T) {
	b := newTestBackend(2, 81559)
	b.procs["GPU-A"] = []device.ProcessMemory{{PID: 10, UsedMiB: 700}, {PID: 11, UsedMiB: 50}}
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), b)
	pod := testPod("m", t0, testNode, ctr{name: "c", mem: 3000, cores: 25, gpus: []string{"GPU-A"}})
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://abc"}}
	p.Ledger().UpsertPod(pod)
	mustCreate(t, p, pod, "c", "GPU-A::0")
	p.OnXID(device.XIDEvent{UUID: "GPU-B", XID: 79})
	c := NewCollector(p, func(pid uint32) (string, bool) { return "abc", pid == 10 })
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) != 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
	want := `
# HELP hami_go_gpu_healthy 1 when the GPU is healthy, 0 after a fatal XID until it recovers.
# TYPE hami_go_gpu_healthy gauge
hami_go_gpu_healthy{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-A"} 1
hami_go_gpu_healthy{index="1",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-B"} 0
# HELP hami_go_gpu_memory_allocated_bytes GPU memory booked on the GPU by the pods placed there, bytes, charged as scheduling charges it (init containers one at a time, case C40).
# TYPE hami_go_gpu_memory_allocated_bytes gauge
hami_go_gpu_memory_allocated_bytes{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-A"} 3.145728e+09
hami_go_gpu_memory_allocated_bytes{index="1",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-B"} 0
# HELP hami_go_gpu_memory_used_bytes GPU memory used by processes, bytes (from the backend).
# TYPE hami_go_gpu_memory_used_bytes gauge
hami_go_gpu_memory_used_bytes{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-A"} 7.86432e+08
hami_go_gpu_memory_used_bytes{index="1",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-B"} 0
# HELP hami_go_slice_memory_used_bytes Memory the container's processes use on the GPU, bytes.
# TYPE hami_go_slice_memory_used_bytes gauge
hami_go_slice_memory_used_bytes{container="c",index="0",model="NVIDIA H100 80GB HBM3",namespace="default",node="node-1",pod="m",pod_uid="POD_UID",uuid="GPU-A"} 7.340032e+08
# HELP hami_go_slice_cores_limit_percent Compute limit of the container on the GPU, percent (0 = none).
# TYPE hami_go_slice_cores_limit_percent gauge
hami_go_slice_cores_limit_percent{container="c",index="0",model="NVIDIA H100 80GB HBM3",namespace="default",node="node-1",pod="m",pod_uid="POD_UID",uuid="GPU-A"} 25
`
	want = strings.ReplaceAll(want, "POD_UID", string(pod.UID))
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "hami_go_gpu_healthy", "hami_go_gpu_memory_allocated_bytes",
		"hami_go_gpu_memory_used_bytes", "hami_go_slice_memory_used_bytes", "hami_go_slice_cores_limit_percent"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "hami_go_slice_memory_limit_bytes"); n != 1 {
		t.Fatalf("%d slice series", n)
	}
	enforcement := `
# HELP hami_go_node_enforcement_ready 1 when the node's GPU slice enforcement (mode: hami-core, mps, none) is present, 0 when missing: the node then takes no new GPU pods.
# TYPE hami_go_node_enforcement_ready gauge
hami_go_node_enforcement_ready{mode="hami-core",node="node-1"} ENFORCED
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(strings.ReplaceAll(enforcement, "ENFORCED", "1")), "hami_go_node_enforcement_ready"); err != nil {
		t.Fatalf("fake backend (simulated enforcement): %v", err)
	}
	b.name = "nvml" // a real backend without HAMi-core's library on the host
	if err := testutil.CollectAndCompare(c, strings.NewReader(strings.ReplaceAll(enforcement, "ENFORCED", "0")), "hami_go_node_enforcement_ready"); err != nil {
		t.Fatalf("nvml backend without the library: %v", err)
	}
	// The pod ends: its series disappear.
	pod.Status.Phase = corev1.PodSucceeded
	p.Ledger().UpsertPod(pod)
	if n := testutil.CollectAndCount(c, "hami_go_slice_memory_limit_bytes", "hami_go_slice_cores_limit_percent", "hami_go_slice_memory_used_bytes"); n != 0 {
		t.Fatalf("%d slice series after the pod ended", n)
	}
}

type fakeFaults struct{ xids, recovers []string }

func (f *fakeFaults) InjectXID(uuid string, xid uint64) error {
	if uuid != "GPU-A" {
		return os.ErrNotExist
	}
	f.xids = append(f.xids, uuid)
	return nil
}
func (f *fakeFaults) Recover(uuid string) error { f.recovers = append(f.recovers, uuid); return nil }

func TestHTTPHandler(t *testing.T) {
	tests := []struct {
		name        string
		noInjection bool // the handler has no fault injection
		method, url string
		wantCode    int
		wantBody    string // part of the body, when set
		// wantXIDs and wantRecovers are the injections the faults (fresh for each call) saw.
		wantXIDs, wantRecovers int
	}{
		{name: "healthz", method: "GET", url: "/healthz", wantCode: 200},
		{name: "xid", method: "POST", url: "/debug/fake/xid?uuid=GPU-A&xid=79", wantCode: 200, wantXIDs: 1},
		{name: "bad xid", method: "POST", url: "/debug/fake/xid?uuid=GPU-A&xid=x", wantCode: 400, wantBody: `xid: "x" is not an XID number`},
		{name: "unknown uuid", method: "POST", url: "/debug/fake/xid?uuid=GPU-Q&xid=79", wantCode: 400},
		{name: "GET recover", method: "GET", url: "/debug/fake/recover?uuid=GPU-A", wantCode: http.StatusMethodNotAllowed},
		{name: "recover", method: "POST", url: "/debug/fake/recover?uuid=GPU-A", wantCode: 200, wantRecovers: 1},
		// Without fault injection the debug endpoints do not exist.
		{name: "debug endpoint without injection", noInjection: true, method: "POST", url: "/debug/fake/xid?uuid=GPU-A&xid=79", wantCode: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeFaults{}
			h := nodeagent.Handler(prometheus.NewRegistry(), f)
			if tc.noInjection {
				h = nodeagent.Handler(prometheus.NewRegistry(), nil)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.url, nil))
			if w.Code != tc.wantCode || !strings.Contains(w.Body.String(), tc.wantBody) {
				t.Fatalf("%s %s: %d %s, want %d with %q", tc.method, tc.url, w.Code, w.Body, tc.wantCode, tc.wantBody)
			}
			if len(f.xids) != tc.wantXIDs {
				t.Fatalf("%s %s: %d XIDs injected, want %d", tc.method, tc.url, len(f.xids), tc.wantXIDs)
			}
			if len(f.recovers) != tc.wantRecovers {
				t.Fatalf("%s %s: %d recoveries, want %d", tc.method, tc.url, len(f.recovers), tc.wantRecovers)
			}
		})
	}
}

func TestCDISpec(t *testing.T) {
	dir := t.TempDir()
	b := newTestBackend(2, 81559)
	for i := range b.gpus {
		b.gpus[i].Minor = i
	}
	if err := WriteCDISpec(dir, b.gpus, "/", func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.GetDevice("hami-go.io/gpu=GPU-B"); d == nil || d.ContainerEdits.DeviceNodes[0].Path != "/dev/nvidia1" {
		t.Fatalf("device = %v, errors %v", d, c.GetErrors())
	}
	if _, err := os.Stat(filepath.Join(dir, CDISpecName)); err != nil {
		t.Fatal(err)
	}
}

// At shutdown the claims the plugin applied are written before it stops (Flush): the claimed
// record is where the next agent restores them from.
func TestPodSyncFlushWritesQueuedClaims(t *testing.T) {
	b := testPod("b", t0, testNode, ctr{name: "c", mem: 2000, gpus: []string{"GPU-B"}})
	client := fake.NewClientset(b)
	p, sync, ctx := startPodSync(t, client)
	mustCreate(t, p, b, "c", "GPU-A::0")
	if !sync.Flush(time.After(10 * time.Second)) {
		t.Fatal("Flush timed out")
	}
	got, err := client.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{})
	if err != nil || !strings.Contains(got.Annotations[device.AnnoClaimed], `"uuid":"GPU-B","memoryMiB":2000`) {
		t.Fatalf("b's claimed record after Flush: %q, %v; want 2000 MiB of GPU-B written", got.Annotations[device.AnnoClaimed], err)
	}
}
