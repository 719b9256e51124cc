package deviceplugin

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C36: a planned record that grants more than the pod's own limits ask (memory, cores, a
// GPU the node lacks, a GPU twice, another kind) is never served: the container is refused at
// creation with a reason naming the field (the kubelet shows it as the container's
// CreateContainerError in kubectl describe pod, and retries). The exact plan is served.
func TestAllocateC36PlanBeyondRequestRefused(t *testing.T) {
	tenant := ctr{name: "c", mem: 1000, cores: 30, gpus: []string{"GPU-A"}}
	tests := []struct {
		name  string
		pod   ctr                        // the pod's one container, its plan the extender's
		forge func(a *device.Allocation) // when set, rewrites the plan on the pod
		ids   []string                   // the kubelet's Allocate call
		// wantErr, when set, is the reason the refusal names; otherwise the container is served
		// with CUDA_DEVICE_MEMORY_LIMIT_0 = wantLimit.
		wantErr   string
		wantLimit string
	}{{
		name:    "memory",
		pod:     tenant,
		forge:   func(a *device.Allocation) { a.Containers[0].Devices[0].MemoryMiB = 81920 },
		ids:     []string{"GPU-A::0"},
		wantErr: "allocation.containers[0].devices[0].memoryMiB: 81920, but container \"c\" asks for 1000 MiB",
	}, {
		name:    "cores",
		pod:     tenant,
		forge:   func(a *device.Allocation) { a.Containers[0].Devices[0].CoresPercent = 100 },
		ids:     []string{"GPU-A::0"},
		wantErr: "allocation.containers[0].devices[0].coresPercent: 100, but container \"c\" asks for 30%",
	}, {
		name:    "no cores limit",
		pod:     tenant,
		forge:   func(a *device.Allocation) { a.Containers[0].Devices[0].CoresPercent = 0 },
		ids:     []string{"GPU-A::0"},
		wantErr: "coresPercent: 0, but container \"c\" asks for 30%",
	}, {
		name:    "foreign GPU",
		pod:     tenant,
		forge:   func(a *device.Allocation) { a.Containers[0].Devices[0].UUID = "GPU-Z" },
		ids:     []string{"GPU-A::0"},
		wantErr: "uuid: \"GPU-Z\" is not a GPU of this node",
	}, {
		name:    "kind",
		pod:     tenant,
		forge:   func(a *device.Allocation) { a.Containers[0].Kind = device.KindSidecar },
		ids:     []string{"GPU-A::0"},
		wantErr: "kind: \"sidecar\", but container \"c\" is \"app\"",
	}, {
		name:      "exact plan served",
		pod:       tenant,
		ids:       []string{"GPU-A::0"},
		wantLimit: "1000m",
	}, {
		// A percentage plan computed on the GPU's own memory.
		name:      "percentage plan served",
		pod:       ctr{name: "c", pct: 25, gpus: []string{"GPU-B", "GPU-A"}, memOn: map[string]int64{"GPU-A": 20390, "GPU-B": 20390}},
		ids:       []string{"GPU-A::1", "GPU-B::1"},
		wantLimit: "20390m",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
			pod := testPod("tenant", t0, testNode, tc.pod)
			if tc.forge != nil {
				plan, err := device.DecodeAllocation(pod.Annotations[device.AnnoPlanned])
				if err != nil {
					t.Fatal(err)
				}
				tc.forge(&plan)
				pod.Annotations[device.AnnoPlanned], _ = device.EncodeAllocation(plan)
			}
			p.Ledger().UpsertPod(pod)
			if tc.wantErr == "" {
				if r := mustCreate(t, p, pod, "c", tc.ids...); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != tc.wantLimit {
					t.Fatalf("plan served %v, want CUDA_DEVICE_MEMORY_LIMIT_0=%s", r.Envs, tc.wantLimit)
				}
				return
			}
			_, err := create(t, p, pod, "c", tc.ids...)
			if err == nil {
				t.Fatal("a plan beyond the pod's request was served")
			}
			if !strings.Contains(err.Error(), "does not match the pod's own request") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("refusal = %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// case C36: a claimed record on the pod that differs from what the device plugin handed out (a
// tenant lowered its memory after the claim, or removed it) is rewritten by the plugin.
func TestPodSyncC36ReassertsClaimedRecord(t *testing.T) {
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 20000, gpus: []string{"GPU-A"}})
	client := fake.NewClientset(a)
	p, _, ctx := startPodSync(t, client)
	waitFor(t, "the informer to deliver a", func() bool { _, ok := p.Ledger().ClaimedRecord(a.UID); return ok })
	mustCreate(t, p, a, "c", "GPU-A::0")
	claimed := func() (string, bool) {
		got, err := client.CoreV1().Pods("default").Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := got.Annotations[device.AnnoClaimed]
		return v, ok
	}
	waitFor(t, "a's claimed record", func() bool { v, _ := claimed(); return strings.Contains(v, `"uuid":"GPU-A"`) })
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
