package ledger

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// The ledger on its own, without the device plugin's server: a pod placed on the node is
// matched by an Allocate call, and Plan reports its effective plan with the kubelet's IDs.
func TestLedgerClaimAndPlan(t *testing.T) {
	var dirty []string
	l := New(Config{
		Node: "node-1", Names: device.DefaultResourceNames(), Clock: clocktesting.NewFakeClock(time.Unix(0, 0)),
		Dirty:     func(r device.PodRef) { dirty = append(dirty, r.String()) },
		GPUMemory: func(string) (int64, bool) { return 24576, true },
	})
	p := podtest.Pending("ns", "p", podtest.GPU("main", 1, "1000", 0))
	p.Spec.NodeName = "node-1"
	enc, err := device.EncodeAllocation(device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-A", MemoryMiB: 1000}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[device.AnnoPlanned] = enc
	l.UpsertPod(p)
	if a, ok := l.Plan(p.UID); !ok || len(a.Containers) != 1 || len(a.Containers[0].SliceIDs) != 0 {
		t.Fatalf("Plan before Allocate = %+v, %v; want the planned container, unclaimed", a, ok)
	}
	c, err := l.TryAllocate([]string{"GPU-A::3"})
	if err != nil || c.Pod != device.RefOf(p) || c.Container.Devices[0].UUID != "GPU-A" {
		t.Fatalf("TryAllocate = %+v, %v", c, err)
	}
	a, ok := l.Plan(p.UID)
	if !ok || len(a.Containers[0].SliceIDs) != 1 || a.Containers[0].SliceIDs[0] != "GPU-A::3" {
		t.Fatalf("Plan after Allocate = %+v, %v; want GPU-A::3 claimed", a, ok)
	}
	if len(dirty) != 1 || dirty[0] != "ns/p" {
		t.Fatalf("queued for writing: %v, want [ns/p]", dirty)
	}
	if _, ok := l.Plan("no-such-uid"); ok {
		t.Fatal("Plan of an unknown pod is ok")
	}
}
