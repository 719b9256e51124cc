package ledger

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// The ledger on its own, without the device plugin's server: a pod placed on the node claims its
// plan for its container, Plan and ClaimedRecord report it, and the claim is queued for writing.
func TestLedgerClaimAndPlan(t *testing.T) {
	var dirty []string
	l := New(Config{
		Node: "node-1", Names: device.DefaultResourceNames(),
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
	if a, ok := l.Plan(p.UID); !ok || len(a.Containers) != 1 || a.Containers[0].Devices[0].UUID != "GPU-A" {
		t.Fatalf("Plan = %+v, %v; want the planned container on GPU-A", a, ok)
	}
	if rec, ok := l.ClaimedRecord(p.UID); !ok || len(rec.Containers) != 0 {
		t.Fatalf("ClaimedRecord before the claim = %+v, %v; want none", rec, ok)
	}
	c, planned, err := l.ClaimPlanned(p.UID, "main")
	if err != nil || !planned || c.Pod != device.RefOf(p) || c.Container.Devices[0].UUID != "GPU-A" || c.Container.Devices[0].MemoryMiB != 1000 {
		t.Fatalf("ClaimPlanned = %+v, %v, %v; want 1000 MiB of GPU-A", c, planned, err)
	}
	if rec, ok := l.ClaimedRecord(p.UID); !ok || len(rec.Containers) != 1 || rec.Containers[0].Devices[0].UUID != "GPU-A" {
		t.Fatalf("ClaimedRecord after the claim = %+v, %v; want main on GPU-A", rec, ok)
	}
	if len(dirty) != 1 || dirty[0] != "ns/p" {
		t.Fatalf("queued for writing: %v, want [ns/p]", dirty)
	}
	if _, ok := l.Plan("no-such-uid"); ok {
		t.Fatal("Plan of an unknown pod is ok")
	}
}

// Holders (what a device plugin leaving for a mode switch drains) are the pods the ledger
// charges: placed, running or terminating, until they finish or are gone.
func TestLedgerHolders(t *testing.T) {
	l := New(Config{Node: "node-1", Names: device.DefaultResourceNames(), GPUMemory: func(string) (int64, bool) { return 24576, true }})
	enc, err := device.EncodeAllocation(device.Allocation{Node: "node-1", Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-A", MemoryMiB: 1000}}}}})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		p := podtest.Pending("ns", name, podtest.GPU("main", 1, "1000", 0))
		p.UID = types.UID(name)
		p.Spec.NodeName = "node-1"
		p.Annotations[device.AnnoPlanned] = enc
		return p
	}
	b, a, cpu := pod("b"), pod("a"), podtest.Pending("ns", "cpu")
	for _, p := range []*corev1.Pod{b, a, cpu} {
		l.UpsertPod(p)
	}
	if got := strings.Join(l.Holders(), " "); got != "ns/a ns/b" {
		t.Fatalf("Holders = %q, want ns/a ns/b", got)
	}
	now := metav1.Now()
	a.DeletionTimestamp = &now
	l.UpsertPod(a)
	if got := strings.Join(l.Holders(), " "); got != "ns/a ns/b" {
		t.Errorf("a terminating: Holders = %q, want it still held", got)
	}
	a.Status.Phase = corev1.PodSucceeded
	l.UpsertPod(a)
	l.DeletePod(b.UID)
	if got := l.Holders(); len(got) != 0 {
		t.Errorf("a finished, b gone: Holders = %q, want none", got)
	}
}
