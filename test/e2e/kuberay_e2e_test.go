//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// rayClusterGVR is KubeRay's RayCluster resource (ray.io/v1).
var rayClusterGVR = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}

// rayCluster is a RayCluster laid out like KubeRay v1.5's quick start (rayproject/ray:2.46.0,
// which the local cluster tags onto the workload image's `ray` stand-in): a head without GPU
// and one worker group of `workers` workers, each with nvidia.com/gpu: 1 and gpumem memMiB
// (none when memMiB is 0: a whole GPU).
func rayCluster(name string, workers int64, memMiB int64) *unstructured.Unstructured {
	workerLimits := map[string]any{"cpu": "1", "memory": "512Mi", resCount: "1"}
	if memMiB > 0 {
		workerLimits[resMemory] = memMiB
	}
	container := func(name string, limits map[string]any) map[string]any {
		return map[string]any{
			"name": name, "image": "rayproject/ray:2.46.0", "imagePullPolicy": "IfNotPresent",
			"resources": map[string]any{"limits": limits, "requests": map[string]any{"cpu": "100m", "memory": "128Mi"}},
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"rayVersion": "2.46.0",
			"headGroupSpec": map[string]any{
				"rayStartParams": map[string]any{},
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					container("ray-head", map[string]any{"cpu": "1", "memory": "512Mi"}),
				}}},
			},
			"workerGroupSpecs": []any{map[string]any{
				"groupName": "gpu-group", "replicas": workers, "minReplicas": int64(0), "maxReplicas": int64(4),
				"rayStartParams": map[string]any{},
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					container("ray-worker", workerLimits),
				}}},
			}},
		},
	}}
}

// startLine returns the container's command and args joined, where KubeRay puts `ray start`.
func startLine(c corev1.Container) string {
	return strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
}

var registeredRE = regexp.MustCompile(`(?m)^ray-standin: registered node=(\w+) GPU=(\d+) .*$`)

// TestKubeRayNumGPUs: the real KubeRay operator makes a head (no GPU) and two workers (1 GPU,
// 8000 MiB); the webhook gives the head --num-gpus=0 and the workers --num-gpus=1 (cases C31,
// C33), the device plugin's env reaches the rewritten line, and the `ray` stand-in registers
// GPU=1 and gpu_memory_mib=8000 on each worker, GPU=0 on the head.
func TestKubeRayNumGPUs(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	createRayCluster(t, c, ns, rayCluster("rc", 2, 8000))
	ctx := context.Background()
	var err error

	var pods []corev1.Pod
	var crashed *corev1.Pod
	var crashedCtr string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=rc"})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		running := 0
		for i := range pods {
			if allStarted(&pods[i]) {
				running++
			}
			for _, s := range pods[i].Status.ContainerStatuses {
				if term := s.LastTerminationState.Terminated; term != nil && term.ExitCode != 0 {
					crashed, crashedCtr = &pods[i], s.Name
					return true, nil
				}
			}
		}
		return running == 3 && len(pods) == 3, nil
	})
	if crashed != nil {
		b, _ := c.Client.CoreV1().Pods(ns).GetLogs(crashed.Name, &corev1.PodLogOptions{Container: crashedCtr, Previous: true}).Do(ctx).Raw()
		t.Fatalf("pod %s (%s) container %s exited with an error; its ray start line:\n%s\nits log:\n%s",
			crashed.Name, crashed.Labels["ray.io/node-type"], crashedCtr, startLine(crashed.Spec.Containers[0]), b)
	}
	if err != nil {
		var b strings.Builder
		for i := range pods {
			b.WriteString(c.describe(ns, pods[i].Name, &pods[i]) + "\n")
		}
		t.Fatalf("RayCluster rc: want 3 running pods (head + 2 workers), have:\n%s\n(operator log: %s/logs/kuberay-operator.log)", b.String(), c.State)
	}
	heads, workers := 0, 0
	for _, p := range pods {
		kind := p.Labels["ray.io/node-type"]
		switch kind {
		case "head":
			heads++
		case "worker":
			workers++
		}
		ctr := p.Spec.Containers[0]
		line := startLine(ctr)
		log := c.rayLog(ctx, ns, p.Name, ctr.Name)
		m := registeredRE.FindStringSubmatch(log)
		if m == nil {
			t.Errorf("%s %s: no registered line in its log; ray start line:\n%s\nlog:\n%s", kind, p.Name, line, log)
			continue
		}
		switch kind {
		case "head":
			if !strings.Contains(line, "--num-gpus=0") {
				t.Errorf("head %s: ray start line lacks --num-gpus=0: %s", p.Name, line)
			}
			if m[1] != "head" || m[2] != "0" {
				t.Errorf("head %s registered node=%s GPU=%s, want head GPU=0: %s", p.Name, m[1], m[2], m[0])
			}
			if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
				t.Errorf("head %s: schedulerName %q, want %q (no GPU)", p.Name, p.Spec.SchedulerName, corev1.DefaultSchedulerName)
			}
		case "worker":
			if !strings.Contains(line, "--num-gpus=1") {
				t.Errorf("worker %s: ray start line lacks --num-gpus=1: %s", p.Name, line)
			}
			if m[1] != "worker" || m[2] != "1" {
				t.Errorf("worker %s registered node=%s GPU=%s, want worker GPU=1: %s", p.Name, m[1], m[2], m[0])
			}
			if !strings.Contains(m[0], " gpu_memory_mib=8000 ") {
				t.Errorf("worker %s: registered line lacks gpu_memory_mib=8000: %s", p.Name, m[0])
			}
			planned, claimed := allocations(t, &p)
			if planned == nil || claimed == nil {
				t.Errorf("worker %s: planned=%v claimed=%v, want both", p.Name, planned != nil, claimed != nil)
			} else if cl := claimed.Container(ctr.Name); cl == nil || len(cl.Devices) != 1 || cl.Devices[0].MemoryMiB != 8000 {
				t.Errorf("worker %s: claimed %+v, want one GPU of 8000 MiB", p.Name, claimed)
			}
		default:
			t.Errorf("pod %s: ray.io/node-type %q", p.Name, kind)
		}
		t.Logf("%s %s: %s", kind, p.Name, m[0])
	}
	if heads != 1 || workers != 2 {
		t.Errorf("%d heads and %d workers, want 1 and 2", heads, workers)
	}
}

// rayLog waits up to a minute for the `ray` stand-in's registered line or a Ray error
// (Traceback, Usage) in the container's log, current or previous, and returns that log.
func (c *Cluster) rayLog(ctx context.Context, ns, pod, ctr string) string {
	var out string
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, prev := range []bool{false, true} {
			b, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: ctr, Previous: prev}).Do(ctx).Raw()
			if err != nil {
				continue
			}
			s := string(b)
			if strings.Contains(s, "ray-standin: registered") || strings.Contains(s, "Traceback") || strings.Contains(s, "Usage:") {
				out = s
				return true, nil
			}
			if out == "" {
				out = s
			}
		}
		return false, nil
	})
	return out
}

// createRayCluster creates rc in ns and deletes it when the test ends.
func createRayCluster(t *testing.T, c *Cluster, ns string, rc *unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(rayClusterGVR).Namespace(ns).Create(context.Background(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RayCluster: %v", err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(rayClusterGVR).Namespace(ns).Delete(context.Background(), rc.GetName(), metav1.DeleteOptions{})
	})
}
