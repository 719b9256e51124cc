package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuview"
)

var t0 = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)

// cluster returns the objects of a one-node cluster: 2 GPUs of 81920 MiB, split 10, Lease
// renewed 30 s before t0; pod a/w holds 20000 MiB / 25 percent of GPU-0; pod a/p (8000 MiB,
// resource names as given) is pending with a FailedScheduling event.
func cluster(t *testing.T, memResource string) []runtime.Object {
	t.Helper()
	inv := device.Inventory{Node: "n1", SplitCount: 10, MemoryScaling: 1}
	for i, u := range []string{"GPU-aaaa", "GPU-bbbb"} {
		inv.GPUs = append(inv.GPUs, device.GPU{UUID: u, Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Healthy: true})
	}
	invS, err := device.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := device.EncodeAllocation(device.Allocation{Node: "n1", Containers: []device.ContainerAllocation{{
		Name: "ray-worker", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-aaaa", MemoryMiB: 20000, CoresPercent: 25}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	renew := metav1.NewMicroTime(t0.Add(-30 * time.Second))
	limits := func(mem string) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceName(memResource): resource.MustParse(mem)}
	}
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{device.AnnoInventory: invS}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "hami-go-n1"}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "w", UID: "uid-w", Annotations: map[string]string{device.AnnoClaimed: alloc}},
			Spec:       corev1.PodSpec{NodeName: "n1", SchedulerName: device.SchedulerName, Containers: []corev1.Container{{Name: "ray-worker", Resources: corev1.ResourceRequirements{Limits: limits("20000")}}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "uid-p"},
			Spec:       corev1.PodSpec{SchedulerName: device.SchedulerName, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: limits("70000")}}}},
			Status:     corev1.PodStatus{Phase: corev1.PodPending},
		},
		&corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "a", Name: "p.1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "a", Name: "p", UID: "uid-p"},
			Reason:         "FailedScheduling", Message: "0/1 nodes are available: 1 GPU memory.", LastTimestamp: metav1.NewTime(t0),
		},
	}
}

// run executes the plugin with args against a fake clientset (unit tests only) holding objs, at t0.
func run(t *testing.T, objs []runtime.Object, args ...string) (string, error) {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none")) // never the machine's own kubeconfig
	var out, errOut bytes.Buffer
	cmd := newRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, &deps{client: fake.NewClientset(objs...), clock: clocktesting.NewFakeClock(t0)})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestNodesTable: the default command and `nodes` print the GPU rows with the booked figures and
