package deviceplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Every kubelet call through the gRPC server is timed by method and status code, and the
// histogram is exported with the GPU metrics (promlint clean). Calls: Allocate answered with the
// pending answer (OK), Allocate with an unknown device (InvalidArgument), GetDevicePluginOptions
// (OK).
func TestRPCDurationMetric(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	p, _ := newTestPlugin(t, testConfig(dir), newTestBackend(2, 81559))
	p.canApplyPlans = func(bool) error { return nil } // the NRI plugin is connected
	startServe(t, p)
	c := k.client(t, k.waitRegistration(t, 5*time.Second).Endpoint)
	ctx := context.Background()
	if _, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-A::0"}}}}); err != nil {
		t.Fatalf("allocate: %v", err)
	}
	if _, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-Z::0"}}}}); err == nil {
		t.Fatal("allocate of an unknown device succeeded")
	}
	if _, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	col := NewCollector(p, nil)
	if probs, err := testutil.CollectAndLint(col, "hami_go_device_plugin_request_duration_seconds"); err != nil || len(probs) != 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "hami_go_device_plugin_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			counts[strings.Join(l, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{"code=OK,method=Allocate,node=node-1": 1, "code=InvalidArgument,method=Allocate,node=node-1": 1, "code=OK,method=GetDevicePluginOptions,node=node-1": 1}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d calls recorded, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
}
