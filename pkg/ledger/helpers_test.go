package ledger

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// placedPod is pod ns/name asking one GPU of 1000 MiB, placed by the extender on node-1's gpu.
func placedPod(t *testing.T, name, gpu string) *corev1.Pod {
	t.Helper()
	p := podtest.Pending("ns", name, podtest.GPU("main", 1, "1000", 0))
	p.Spec.NodeName = "node-1"
	setRecord(t, p, device.AnnoPlanned, device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: gpu, MemoryMiB: 1000}}}}})
	return p
}

func setRecord(t *testing.T, p *corev1.Pod, key string, a device.Allocation) {
	t.Helper()
	enc, err := device.EncodeAllocation(a)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[key] = enc
}

func newTestLedger() *Ledger {
	return New(Config{Node: "node-1", Names: device.DefaultResourceNames(),
		GPUMemory: func(string) (int64, bool) { return 24576, true }})
}

// pairLedger is a ledger with two interchangeable pods: p planned GPU-A and q planned GPU-B.
func pairLedger(t *testing.T) (*Ledger, *corev1.Pod, *corev1.Pod) {
	t.Helper()
	l := newTestLedger()
	p, q := placedPod(t, "p", "GPU-A"), placedPod(t, "q", "GPU-B")
	l.UpsertPod(p)
	l.UpsertPod(q)
	return l, p, q
}

// usedGPU is the GPU a pod's claimed record grants (its only container's only device).
func usedGPU(t *testing.T, l *Ledger, p *corev1.Pod) string {
	t.Helper()
	rec, ok := l.ClaimedRecord(p.UID)
	if !ok || len(rec.Containers) != 1 || len(rec.Containers[0].Devices) != 1 {
		t.Fatalf("claimed record of %s = %+v, %v; want one container on one GPU", p.Name, rec, ok)
	}
	return rec.Containers[0].Devices[0].UUID
}
