package deviceplugin

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

func devList(healthy, unhealthy int) []*pluginapi.Device {
	var out []*pluginapi.Device
	for i := 0; i < healthy; i++ {
		out = append(out, &pluginapi.Device{ID: device.SliceID("GPU-A", i), Health: pluginapi.Healthy})
	}
	for i := 0; i < unhealthy; i++ {
		out = append(out, &pluginapi.Device{ID: device.SliceID("GPU-B", i), Health: pluginapi.Unhealthy})
	}
	return out
}

// Issue 37 item 7: the kubelet's count allocatable is the Healthy devices ListAndWatch lists;
// it never drops below the slices the running pods hold, and the normal case is unchanged.
func TestFloorDevices(t *testing.T) {
	tests := []struct {
		name                 string
		devs                 []*pluginapi.Device
		held                 int64
		wantHealthy, wantLen int
		wantOver             int64
		wantPlaceholders     int
	}{
		{name: "normal: unchanged", devs: devList(10, 0), held: 4, wantHealthy: 10, wantLen: 10},
		{name: "an unhealthy GPU, pods fit the healthy one: unchanged", devs: devList(10, 10), held: 10, wantHealthy: 10, wantLen: 20},
		{name: "an unhealthy GPU under a pod", devs: devList(10, 10), held: 13, wantHealthy: 13, wantLen: 20, wantOver: 3},
		// the GPU is gone from discovery (or MIG turned on): no device of it to list
		{name: "a GPU gone under a pod", devs: devList(10, 0), held: 12, wantHealthy: 12, wantLen: 12, wantOver: 2, wantPlaceholders: 2},
		{name: "MIG on, the only GPU", devs: nil, held: 1, wantHealthy: 1, wantLen: 1, wantOver: 1, wantPlaceholders: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.devs)
			got, over := floorDevices(tc.devs, tc.held)
			healthy, placeholders := 0, 0
			seen := map[string]bool{}
			for _, d := range got {
				if d.Health == pluginapi.Healthy {
					healthy++
				}
				if u, _, _ := device.ParseSliceID(d.ID); u == heldPlaceholder {
					placeholders++
				}
				if seen[d.ID] {
					t.Errorf("device %s listed twice", d.ID)
				}
				seen[d.ID] = true
			}
			if healthy != tc.wantHealthy || len(got) != tc.wantLen || over != tc.wantOver || placeholders != tc.wantPlaceholders {
				t.Errorf("healthy %d of %d, over %d, placeholders %d; want %d of %d, %d, %d",
					healthy, len(got), over, placeholders, tc.wantHealthy, tc.wantLen, tc.wantOver, tc.wantPlaceholders)
			}
			if fmt.Sprint(tc.devs) != before {
				t.Errorf("floorDevices modified its input")
			}
		})
	}
}

// Issue 37 item 7, wired: with one of two GPUs unhealthy and gone from the figures, the plugin
// publishes and lists what its pods hold, and reports the shortfall per resource.
func TestPublishedResourcesAtLeastHeld(t *testing.T) {
	cfg := testConfig(t.TempDir())
	p, _ := newTestPlugin(t, cfg, newTestBackend(1, 81920))
	n := cfg.Resources
	held := nodeagent.NodeResources{
		corev1.ResourceName(n.Count): int64(cfg.SplitCount) + 2, corev1.ResourceName(n.Memory): 100000,
		device.ResourceGPUMemory: 100000, corev1.ResourceName(n.Cores): 50, device.ResourceGPUCores: 150,
	}
	p.SetHeld(func(names ...corev1.ResourceName) nodeagent.NodeResources {
		out := nodeagent.NodeResources{}
		for _, name := range names {
			out[name] = held[name]
		}
		return out
	})
	pub := p.PublishedResources()
	want := nodeagent.NodeResources{device.ResourceGPUMemory: 100000, device.ResourceGPUCores: 150, corev1.ResourceName(n.Memory): 100000,
		corev1.ResourceName(n.MemoryPercent): 100, corev1.ResourceName(n.Cores): 100}
	if pub.String() != want.String() {
		t.Errorf("PublishedResources = %s\nwant %s", pub, want)
	}
	healthy := 0
	for _, d := range p.listedDevices() {
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	if healthy != cfg.SplitCount+2 {
		t.Errorf("%d healthy devices listed, want the %d slices held", healthy, cfg.SplitCount+2)
	}
	over := p.Overcommitted()
	wantOver := nodeagent.NodeResources{corev1.ResourceName(n.Count): 2, device.ResourceGPUMemory: 100000 - 81920, device.ResourceGPUCores: 50,
		corev1.ResourceName(n.Memory): 100000 - 81920, corev1.ResourceName(n.MemoryPercent): 0, corev1.ResourceName(n.Cores): 0}
	if over.String() != wantOver.String() {
		t.Errorf("Overcommitted = %s\nwant %s", over, wantOver)
	}
	// the pods end: the figures are the GPUs' own again
	held = nodeagent.NodeResources{}
	if got, want := p.PublishedResources().String(), p.NodeResources().String(); got != want {
		t.Errorf("nothing held: published %s, want %s", got, want)
	}
}

// A placeholder is a device like any other to the kubelet (free where the gone GPU's IDs its
// pods hold are no longer listed), so Allocate takes it for a new pod: the pod's plan gives its
// GPU, not the ID. A device ID of a GPU not on the node is still refused.
func TestAllocateAcceptsAHeldPlaceholder(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81920))
	if _, err := alloc(t, p, device.SliceID(heldPlaceholder, 0)); err != nil {
		t.Fatalf("Allocate of a placeholder: %v; want the pending answer", err)
	}
	if _, err := alloc(t, p, device.SliceID("GPU-Z", 0)); err == nil || !strings.Contains(err.Error(), `names GPU "GPU-Z"`) {
		t.Fatalf("Allocate of another node's GPU: %v; want refused", err)
	}
}
