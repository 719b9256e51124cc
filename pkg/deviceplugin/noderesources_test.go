package deviceplugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// case C49: the device plugin publishes GPU memory and the per-GPU slice names' totals, so that
// NodeResourcesFit's queueing hint (which ignores no resource) can see a node fit a GPU pod
// (issue 28: the pod that waited for a mode switch waited 5 minutes more). Configured names are
// the ones published, and withdrawn.
func TestNodeResources(t *testing.T) {
	tests := []struct {
		name    string
		scaling float64
		names   device.ResourceNames
		want    nodeagent.NodeResources
	}{
		{name: "defaults", names: device.DefaultResourceNames(), want: nodeagent.NodeResources{
			device.ResourceGPUMemory: 3 * 81920, device.ResourceGPUCores: 300, "nvidia.com/gpumem": 3 * 81920, "nvidia.com/gpumem-percentage": 300, "nvidia.com/gpucores": 300}},
		// percentages are of a GPU's physical memory: scaled memory lets bookings add up to more
		{name: "scaling 1.5", scaling: 1.5, names: device.DefaultResourceNames(), want: nodeagent.NodeResources{
			device.ResourceGPUMemory: 3 * 122880, device.ResourceGPUCores: 300, "nvidia.com/gpumem": 3 * 122880, "nvidia.com/gpumem-percentage": 450, "nvidia.com/gpucores": 300}},
		{name: "own names", names: device.ResourceNames{Count: "hami.io/gpu", Memory: "hami.io/mem", MemoryPercent: "hami.io/mem-pct", Cores: "hami.io/cores"}, want: nodeagent.NodeResources{
			device.ResourceGPUMemory: 3 * 81920, device.ResourceGPUCores: 300, "hami.io/mem": 3 * 81920, "hami.io/mem-pct": 300, "hami.io/cores": 300}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Resources = tc.names
			if tc.scaling != 0 {
				cfg.MemoryScaling = tc.scaling
			}
			p, _ := newTestPlugin(t, cfg, newTestBackend(3, 81920))
			got := p.NodeResources()
			if got.String() != tc.want.String() {
				t.Errorf("NodeResources = %s\nwant            %s", got, tc.want)
			}
			names := map[corev1.ResourceName]bool{}
			for _, n := range p.NodeResourceNames() {
				names[n] = true
			}
			for n := range tc.want {
				if !names[n] {
					t.Errorf("NodeResourceNames %v lacks %s: it would stay on the node after the agent left", p.NodeResourceNames(), n)
				}
			}
			if len(names) != len(tc.want) {
				t.Errorf("NodeResourceNames %v; want the %d names published", p.NodeResourceNames(), len(tc.want))
			}
		})
	}
}
