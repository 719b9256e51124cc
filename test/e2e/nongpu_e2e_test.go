//go:build e2e

package e2e

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Issue 36 item 9 on the node, in either mode: a pod that asks for no GPU, in a namespace
// hami-go's webhook serves, with what CPU-only variants of GPU images set (a preload of its
// own, CUDA_VISIBLE_DEVICES=-1, NVIDIA_VISIBLE_DEVICES=none: the NVIDIA runtime's way to ask for
// the driver and no GPU), is admitted as written (spec and annotations unchanged), runs, keeps
// its env, and sees no GPU through CUDA. On the simulated GPU node NVIDIA's runtime in cdi mode
// resolves NVIDIA_VISIBLE_DEVICES=none as the CDI device nvidia.com/gpu=none, which the node's
// toolkit spec has (hack/cluster/gpunode.sh); without it the pod would not start, with or
// without hami-go (docs/runtimes.md; case C64).
func TestNonGPUPodRunsUnchanged(t *testing.T) {
	c := NewCluster(t)
	ns := e2eNamespace(t, c)
	const preload = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
	p := probePod(ns, "cpu-only", gpuLimits{})
	p.Annotations = map[string]string{"example.com/note": "cpu variant"}
	p.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "LD_PRELOAD", Value: preload},
		{Name: "CUDA_VISIBLE_DEVICES", Value: "-1"},
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "none"},
	}
	got := c.CreatePod(t, p)
	if !reflect.DeepEqual(got.Spec.Containers[0].Env, p.Spec.Containers[0].Env) || !reflect.DeepEqual(got.Annotations, p.Annotations) ||
		len(got.Spec.Containers[0].Resources.Limits) != 0 || len(got.Spec.Containers[0].Resources.Claims) != 0 || len(got.Spec.ResourceClaims) != 0 {
		t.Errorf("admission changed a pod without GPUs:\nenv %v\nannotations %v\nlimits %v claims %v %v",
			got.Spec.Containers[0].Env, got.Annotations, got.Spec.Containers[0].Resources.Limits, got.Spec.Containers[0].Resources.Claims, got.Spec.ResourceClaims)
	}
	c.WaitForRunning(t, ns, "cpu-only", 2*time.Minute)
	probe, env := c.probeOf(t, ns, "cpu-only")
	// envdump prints CUDA_* and NVIDIA_*; cudaprobe's env holds LD_PRELOAD.
	t.Logf("env LD_PRELOAD=%q CUDA_VISIBLE_DEVICES=%q NVIDIA_VISIBLE_DEVICES=%q; cudaprobe %d GPUs (error %q)",
		probe.Env["LD_PRELOAD"], env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"], len(probe.Devices), probe.Error)
	if probe.Env["LD_PRELOAD"] != preload || env["CUDA_VISIBLE_DEVICES"] != "-1" {
		t.Errorf("the container's env: LD_PRELOAD=%q CUDA_VISIBLE_DEVICES=%q, want its own %q and -1", probe.Env["LD_PRELOAD"], env["CUDA_VISIBLE_DEVICES"], preload)
	}
	// NVIDIA's toolkit spec sets NVIDIA_VISIBLE_DEVICES=void with the none device: both name none.
	if v := env["NVIDIA_VISIBLE_DEVICES"]; v != "none" && v != "void" {
		t.Errorf("the container's NVIDIA_VISIBLE_DEVICES=%q, want none (or the runtime's void)", v)
	}
	if len(probe.Devices) != 0 {
		t.Errorf("a pod without GPUs sees %d GPUs through CUDA: %+v", len(probe.Devices), probe.Devices)
	}
}