// the slice holder.
func TestNodesTable(t *testing.T) {
	for _, args := range [][]string{nil, {"nodes"}, {"nodes", "-o", "table"}} {
		out, err := run(t, cluster(t, "nvidia.com/gpumem"), args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{
			"NODE  STATUS  GPU  MODEL                  HEALTH   MEMORY(MiB)  CORES  SHARERS  SLICE\n",
			"n1    Ready   0    NVIDIA H100 80GB HBM3  Healthy  20000/81920  25%    1/10\n",
			"                                                   20000        25%             a/w [ray-worker]\n",
			"n1    Ready   1    NVIDIA H100 80GB HBM3  Healthy  0/81920      0%     0/10\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
	}
}

// TestNodesJSONAndYAML: -o json and -o yaml carry the documented schema with the same values.
func TestNodesJSONAndYAML(t *testing.T) {
	check := func(format string, v gpuview.View) {
		t.Helper()
		if v.APIVersion != "gpuview.hami-go.io/v1" || v.Kind != "GPUView" || len(v.Nodes) != 1 {
			t.Fatalf("%s: header %s %s, %d nodes", format, v.APIVersion, v.Kind, len(v.Nodes))
		}
		n := v.Nodes[0]
		g := n.GPUs[0]
		if n.Status != gpuview.StatusReady || n.SplitCount != 10 || g.BookedMiB != 20000 || g.BookedCoresPercent != 25 || g.Sharers != 1 || g.CapacityMiB != 81920 ||
			len(g.Slices) != 1 || g.Slices[0] != (gpuview.Slice{Namespace: "a", Pod: "w", Container: "ray-worker", Kind: "app", MemoryMiB: 20000, CoresPercent: 25, Source: "claimed"}) {
			t.Errorf("%s: %+v", format, n)
		}
	}
	out, err := run(t, cluster(t, "nvidia.com/gpumem"), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v gpuview.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	check("json", v)
	if !strings.Contains(out, `"bookedMiB": 20000`) || !strings.Contains(out, `"leaseRenewTime": "2026-12-01T04:59:30Z"`) {
		t.Errorf("json field names changed:\n%s", out)
	}
	out, err = run(t, cluster(t, "nvidia.com/gpumem"), "nodes", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	v = gpuview.View{}
	if err := yaml.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("yaml: %v\n%s", err, out)
	}
	check("yaml", v)
	if !strings.Contains(out, "bookedCoresPercent: 25\n") {
		t.Errorf("yaml field names changed:\n%s", out)
	}
}

// TestFlagErrors: a bad -o value and a bad config flag are errors that name the flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "wide"}, `--output: "wide" is not table, json or yaml`},
		{[]string{"--inventory-stale-after", "0s"}, "inventory-stale-after: 0s is not positive"},
		{[]string{"--resource-memory", "nvidia.com/gpu"}, `resource names count and memory are both "nvidia.com/gpu"`},
		{[]string{"why"}, "accepts 1 arg(s), received 0"},
		{[]string{"why", "nope", "-n", "a"}, `pods "nope" not found`},
	} {
		_, err := run(t, cluster(t, "nvidia.com/gpumem"), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestFlagsHaveEffect: --inventory-stale-after, --lease-namespace, --scheduler-name and the
// resource-name flags change the answer (each set as the extender's flag of the same name).
func TestFlagsHaveEffect(t *testing.T) {
	objs := cluster(t, "nvidia.com/gpumem")
	out, _ := run(t, objs, "-o", "json")
	if !strings.Contains(out, `"status": "Ready"`) {
		t.Fatalf("baseline not Ready:\n%s", out)
	}
	if out, _ := run(t, objs, "-o", "json", "--inventory-stale-after", "20s"); !strings.Contains(out, `"status": "Stale"`) {
		t.Errorf("--inventory-stale-after 20s (Lease 30s old): not Stale:\n%s", out)
	}
	if out, _ := run(t, objs, "-o", "json", "--lease-namespace", "elsewhere"); !strings.Contains(out, `"status": "NoHeartbeat"`) ||
		!strings.Contains(out, "Lease elsewhere/hami-go-n1 not found") {
		t.Errorf("--lease-namespace elsewhere: Lease still found:\n%s", out)
	}
	if out, _ := run(t, objs, "why", "p", "-n", "a", "--scheduler-name", "mine"); !strings.Contains(out, "scheduler hami-go-scheduler is not mine") {
		t.Errorf("--scheduler-name mine:\n%s", out)
	}
	custom := cluster(t, "example.com/vram")
	if out, _ := run(t, custom, "why", "p", "-n", "a"); !strings.Contains(out, `"c" (app): 1 GPU, 100% memory per GPU`) {
		// Default names: example.com/vram is not read, so the container books the whole GPU.
		t.Errorf("default resource names read example.com/vram:\n%s", out)
	}
	if out, _ := run(t, custom, "why", "p", "-n", "a", "--resource-memory", "example.com/vram"); !strings.Contains(out, `"c" (app): 1 GPU, 70000 MiB per GPU`) {
		t.Errorf("--resource-memory example.com/vram not read:\n%s", out)
	}
}

// TestWhy: a pending pod's request, each node's reason (the extender's words) and the last
// FailedScheduling event; a running pod's allocation.
func TestWhy(t *testing.T) {
	out, err := run(t, cluster(t, "nvidia.com/gpumem"), "why", "p", "--namespace", "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Pod a/p: Pending, scheduler hami-go-scheduler\n",
		"  fits on 1 node(s) now",
		`  "c" (app): 1 GPU, 70000 MiB per GPU` + "\n",
		"  fits: n1\n",
		"Last FailedScheduling (2026-12-01T05:00:00Z): 0/1 nodes are available: 1 GPU memory.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("why p lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, cluster(t, "nvidia.com/gpumem"), "why", "w", "-n", "a", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var e gpuview.Explanation
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != "GPUPodExplanation" || e.Node != "n1" || e.AllocationSource != "claimed" || e.Allocation == nil ||
		e.Allocation.Containers[0].Devices[0] != (device.DeviceGrant{UUID: "GPU-aaaa", MemoryMiB: 20000, CoresPercent: 25}) {
		t.Errorf("why w: %+v", e)
	}
}

// TestWhyFull: with GPU-0 and GPU-1 filled, the pending pod gets the extender's memory reason.
func TestWhyFull(t *testing.T) {
	objs := cluster(t, "nvidia.com/gpumem")
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "w" {
			a, _ := device.EncodeAllocation(device.Allocation{Node: "n1", Containers: []device.ContainerAllocation{{
				Name: "ray-worker", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-aaaa", MemoryMiB: 20000}, {UUID: "GPU-bbbb", MemoryMiB: 20000}},
			}}})
			p.Annotations[device.AnnoClaimed] = a
		}
	}
	out, err := run(t, objs, "why", "p", "-n", "a")
	if err != nil {
		t.Fatal(err)
	}
	want := `  n1: container "c" (1 GPU, 70000 MiB): GPU-0,1 61920 of 81920 MiB free` + "\n"
	if !strings.Contains(out, want) || !strings.Contains(out, "fits on no node now") {
		t.Errorf("why p lacks %q:\n%s", want, out)
	}
}
