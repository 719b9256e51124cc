package deviceplugin

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ledger"
	"github.com/hami-go/hami-go/pkg/nri"
)

// case C52: under the cdi strategy the pending answer (what the kubelet caches and hands the
// runtime at every creation) sets NVIDIA_VISIBLE_DEVICES=void beside the empty marker, so a
// container the NRI plugin never saw reaches no GPU through the NVIDIA runtime; the plan sets
// the same value and tells the NRI plugin it is the answer's (Plan.Answer). Under envvar, whose
// plan names the GPUs in that variable, neither sets it.
func TestC52PendingAnswerIsVoidUnderCDI(t *testing.T) {
	for _, strategy := range []string{StrategyCDI, StrategyEnvvar} {
		cfg := testConfig(t.TempDir())
		cfg.DeviceListStrategy = strategy
		r := responder{cfg: cfg, gpus: map[string]device.GPU{"GPU-A": {UUID: "GPU-A"}}, exists: func(string) bool { return false }}
		pending := r.pending().Envs
		plan := r.build(claimOf("GPU-A", 1000)).Env
		if strategy == StrategyCDI {
			if pending["NVIDIA_VISIBLE_DEVICES"] != "void" || pending[device.EnvGPUUUIDs] != "" || len(pending) != 2 {
				t.Errorf("cdi: pending answer %v; want the empty marker and NVIDIA_VISIBLE_DEVICES=void", pending)
			}
			if plan["NVIDIA_VISIBLE_DEVICES"] != "void" || plan[device.EnvGPUUUIDs] != "GPU-A" {
				t.Errorf("cdi: plan env %v; want NVIDIA_VISIBLE_DEVICES=void and the marker GPU-A", plan)
			}
			continue
		}
		if _, set := pending["NVIDIA_VISIBLE_DEVICES"]; set || plan["NVIDIA_VISIBLE_DEVICES"] != "GPU-A" {
			t.Errorf("envvar: pending %v, plan %v; want no NVIDIA_VISIBLE_DEVICES in the answer, GPU-A in the plan", pending, plan)
		}
	}
}

// case C52: the pod of a container found running without its plan is deleted at once (grace
// period 0: it runs without a limit until it is gone), after a Warning Event that says so.
func TestC52UnplannedPodDeletedWithGracePeriodZero(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81920))
	pod := testPod("planned", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(pod)
	client := fake.NewClientset(pod)
	rec := record.NewFakeRecorder(1)
	unplannedStopper{p: p, client: client, recorder: rec}.stop(context.Background(),
		nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "main"})
	var deletes int
	for _, a := range client.Actions() {
		d, ok := a.(k8stesting.DeleteActionImpl)
		if !ok {
			continue
		}
		deletes++
		if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 0 {
			t.Errorf("delete of %s with grace period %v; want 0", d.GetName(), g)
		}
	}
	if deletes != 1 {
		t.Errorf("%d deletes; want 1", deletes)
	}
	if e := <-rec.Events; !strings.Contains(e, "deleting the pod at once (grace period 0)") {
		t.Errorf("event %q; want it to say the pod is deleted at once", e)
	}
}

// claimOf is a claim of container "main" of pod default/p for mem MiB of the GPU uuid.
func claimOf(uuid string, mem int64) ledger.Claim {
	return ledger.Claim{Pod: device.PodRef{Namespace: "default", Name: "p", UID: "uid-p"},
		Container: device.ContainerAllocation{Name: "main", Devices: []device.DeviceGrant{{UUID: uuid, MemoryMiB: mem}}}}
}
