package webhook

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/ray"
)

// kubeRayPod is a pod as KubeRay v1.5 creates it for a group (pod.go BuildPod): label
// ray.io/node-type, container 0 with command /bin/bash -c -- and args ["ulimit -n 65536; <line>"],
// and the same line in KUBERAY_GEN_RAY_START_CMD.
func kubeRayPod(nodeType, line string, c corev1.Container) *corev1.Pod {
	c.Name = "ray-" + nodeType
	c.Image = "rayproject/ray:2.52.0"
	c.Command = []string{"/bin/bash", "-c", "--"}
	c.Args = []string{"ulimit -n 65536; " + line}
	c.Env = []corev1.EnvVar{
		{Name: "RAY_CLUSTER_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['ray.io/cluster']"}}},
		{Name: ray.EnvGeneratedStartCmd, Value: line},
		{Name: "RAY_PORT", Value: "6379"},
	}
	p := newPod(c)
	p.Name = "raycluster-kuberay-" + nodeType + "-x7k2p"
	p.Labels = map[string]string{ray.LabelNodeType: nodeType, "ray.io/cluster": "raycluster-kuberay"}
	return p
}

const (
	workerLine = "ray start  --address=raycluster-kuberay-head-svc.default.svc.cluster.local:6379  --block  --dashboard-agent-listen-port=52365  --memory=4000000000  --metrics-export-port=8080  --num-cpus=2 "
	headLine   = "ray start --head  --block  --dashboard-agent-listen-port=52365  --dashboard-host=0.0.0.0  --metrics-export-port=8080  --num-cpus=1 "
	memFlag    = `--resources='{"gpu_memory_mib":'"${HAMI_GO_GPU_MEMORY_MIB:-0}"'}'`
	labelFlag  = `--labels=hami-go.io/accelerator-type=${HAMI_GO_GPU_MODEL:-unknown}`
)

