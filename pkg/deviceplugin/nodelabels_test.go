package deviceplugin

import (
	"maps"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// Issue 37 item 10: nvidia.com/gpu.memory is the smallest GPU's memory, so that on a node with
// two GPU models a node affinity on it (the webhook's gpuMemoryNodeAffinity: > MiB − 1) never
// sends a pod to a node whose GPUs might not hold it. Before the fix it was GPU 0's: 81920 on the
// H100 + A100-40GB node, where a 60000 MiB pod fits only one of the two cards.
func TestNodeLabelsMixedGPUs(t *testing.T) {
	gpu := func(i int, model string, mib int64, healthy bool) device.GPU {
		return device.GPU{UUID: "GPU-" + string(rune('a'+i)), Index: i, Model: model, MemoryMiB: mib, Healthy: healthy}
	}
	const h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
	for _, tc := range []struct {
		name        string
		gpus        []device.GPU
		enforcement string
		split       int
		want        map[string]string
	}{
		{
			name:  "one model",
			gpus:  []device.GPU{gpu(0, h100, 81920, true), gpu(1, h100, 81920, true)},
			split: 10,
			want: map[string]string{
				device.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", device.LabelGPUCount: "2", device.LabelGPUMemory: "81920",
				device.LabelGPUReplicas: "10", device.LabelGPUSharingStrategy: "time-slicing",
			},
		},
		{
			name:  "mixed, large card first",
			gpus:  []device.GPU{gpu(0, h100, 81920, true), gpu(1, a100, 40960, true), gpu(2, h100, 81920, true)},
			split: 10,
			want: map[string]string{
				device.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", device.LabelGPUCount: "3", device.LabelGPUMemory: "40960",
				device.LabelGPUReplicas: "10", device.LabelGPUSharingStrategy: "time-slicing",
			},
		},
		{
			name:        "mixed, small card first, MPS",
			gpus:        []device.GPU{gpu(0, a100, 40960, true), gpu(1, h100, 81920, true)},
			enforcement: gpuenv.EnforceMPS,
			split:       4,
			want: map[string]string{
				device.LabelGPUProduct: "NVIDIA-A100-SXM4-40GB", device.LabelGPUCount: "2", device.LabelGPUMemory: "40960",
				device.LabelGPUReplicas: "4", device.LabelGPUSharingStrategy: "mps",
			},
		},
		{
			// Health does not move the label: a label that followed it would flap.
			name:  "mixed, the small card unhealthy",
			gpus:  []device.GPU{gpu(0, h100, 81920, true), gpu(1, a100, 40960, false)},
			split: 1,
			want: map[string]string{
				device.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", device.LabelGPUCount: "2", device.LabelGPUMemory: "40960",
				device.LabelGPUReplicas: "1", device.LabelGPUSharingStrategy: "none",
			},
		},
		{
			name: "no GPU",
			want: map[string]string{device.LabelGPUCount: "0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := device.Inventory{Node: "node-1", SplitCount: tc.split, MemoryScaling: 1, GPUs: tc.gpus}
			if got := NodeLabels(&inv, tc.enforcement); !maps.Equal(got, tc.want) {
				t.Fatalf("NodeLabels = %v\nwant %v", got, tc.want)
			}
			// What a node affinity reads from the label holds for every GPU of the node.
			m := MinGPUMemoryMiB(&inv)
			for _, g := range inv.GPUs {
				if g.MemoryMiB < m {
					t.Fatalf("GPU %d has %d MiB, below the label's %d", g.Index, g.MemoryMiB, m)
				}
			}
		})
	}
}
