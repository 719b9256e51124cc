package deviceplugin

import (
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/ledger"
)

// Interchangeable pods are matched in the order the plugin saw them placed (the order the
// kubelet's watch delivers them and the kubelet admits them), not by creation time: pod d was
// created after c but bound first, and the kubelet admits d first with slices matching neither
// plan. d gets its own slot, so Reconcile swaps nothing and no record is written twice.
func TestInterchangeableMatchedInSeenOrder(t *testing.T) {
	var dirty []string
	p, _ := newTestPluginDirty(t, testConfig(t.TempDir()), newTestBackend(3, 81559), func(r device.PodRef) { dirty = append(dirty, r.Name) })
	c := testPod("c", t0, testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	d := testPod("d", t0.Add(time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-B"}})
	p.Ledger().UpsertPod(d) // bound first
	p.Ledger().UpsertPod(c)
	p.Ledger().UpsertPod(d) // a later update keeps d's place

	if got := p.Ledger().Prefer([]string{"GPU-A::0", "GPU-B::0", "GPU-C::0"}, nil, 1); len(got) != 1 || got[0] != "GPU-B::0" {
		t.Fatalf("GetPreferredAllocation = %v, want d's planned GPU-B::0", got)
	}
	if r := mustAlloc(t, p, "GPU-C::0"); r.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-B" {
		t.Fatalf("first call got %v, want d's slot GPU-B", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
	if rd, _ := p.Ledger().ClaimedRecord(d.UID); len(rd.Containers) != 1 || rd.Containers[0].SliceIDs[0] != "GPU-C::0" {
		t.Fatalf("d's record %v, want the call's GPU-C::0", rd)
	}
	if changed := p.Ledger().Reconcile([]ledger.ObservedContainer{{Namespace: "default", Pod: "d", Container: "x", IDs: []string{"GPU-C::0"}}}); len(changed) != 0 {
		t.Fatalf("reconcile rewrote %v, want nothing (the claim was d's already)", changed)
	}
	if r := mustAlloc(t, p, "GPU-C::1"); r.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-A" {
		t.Fatalf("second call got %v, want c's slot GPU-A", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
	if len(dirty) != 2 || dirty[0] != "d" || dirty[1] != "c" {
		t.Fatalf("records written for %v, want d then c once each", dirty)
	}
}