func TestRayPodAdmission(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		wantArgs  string // args[0] after the patch
		paths     []string
		warn      string
		numGPUArg string
	}{
		{name: "C32a worker with 2 slices", pod: kubeRayPod("worker", workerLine, ctr("", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "8000")),
			wantArgs: "ulimit -n 65536; " + workerLine[:len(workerLine)-1] + " --num-gpus=2 " + memFlag + " " + labelFlag + " ",
			paths:    []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests", "replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value", "replace /spec/schedulerName"}},
		{name: "C32b gpumem 8000 with the count defaulted: 1, never 8000", pod: kubeRayPod("worker", workerLine, ctr("", "nvidia.com/gpumem", "8000")),
			wantArgs: "ulimit -n 65536; " + workerLine[:len(workerLine)-1] + " --num-gpus=1 " + memFlag + " " + labelFlag + " ",
			paths:    []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/limits/nvidia.com~1gpu", "add /spec/containers/0/resources/requests", "replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value", "replace /spec/schedulerName"}},
		{name: "C32c MIG resource: 1, not a hami-go pod otherwise", pod: kubeRayPod("worker", workerLine, ctr("", "nvidia.com/mig-1g.10gb", "1")),
			wantArgs: "ulimit -n 65536; " + workerLine[:len(workerLine)-1] + " --num-gpus=1 " + memFlag + " " + labelFlag + " ",
			paths:    []string{"replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value"}},
		{name: "C32d count and MIG: the list's first name decides", pod: kubeRayPod("worker", workerLine, ctr("", "nvidia.com/mig-2g.20gb", "3", "nvidia.com/gpu", "1")),
			wantArgs: "ulimit -n 65536; " + workerLine[:len(workerLine)-1] + " --num-gpus=1 " + memFlag + " " + labelFlag + " ",
			paths:    []string{"replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value", "replace /spec/schedulerName"}},
		{name: "C33 head without GPU gets --num-gpus=0 and no scheduler change", pod: kubeRayPod("head", headLine, ctr("", "cpu", "1")),
			wantArgs: "ulimit -n 65536; " + headLine[:len(headLine)-1] + " --num-gpus=0 ",
			paths:    []string{"replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value"}},
		{name: "C31 KubeRay line with the user's --num-gpus=1: kept", pod: kubeRayPod("worker", workerLine+" --num-gpus=1 ", ctr("", "nvidia.com/gpu", "2")),
			wantArgs: "ulimit -n 65536; " + workerLine + " --num-gpus=1 " + memFlag + " " + labelFlag + " ",
			paths:    []string{"replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value", "replace /spec/schedulerName"}},
		{name: "C31 user's fractional --num-gpus kept, with a warning", pod: kubeRayPod("worker", "ray start --num-gpus=0.5 --block", ctr("", "nvidia.com/gpu", "1")),
			wantArgs: "ulimit -n 65536; ray start --num-gpus=0.5 --block " + memFlag + " " + labelFlag,
			paths:    []string{"replace /spec/containers/0/args/0", "replace /spec/containers/0/env/1/value", "replace /spec/schedulerName"},
			warn:     "spec.containers[ray-worker]: ray start --num-gpus=0.5 is not a whole number of GPUs"},
		{name: "Ray pod without ray start: warned, not changed", pod: func() *corev1.Pod {
			p := kubeRayPod("worker", "python serve.py", ctr("", "nvidia.com/gpu", "1"))
			p.Spec.Containers[0].Env = nil
			return p
		}(), wantArgs: "ulimit -n 65536; python serve.py", paths: []string{"replace /spec/schedulerName"},
			warn: "spec.containers[ray-worker]: no `ray start` in its command or args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ph, _, _ := testHandlers(nil)
			r := run(t, ph, admissionv1.Create, "team-a", tc.pod)
			if !r.resp.Allowed {
				t.Fatalf("denied: %s", r.resp.Result.Message)
			}
			sort.Strings(r.paths)
			sort.Strings(tc.paths)
			if !reflect.DeepEqual(r.paths, tc.paths) {
				t.Fatalf("patch ops %q, want %q", r.paths, tc.paths)
			}
			p := r.pod(t)
			c := p.Spec.Containers[0]
			if c.Args[0] != tc.wantArgs {
				t.Fatalf("args[0]\n got  %q\n want %q", c.Args[0], tc.wantArgs)
			}
			if !reflect.DeepEqual(c.Command, []string{"/bin/bash", "-c", "--"}) {
				t.Fatalf("command changed: %q", c.Command)
			}
			if len(c.Env) > 1 && "ulimit -n 65536; "+c.Env[1].Value != c.Args[0] {
				t.Fatalf("%s %q does not match args[0] %q", ray.EnvGeneratedStartCmd, c.Env[1].Value, c.Args[0])
			}
			if tc.warn != "" && (len(r.resp.Warnings) != 1 || !strings.Contains(r.resp.Warnings[0], tc.warn)) {
				t.Fatalf("warnings %q, want %q", r.resp.Warnings, tc.warn)
			}
			if tc.warn == "" && len(r.resp.Warnings) > 0 {
				t.Fatalf("unexpected warnings %q", r.resp.Warnings)
			}
		})
	}
}

// TestRayStartBeforeAfter prints the `ray start` line of a KubeRay worker that asks for 1 slice
// of 8000 MiB, before and after the webhook, for the closing note.
func TestRayStartBeforeAfter(t *testing.T) {
	ph, _, _ := testHandlers(nil)
	// KubeRay v1.5 puts --num-gpus=1 into the line itself from the nvidia.com/gpu limit.
	before := workerLine + " --num-gpus=1 "
	pod := kubeRayPod("worker", before, withRequests(ctr("", "cpu", "2", "memory", "4G", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "8000")))
	r := run(t, ph, admissionv1.Create, "default", pod)
	after := r.pod(t).Spec.Containers[0].Args[0]
	t.Logf("before: %s", pod.Spec.Containers[0].Args[0])
	t.Logf("after:  %s", after)
	want := "ulimit -n 65536; " + before + memFlag + " " + labelFlag + " "
	if after != want {
		t.Fatalf("after = %q, want %q", after, want)
	}
	// The same worker written with only gpumem: 8000 (the webhook defaults the slice count).
	before = workerLine
	pod = kubeRayPod("worker", before, withRequests(ctr("", "cpu", "2", "memory", "4G", "nvidia.com/gpumem", "8000")))
	r = run(t, ph, admissionv1.Create, "default", pod)
	after = r.pod(t).Spec.Containers[0].Args[0]
	t.Logf("before (gpumem only): %s", pod.Spec.Containers[0].Args[0])
	t.Logf("after  (gpumem only): %s", after)
	if !strings.Contains(after, " --num-gpus=1 "+memFlag+" "+labelFlag) {
		t.Fatalf("after = %q", after)
	}
}
