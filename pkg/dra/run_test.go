package dra

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/draapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	testclock "k8s.io/utils/clock/testing"
)

// startRun runs Run with the real kubeletplugin helper over a fake clientset (a unit-test
// stand-in for the API server) holding the Node, waits for the ResourceSlice, and returns the
// clientset, a gRPC client of the driver's DRA socket (as the kubelet dials it) and the config.
func startRun(t testing.TB) (*fake.Clientset, drapbv1.DRAPluginClient, Config) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.RegistrarDir = filepath.Join(dir, "registry")
	cfg.MetricsAddress = "127.0.0.1:0"
	if err := os.MkdirAll(cfg.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	b, _ := fakeBackend(t, "2x24576:NVIDIA A10")
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Client: cs, Backend: b, Options: Options{Clock: testclock.NewFakeClock(t0)}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 {
			s := l.Items[0].Spec
			if s.Driver != draapi.DriverName || s.Pool.Name != testNode || s.NodeName == nil || *s.NodeName != testNode || len(s.Devices) != 2 {
				t.Fatalf("slice spec = %+v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ResourceSlice after 20 s (%d)", len(l.Items))
		}
		time.Sleep(20 * time.Millisecond)
	}
	sock := filepath.Join(cfg.PluginDataDir, "dra.sock")
	for _, err := os.Stat(sock); err != nil; _, err = os.Stat(sock) {
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cs, drapbv1.NewDRAPluginClient(conn), cfg
}

// Run with the real kubeletplugin helper over a fake clientset: it publishes one ResourceSlice
// with a device per GPU (startRun), and a NodePrepareResources call on the driver's socket (as
// the kubelet makes it) reads the claim and returns its CDI device; NodeUnprepareResources
// removes the spec.
func TestRunWithTheHelper(t *testing.T) {
	cs, cl, cfg := startRun(t)
	ctx := bg
	c := testClaim("a", 4000, 25, result{device: "gpu-1", memMiB: 4000, cores: 25})
	if _, err := cs.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pbClaim := &drapbv1.Claim{Namespace: "default", Name: "a", Uid: string(c.UID)}
	resp, err := cl.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{pbClaim}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Claims[string(c.UID)]
	if r == nil || r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != "gpu-1" ||
		!slices.Equal(r.Devices[0].CdiDeviceIds, []string{"gpu.hami-go.io/claim=uid-a"}) {
		t.Fatalf("prepare response = %+v", resp.Claims)
	}
	if env := specEnv(readSpecIn(t, cfg.CDIDir, c.UID)); env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "4000m" {
		t.Fatalf("spec env = %v", env)
	}
	if _, err := cl.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{pbClaim}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIDir, ClaimSpecName(c.UID))); !os.IsNotExist(err) {
		t.Fatalf("spec left after NodeUnprepareResources: %v", err)
	}
}

// BenchmarkNodePrepareResourcesGRPC times the kubelet's whole NodePrepareResources call for a
// one-GPU claim through the helper: gRPC on the unix socket, the helper's claim read (from a
// fake clientset here, not a real API server) and PrepareResourceClaims. Unprepare is outside
// the timed part. Reports p50/p99 per call.
func BenchmarkNodePrepareResourcesGRPC(b *testing.B) {
	quietKlog(b)
	cs, cl, _ := startRun(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := testClaim("bench-"+strconv.Itoa(i), 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
		if _, err := cs.ResourceV1().ResourceClaims("default").Create(bg, c, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		pb := []*drapbv1.Claim{{Namespace: "default", Name: c.Name, Uid: string(c.UID)}}
		b.StartTimer()
		start := time.Now()
		resp, err := cl.NodePrepareResources(bg, &drapbv1.NodePrepareResourcesRequest{Claims: pb})
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err != nil || resp.Claims[string(c.UID)].Error != "" {
			b.Fatal(err, resp)
		}
		if _, err := cl.NodeUnprepareResources(bg, &drapbv1.NodeUnprepareResourcesRequest{Claims: pb}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
}

// quietKlog discards klog's output for b's life. The driver and the kubeletplugin helper log at
// level 0 when they start; `go test -bench` would print those lines between the benchmark's
// name and its figures, which benchstat and hack/bench/report then cannot read.
func quietKlog(b *testing.B) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	b.Cleanup(func() { klog.LogToStderr(true) })
}
