package schedperf

import (
	"context"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"

	"github.com/hami-go/hami-go/cmd/kube-scheduler-hami-go/nodefit"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/schedplugin"
)

// The simulated GPU fleet: every node has gpusPerNode H100-like GPUs of gpuMiB, split count
// splitCount (the device plugin's nvidia.com/gpu: 80 in config/templates/node-gpu-hami.yaml, the
// sharers capacity in DRA), as in hack/bench/e2esched.
const (
	gpusPerNode = 8
	gpuMiB      = 81920
	splitCount  = 10
	gpuModel    = "NVIDIA H100 80GB HBM3"
	// workers is how many API calls the hooks have in flight at once.
	workers = 16
)

// harness is the state the node-update hook keeps across workloads: what it set up (for
// TestSchedPerf's checks) and where the extender's figures go. Each workload's own parts
// (extender, Lease renewal) live in a modeRun that the workload's cleanup stops.
type harness struct {
	outDir string

	mu        sync.Mutex
	extenders int // workloads that ran the extender
	slices    int // workloads that published ResourceSlices
	// hamiGo is the HamiGo plugin the last scheduler built (registry), for the plugin test
	// case's hook.
	hamiGo *schedplugin.Plugin
}

// registry is scheduler_perf's out-of-tree registry: hami-go's two plugins as
// cmd/kube-scheduler-hami-go registers them (HamiGoNodeResourcesFit with the scheduler features
// of the feature gates scheduler_perf set for the workload). The HamiGo plugin a scheduler
// builds is kept for nodesCreated.
func (h *harness) registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		schedplugin.Name: func(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
			p, err := schedplugin.New(ctx, obj, fh)
			if err != nil {
				return nil, err
			}
			h.mu.Lock()
			h.hamiGo, _ = p.(*schedplugin.Plugin)
			h.mu.Unlock()
			return p, nil
		},
		nodefit.Name: nodefit.Factory,
	}
}

// plugin returns the HamiGo plugin the last scheduler built (nil: none).
func (h *harness) plugin() *schedplugin.Plugin { h.mu.Lock(); defer h.mu.Unlock(); return h.hamiGo }

func newHarness(outDir string) *harness { return &harness{outDir: outDir} }

func (h *harness) extendersStarted() int { h.mu.Lock(); defer h.mu.Unlock(); return h.extenders }
func (h *harness) slicesPublished() int  { h.mu.Lock(); defer h.mu.Unlock(); return h.slices }

// testCaseOf returns the scheduler_perf test case a (sub)test name belongs to:
// "BenchmarkPerfScheduling/HamiExtenderSlice/500Nodes_1000Pods" -> "HamiExtenderSlice".
func testCaseOf(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// nodesCreated is scheduler_perf's node-update hook (perf.NodeUpdateFn), called after each
// createNodes op with every node; each workload of config/performance-config.yaml has one. By
// test case it adds what hami-go's node components would write, then (extender mode) starts the
// extender, so the measured pods find everything in place:
//   - HamiExtender*: each node's inventory annotation and Lease hami-go-<node>, written with the
//     device plugin's own writers, the Leases renewed as the device plugin does, and the extender;
//     HamiExtenderMixedChurn also claims every bound pod's plan as Allocate would
//     (claimAsAllocated);
//   - HamiPluginSlice: the inventories and Leases as for the extender; the extender is the
//     HamiGo plugin's, inside the scheduler, whose cache the hook waits to hold every node;
//   - DRAWholeGPU, HamiDRA*: each node's ResourceSlice (pkg/dra's builder).
func (h *harness) nodesCreated(tCtx ktesting.TContext, _ *scheduler.Scheduler, _ *perf.Workload, nodes *v1.NodeList) error {
	name := tCtx.Name()
	switch tc := testCaseOf(name); {
	case strings.HasPrefix(tc, "HamiExtender"):
		if err := startExtenderMode(tCtx, name, nodes.Items, h.outDir, tc == "HamiExtenderMixedChurn"); err != nil {
			return fmt.Errorf("extender mode: %w", err)
		}
		h.mu.Lock()
		h.extenders++
		h.mu.Unlock()
	case tc == "HamiPluginSlice":
		if err := startNodeAgents(tCtx, nodes.Items); err != nil {
			return fmt.Errorf("plugin mode: %w", err)
		}
		p := h.plugin()
		if p == nil {
			return fmt.Errorf("plugin mode: the scheduler built no %s plugin (%s, registry)", schedplugin.Name, "config/scheduler-plugin.yaml")
		}
		return waitInventories(tCtx, p.Extender(), nodes.Items)
	case tc == "DRAWholeGPU", strings.HasPrefix(tc, "HamiDRA"):
		if err := publishSlices(tCtx, nodes.Items, tc == "DRAWholeGPU"); err != nil {
			return fmt.Errorf("ResourceSlices: %w", err)
		}
		h.mu.Lock()
		h.slices++
		h.mu.Unlock()
	}
	return nil
}

// nodeGPUs returns the GPUs of the i-th node (UUIDs unique per node and index).
func nodeGPUs(i int) []device.GPU {
	gpus := make([]device.GPU, 0, gpusPerNode)
	for g := 0; g < gpusPerNode; g++ {
		gpus = append(gpus, device.GPU{
			UUID:  fmt.Sprintf("GPU-5c000000-%04x-4000-8000-%012x", i, g),
			Index: g, Model: gpuModel, MemoryMiB: gpuMiB, NUMANode: g / 4, Healthy: true,
			PCIBusID: fmt.Sprintf("00000000:%02x:00.0", 0x10+g),
		})
	}
	return gpus
}

// hamiDevices returns what hami-go's DRA driver publishes for node i (dra.Devices, the driver's
// builder: one device per GPU, allowMultipleAllocations, memory/cores/sharers capacities).
func hamiDevices(i int) []resourceapi.Device {
	facts := device.GPUFacts{ComputeCapability: "9.0", Architecture: "Hopper", DriverVersion: "550.54.15", CUDADriverVersion: "12.4"}
	infos := make([]dra.GPUInfo, 0, gpusPerNode)
	for _, g := range nodeGPUs(i) {
		infos = append(infos, dra.GPUInfo{GPU: g, Facts: facts})
	}
	return dra.Devices(infos, dra.SliceConfig{SplitCount: splitCount, MemoryScaling: 1})
}

// wholeDevices returns the native baseline's devices for node i: the same devices and
// attributes without allowMultipleAllocations and capacities, as a driver that hands out whole
// GPUs publishes them (each device goes to one claim).
func wholeDevices(i int) []resourceapi.Device {
	devs := hamiDevices(i)
	for j := range devs {
		devs[j].AllowMultipleAllocations = nil
		devs[j].Capacity = nil
	}
	return devs
}

// publishSlices creates one ResourceSlice per node, pool = node name (the driver's pool,
// dra.Driver.Resources), with hami-go's devices or (whole) the baseline's.
func publishSlices(tCtx ktesting.TContext, nodes []v1.Node, whole bool) error {
	cs := tCtx.Client()
	return parallel(tCtx, len(nodes), func(ctx context.Context, i int) error {
		node := nodes[i].Name
		devs := hamiDevices(i)
		if whole {
			devs = wholeDevices(i)
		}
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draapi.DriverName},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   draapi.DriverName,
				Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				NodeName: &node,
				Devices:  devs,
			},
		}
		_, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		return err
	})
}

// parallel runs f(ctx, 0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
