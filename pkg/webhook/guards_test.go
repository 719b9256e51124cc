package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func withEnv(c corev1.Container, kv ...string) corev1.Container {
	for i := 0; i+1 < len(kv); i += 2 {
		c.Env = append(c.Env, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return c
}

// case C37: a container of any kind, GPU or not, that sets a protected variable is refused, and
// the message names the container and the variable.
func TestProtectedEnvRefused(t *testing.T) {
	h, _, m := testHandlers(nil)
	gpu := ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"C37 GPU container widens its memory limit", newPod(withEnv(gpu, "CUDA_DEVICE_MEMORY_LIMIT_0", "81920m")),
			"spec.containers[main].env[CUDA_DEVICE_MEMORY_LIMIT_0]: a container may not set CUDA_DEVICE_MEMORY_LIMIT_0 itself"},
		{"C37 non-GPU container names GPUs for NVIDIA's runtime", newPod(withEnv(ctr("cpu"), "NVIDIA_VISIBLE_DEVICES", "all")),
			"spec.containers[cpu].env[NVIDIA_VISIBLE_DEVICES]"},
		{"C37 GPU init container widens its memory limit", func() *corev1.Pod {
			p := newPod(ctr("main"))
			p.Spec.InitContainers = []corev1.Container{withEnv(ctr("init", "nvidia.com/gpu", "1"), "CUDA_DEVICE_MEMORY_LIMIT_0", "81920m")}
			return p
		}(), "spec.initContainers[init].env[CUDA_DEVICE_MEMORY_LIMIT_0]: a container may not set CUDA_DEVICE_MEMORY_LIMIT_0 itself; hami-go's device plugin sets it"},
		{"C37 MPS limit", newPod(withEnv(gpu, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")), "env[CUDA_MPS_ACTIVE_THREAD_PERCENTAGE]"},
		{"C37 hami-go's own", newPod(withEnv(gpu, "HAMI_GO_GPU_MEMORY_MIB", "81920")), "env[HAMI_GO_GPU_MEMORY_MIB]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, h, admissionv1.Create, "team-a", tc.pod)
			if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, tc.want) {
				t.Fatalf("allowed=%v message %q, want a denial containing %q", r.resp.Allowed, r.resp.Result.Message, tc.want)
			}
		})
	}
	if got := counter(t, m, "pods", resultDenied); got != 5 {
		t.Errorf("denied counter = %v, want 5", got)
	}
	// Unprotected env is fine, GPU pod or not.
	for _, p := range []*corev1.Pod{newPod(withEnv(ctr("cpu"), "PATH", "/bin", "CUDA_HOME", "/usr/local/cuda")), newPod(withEnv(gpu, "NVIDIA_DRIVER_CAPABILITIES", "compute"))} {
		if r := run(t, h, admissionv1.Create, "team-a", p); !r.resp.Allowed {
			t.Errorf("denied: %s", r.resp.Result.Message)
		}
	}
}

// case C54 (issue 36 item 9): a pod or container without GPUs is left alone (only a
// NVIDIA_VISIBLE_DEVICES naming GPUs is refused, above), and a GPU container may keep its own
// LD_PRELOAD and narrow its devices to none; naming devices is refused, in DRA mode with DRA's
// mechanism in the message.
func TestC54EnvOfPodsWithoutGPUs(t *testing.T) {
	h, _, _ := testHandlers(nil)
	gpu := ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")
	jemalloc := "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
	initPre := newPod(gpu)
	initPre.Spec.InitContainers = []corev1.Container{withEnv(ctr("init"), "LD_PRELOAD", "", "CUDA_DEVICE_MEMORY_LIMIT_0", "5m")}
	for name, p := range map[string]*corev1.Pod{
		"no GPU: LD_PRELOAD":                  newPod(withEnv(ctr("cpu"), "LD_PRELOAD", jemalloc)),
		"no GPU: CUDA_VISIBLE_DEVICES=-1":     newPod(withEnv(ctr("cpu"), "CUDA_VISIBLE_DEVICES", "-1")),
		"no GPU: NVIDIA_VISIBLE_DEVICES=none": newPod(withEnv(ctr("cpu"), "NVIDIA_VISIBLE_DEVICES", "none")),
		"no GPU: HAMI_GO_ and CUDA_MPS_":      newPod(withEnv(ctr("cpu"), "HAMI_GO_GPU_MODEL", "x", "CUDA_MPS_PIPE_DIRECTORY", "/tmp")),
		"GPU pod, non-GPU init container":     initPre,
		"GPU: own LD_PRELOAD":                 newPod(withEnv(gpu, "LD_PRELOAD", jemalloc)),
		"GPU: CUDA_VISIBLE_DEVICES=-1":        newPod(withEnv(gpu, "CUDA_VISIBLE_DEVICES", "-1")),
		"GPU: NVIDIA_VISIBLE_DEVICES=void":    newPod(withEnv(gpu, "NVIDIA_VISIBLE_DEVICES", "void")),
	} {
		if r := run(t, h, admissionv1.Create, "team-a", p); !r.resp.Allowed {
			t.Errorf("%s: denied: %s", name, r.resp.Result.Message)
		}
	}
	r := run(t, h, admissionv1.Create, "team-a", newPod(withEnv(gpu, "CUDA_VISIBLE_DEVICES", "1")))
	if want := "spec.containers[main].env[CUDA_VISIBLE_DEVICES]: a container may not set CUDA_VISIBLE_DEVICES itself; hami-go's device plugin"; r.resp.Allowed || !strings.Contains(r.resp.Result.Message, want) {
		t.Errorf("GPU container naming devices: allowed=%v %q, want %q", r.resp.Allowed, r.resp.Result.Message, want)
	}
	dra := &PodHandler{cfg: h.cfg}
	dra.cfg.Mode = ModeDRA
	err := dra.protectedEnvError(&newPod(withEnv(gpu, "CUDA_DEVICE_MEMORY_LIMIT_0", "81920m")).Spec)
	if err == nil || !strings.Contains(err.Error(), "hami-go's DRA driver sets it through the GPU claim's CDI spec") || strings.Contains(err.Error(), "device plugin") {
		t.Errorf("DRA mode: %v", err)
	}
	claim := withEnv(ctr("claims"), "CUDA_VISIBLE_DEVICES", "0")
	claim.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	if err := dra.protectedEnvError(&newPod(claim).Spec); err == nil {
		t.Error("a container with a resource claim naming devices was let through")
	}
}

// case C37: `kubectl debug` adds ephemeral containers by an UPDATE of pods/ephemeralcontainers;
// a new one with protected env is refused, old ones are not looked at again.
func TestEphemeralContainerEnv(t *testing.T) {
	h, _, _ := testHandlers(nil)
	eph := func(name string, kv ...string) corev1.EphemeralContainer {
		c := withEnv(corev1.Container{Name: name, Image: "busybox"}, kv...)
		return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: c.Name, Image: c.Image, Env: c.Env}}
	}
	old := newPod(ctr("main", "nvidia.com/gpu", "1"))
	old.Spec.EphemeralContainers = []corev1.EphemeralContainer{eph("legacy", "CUDA_VISIBLE_DEVICES", "0")} // admitted before the guard
	review := func(newPod *corev1.Pod) admission.Response {
		raw, _ := json.Marshal(newPod)
		oldRaw, _ := json.Marshal(old)
		return h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "u", Operation: admissionv1.Update, SubResource: SubresourceEphemeral, Namespace: "team-a",
			Object: runtime.RawExtension{Raw: raw}, OldObject: runtime.RawExtension{Raw: oldRaw},
		}})
	}
	bad := old.DeepCopy()
	bad.Spec.EphemeralContainers = append(bad.Spec.EphemeralContainers, eph("debugger", "NVIDIA_VISIBLE_DEVICES", "all")) // it gets no GPU: only naming GPUs is refused (C54)
	if resp := review(bad); resp.Allowed || !strings.Contains(resp.Result.Message, "spec.ephemeralContainers[debugger].env[NVIDIA_VISIBLE_DEVICES]") {
		t.Fatalf("allowed=%v %q, want a denial naming the ephemeral container and the variable", resp.Allowed, resp.Result.Message)
	}
	good := old.DeepCopy()
	good.Spec.EphemeralContainers = append(good.Spec.EphemeralContainers, eph("debugger", "TERM", "xterm"))
	if resp := review(good); !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("allowed=%v patches=%v %q, want allowed untouched", resp.Allowed, resp.Patches, resp.Result.Message)
	}
}

