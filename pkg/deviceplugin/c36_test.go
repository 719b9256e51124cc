package deviceplugin

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C36: a planned record that grants more than the pod's own limits ask (memory, cores, a
// GPU the node lacks, a GPU twice, another kind) is never served: Allocate is refused with a
// reason naming the field, and the pod gets a Warning Event saying so. The exact plan is served.
func TestAllocateC36PlanBeyondRequestRefused(t *testing.T) {
	forge := map[string]func(a *device.Allocation){
		"memory": func(a *device.Allocation) { a.Containers[0].Devices[0].MemoryMiB = 81920 },
		"cores":  func(a *device.Allocation) { a.Containers[0].Devices[0].CoresPercent = 100 },
		"no cores limit": func(a *device.Allocation) {
			a.Containers[0].Devices[0].CoresPercent = 0
		},
		"foreign GPU": func(a *device.Allocation) { a.Containers[0].Devices[0].UUID = "GPU-Z" },
		"kind":        func(a *device.Allocation) { a.Containers[0].Kind = device.KindSidecar },
	}
	want := map[string]string{
		"memory":         "allocation.containers[0].devices[0].memoryMiB: 81920, but container \"c\" asks for 1000 MiB",
		"cores":          "allocation.containers[0].devices[0].coresPercent: 100, but container \"c\" asks for 30%",
		"no cores limit": "coresPercent: 0, but container \"c\" asks for 30%",
		"foreign GPU":    "uuid: \"GPU-Z\" is not a GPU of this node",
		"kind":           "kind: \"sidecar\", but container \"c\" is \"app\"",
	}
	for name, f := range forge {
		t.Run(name, func(t *testing.T) {
			p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
			rec := record.NewFakeRecorder(10)
			p.opts.Recorder = rec
			pod := testPod("tenant", t0, testNode, ctr{name: "c", mem: 1000, cores: 30, gpus: []string{"GPU-A"}})
			plan, err := device.DecodeAllocation(pod.Annotations[device.AnnoPlanned])
			if err != nil {
				t.Fatal(err)
			}
			f(&plan)
			pod.Annotations[device.AnnoPlanned], _ = device.EncodeAllocation(plan)
			p.Ledger().UpsertPod(pod)
			_, err = alloc(t, p, "GPU-A::0")
			if err == nil {
				t.Fatal("a plan beyond the pod's request was served")
			}
			if !strings.Contains(err.Error(), "does not match the pod's own request") || !strings.Contains(err.Error(), want[name]) {
				t.Fatalf("refusal = %q, want it to contain %q", err, want[name])
			}
			select {
			case ev := <-rec.Events:
				if !strings.Contains(ev, EventReasonAllocateRefused) || !strings.Contains(ev, want[name]) {
					t.Fatalf("event = %q", ev)
				}
			default:
				t.Fatal("no Event on the pod")
			}
		})
	}
	// The exact plan, and a percentage plan computed on the GPU's own memory, are served.
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	p.Ledger().UpsertPod(testPod("ok", t0, testNode, ctr{name: "c", mem: 1000, cores: 30, gpus: []string{"GPU-A"}}))
	if r := mustAlloc(t, p, "GPU-A::0"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("exact plan served %v", r.Envs)
	}
	p.Ledger().UpsertPod(testPod("pct", t0, testNode, ctr{name: "c", pct: 25, gpus: []string{"GPU-B", "GPU-A"}, memOn: map[string]int64{"GPU-A": 20390, "GPU-B": 20390}}))
	if r := mustAlloc(t, p, "GPU-A::1", "GPU-B::1"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "20390m" {
		t.Fatalf("percentage plan served %v", r.Envs)
	}
}

// case C36: a claimed record on the pod that differs from what the device plugin handed out (a
// tenant lowered its memory after Allocate, or removed it) is rewritten by the plugin.
func TestPodSyncC36ReassertsClaimedRecord(t *testing.T) {
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 20000, gpus: []string{"GPU-A"}})
	client := fake.NewClientset(a)
	pr := &fakePodResources{}
	pr.set()
	p, _, ctx := startPodSync(t, client, pr)
	waitFor(t, "the informer to deliver a", func() bool { _, ok := p.Ledger().ClaimedRecord(a.UID); return ok })
	mustAlloc(t, p, "GPU-A::0")
	claimed := func() (string, bool) {
		got, err := client.CoreV1().Pods("default").Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := got.Annotations[device.AnnoClaimed]
		return v, ok
	}
	waitFor(t, "a's claimed record", func() bool { v, _ := claimed(); return strings.Contains(v, `"sliceIDs":["GPU-A::0"]`) })
	own, _ := claimed()
	lowered := strings.Replace(own, `"memoryMiB":20000`, `"memoryMiB":1`, 1)
	if lowered == own {
		t.Fatalf("record %s has no memoryMiB 20000", own)
	}
	patch := func(v *string) {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{device.AnnoClaimed: v}}})
		if _, err := client.CoreV1().Pods("default").Patch(ctx, "a", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(&lowered) // a tenant lowers what the extender would charge
	waitFor(t, "the plugin to restore its record after a change", func() bool { v, _ := claimed(); return v == own })
	patch(nil) // a tenant removes it
	waitFor(t, "the plugin to restore its record after a removal", func() bool { v, ok := claimed(); return ok && v == own })
}
