package dra

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

const testNode = "node-1"

var t0 = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)

// fakeBackend is the fake fleet of profile on testNode through pkg/nvml (the production path
// of --backend=fake), and the fleet for fault injection.
func fakeBackend(t testing.TB, profile string) (device.Backend, *fake.Fleet) {
	t.Helper()
	p, err := fake.ParseProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fake.New(testNode, p)
	if err != nil {
		t.Fatal(err)
	}
	return nvml.NewBackend(f.Library(), nvml.Options{Name: "fake"}), f
}

func testConfig(dir string) Config {
	c := Defaults()
	c.NodeName = testNode
	c.CDIDir = filepath.Join(dir, "cdi")
	c.PluginDataDir = filepath.Join(dir, "plugin")
	c.HAMiCoreLibrary = ""
	c.PrepareWait = 0 // tests of the wait set it
	c.NRISocket = ""  // never register with a runtime on the test machine (a local cluster's containerd)
	return c
}

// newTestDriver builds a driver on a fake fleet with a fake clock; exists answers false for
// every host path unless listed.
func newTestDriver(t testing.TB, cfg Config, profile string, exists ...string) (*Driver, *testclock.FakeClock) {
	t.Helper()
	b, _ := fakeBackend(t, profile)
	clk := testclock.NewFakeClock(t0)
	ok := map[string]bool{}
	for _, p := range exists {
		ok[p] = true
	}
	d, err := New(cfg, b, Options{Clock: clk, FileExists: func(p string) bool {
		if ok[p] {
			return true
		}
		return fileExists(p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	return d, clk
}

// result is one allocation result of a test claim.
type result struct {
	request, device string
	memMiB, cores   int64
	sharers         int64
	noCapacity      bool
}

// testClaim is an allocated claim in namespace "default"; reqMem/reqCores are the capacity
// requests of its request "gpu" (0 = not requested).
func testClaim(name string, reqMemMiB, reqCores int64, results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
	}
	rq := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draapi.DriverName}}
	caps := map[resourceapi.QualifiedName]resource.Quantity{}
	if reqMemMiB > 0 {
		caps[draapi.CapacityMemory] = *resource.NewQuantity(reqMemMiB*MiB, resource.BinarySI)
	}
	if reqCores > 0 {
		caps[draapi.CapacityCores] = *resource.NewQuantity(reqCores, resource.DecimalSI)
	}
	if len(caps) > 0 {
		rq.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: caps}
	}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{rq}
	alloc := &resourceapi.AllocationResult{}
	for i, r := range results {
		if r.request == "" {
			r.request = "gpu"
		}
		if r.sharers == 0 {
			r.sharers = 1
		}
		share := types.UID("share-" + name + "-" + string(rune('a'+i)))
		res := resourceapi.DeviceRequestAllocationResult{Request: r.request, Driver: draapi.DriverName, Pool: testNode, Device: r.device, ShareID: &share}
		if !r.noCapacity {
			res.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
				draapi.CapacityMemory:  *resource.NewQuantity(r.memMiB*MiB, resource.BinarySI),
				draapi.CapacityCores:   *resource.NewQuantity(r.cores, resource.DecimalSI),
				draapi.CapacitySharers: *resource.NewQuantity(r.sharers, resource.DecimalSI),
			}
		}
		alloc.Devices.Results = append(alloc.Devices.Results, res)
	}
	c.Status.Allocation = alloc
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + name, UID: types.UID("pod-uid-" + name)}}
	return c
}

var bg = context.Background()

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func deviceGPU(uuid string, index int, memMiB int64, numa int) device.GPU {
	return device.GPU{UUID: uuid, Index: index, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: memMiB, NUMANode: numa, PCIBusID: "00000000:01:00.0", Healthy: true}
}