// case C39: slice resources written as annotations are refused by default, naming annotation and
// value and saying where they belong; with ResourceAnnotations=warn the pod is admitted (and
// mutated as before) with the same text as a warning.
func TestResourceAnnotations(t *testing.T) {
	pod := func() *corev1.Pod {
		p := newPod(ctr("main", "nvidia.com/gpu", "1"))
		p.Annotations = map[string]string{"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30", "nvidia.com/use-gputype": "H100"}
		return p
	}
	h, _, _ := testHandlers(nil)
	r := run(t, h, admissionv1.Create, "team-a", pod())
	for _, want := range []string{
		`metadata.annotations[nvidia.com/gpucores]: "30" is a GPU resource, which hami-go reads only from a container's resources.limits`,
		`metadata.annotations[nvidia.com/gpumem]: "3000" is a GPU resource`, "resources.limits, e.g. `nvidia.com/gpumem: \"3000\"`",
	} {
		if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, want) {
			t.Fatalf("allowed=%v %q, want a denial containing %q", r.resp.Allowed, r.resp.Result.Message, want)
		}
	}
	// Configured names count, the defaults then do not.
	hc, _, _ := testHandlers(func(c *Config) { c.Names.Memory = "example.com/vmem" })
	p := pod()
	p.Annotations = map[string]string{"example.com/vmem": "2Gi"}
	if r := run(t, hc, admissionv1.Create, "team-a", p); r.resp.Allowed || !strings.Contains(r.resp.Result.Message, "metadata.annotations[example.com/vmem]: \"2Gi\"") {
		t.Errorf("configured name: allowed=%v %q", r.resp.Allowed, r.resp.Result.Message)
	}
	// Non-GPU pod too: the annotation means the author wanted a slice.
	p = newPod(ctr("cpu"))
	p.Annotations = map[string]string{"nvidia.com/gpumem-percentage": "50"}
	if r := run(t, h, admissionv1.Create, "team-a", p); r.resp.Allowed {
		t.Errorf("non-GPU pod with a gpumem-percentage annotation admitted")
	}

	hw, _, _ := testHandlers(func(c *Config) { c.ResourceAnnotations = AnnotationWarn })
	r = run(t, hw, admissionv1.Create, "team-a", pod())
	if !r.resp.Allowed || len(r.resp.Patches) == 0 {
		t.Fatalf("warn: allowed=%v patches=%d %q, want the usual mutation", r.resp.Allowed, len(r.resp.Patches), r.resp.Result.Message)
	}
	if len(r.resp.Warnings) != 2 || !strings.HasPrefix(r.resp.Warnings[0], "metadata.annotations[nvidia.com/gpucores]: \"30\"") ||
		!strings.HasPrefix(r.resp.Warnings[1], "metadata.annotations[nvidia.com/gpumem]: \"3000\"") {
		t.Fatalf("warn: warnings %q", r.resp.Warnings)
	}
	if got := r.pod(t).Spec.SchedulerName; got != "hami-go-scheduler" {
		t.Errorf("warn: schedulerName %q", got)
	}
}

func TestConfigResourceAnnotations(t *testing.T) {
	c := DefaultConfig()
	c.ResourceAnnotations = "ignore"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `resource annotations: "ignore" is not deny or warn`) {
		t.Fatalf("err = %v", err)
	}
}
