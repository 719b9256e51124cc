package extender

import (
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C36: the extender never charges a pod less than its own request. Rebuilt from the API
// (restart), a claimed record a tenant lowered to 1 MiB and 0% cores is charged at the pod's
// 20000 MiB; a live edit lowering the record of a booked pod changes nothing either; a record
// whose containers are not the pod's is not charged at all.
func TestRebuildC36ChargeNeverBelowRequest(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 10)
	objs, _ := setupNodes(t, inv)
	g0, g1 := inv.GPUs[0].UUID, inv.GPUs[1].UUID
	lowered := boundPod(t, "a", "lowered", "node-1", g0, 20000, true)
	lowered.Annotations[device.AnnoClaimed] = strings.Replace(lowered.Annotations[device.AnnoClaimed], `"memoryMiB":20000`, `"memoryMiB":1`, 1)
	foreign := boundPod(t, "a", "foreign", "node-1", g1, 5000, false)
	foreign.Annotations[device.AnnoPlanned] = strings.Replace(foreign.Annotations[device.AnnoPlanned], `"name":"main"`, `"name":"other"`, 1)
	objs = append(objs, lowered, foreign)
	e := newEnv(t, nil, objs...)
	if u0, u1 := gpuUse(e.ext.cache, "node-1", 0), gpuUse(e.ext.cache, "node-1", 1); u0.MemoryMiB != 20000 || u0.Sharers != 1 || u1.MemoryMiB != 0 || u1.Sharers != 0 {
		t.Fatalf("rebuilt usage GPU0 %+v GPU1 %+v; want 20000 MiB/1 sharer and nothing", u0, u1)
	}
	if _, st, _ := e.ext.cache.PodState(device.RefOf(lowered)); st != "claimed" {
		t.Fatalf("lowered pod stage %q, want claimed", st)
	}

	// Live: a booked, claimed pod whose record a tenant lowers afterwards.
	live := boundPod(t, "a", "live", "node-1", g1, 4000, true)
	e.create(live)
	eventually(t, "live booked", func() bool { return gpuUse(e.ext.cache, "node-1", 1).MemoryMiB == 4000 })
	p := e.getPod("a", "live")
	p.Annotations[device.AnnoClaimed] = strings.Replace(p.Annotations[device.AnnoClaimed], `"memoryMiB":4000`, `"memoryMiB":10`, 1)
	p.Annotations[device.AnnoPlanned] = p.Annotations[device.AnnoClaimed]
	e.updatePod(p)
	// Informer events arrive in order: once a later pod is charged, the edit has been handled.
	e.create(boundPod(t, "a", "marker", "node-1", g0, 100, true))
	eventually(t, "marker booked", func() bool { return gpuUse(e.ext.cache, "node-1", 0).MemoryMiB == 20100 })
	if u1 := gpuUse(e.ext.cache, "node-1", 1); u1.MemoryMiB != 4000 {
		t.Fatalf("after lowering the record GPU1 is charged %d MiB, want 4000", u1.MemoryMiB)
	}
}
