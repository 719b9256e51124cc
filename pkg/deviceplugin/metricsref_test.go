package deviceplugin

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/internal/metricstest"
	"github.com/hami-go/hami-go/pkg/device"
)

// What the device plugin serves on /metrics, with a slice using memory, an unhealthy GPU and
// one timed kubelet call, passes promlint (`promtool check metrics`) and is exactly the device
// plugin's rows of the metric reference in docs/components.md.
func TestMetricsLintAndReference(t *testing.T) {
	b := newTestBackend(2, 81559)
	b.procs["GPU-A"] = []device.ProcessMemory{{PID: 10, UsedMiB: 700}}
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), b)
	pod := testPod("m", t0, testNode, ctr{name: "c", mem: 3000, cores: 25, gpus: []string{"GPU-A"}})
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://abc"}}
	p.Ledger().UpsertPod(pod)
	mustCreate(t, p, pod, "c", "GPU-A::0")
	p.OnXID(device.XIDEvent{UUID: "GPU-B", XID: 79})
	call := func(context.Context, any) (any, error) { return nil, nil }
	if _, err := p.observeUnary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/v1beta1.DevicePlugin/Allocate"}, call); err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Check(t, "device-plugin", MetricsHandler(p, func(pid uint32) (string, bool) { return "abc", pid == 10 }, nil))
	// The scrape carries the data fed in, not just the names.
	if got := fams["hami_go_slice_memory_used_bytes"].GetMetric()[0].GetGauge().GetValue(); got != 700<<20 {
		t.Errorf("slice used %v bytes, want %d", got, 700<<20)
	}
	if got := fams["hami_go_device_plugin_request_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("%d kubelet calls timed, want 1", got)
	}
}
