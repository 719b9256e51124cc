//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
)

// webhookHook is the pods webhook's name in the chart: the API server's own refusal names it
// when the webhook cannot be reached (case C38).
const webhookHook = "gpu-pods.hami-go.io"

// createErr creates pod and returns the API error ("" when it was created; it is deleted then).
func (c *Cluster) createErr(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err == nil {
		c.deleteNow(t, pod.Namespace, pod.Name)
		return ""
	}
	return err.Error()
}

// case C37, C39: with the webhook up, a container's own protected env (GPU pod or not) and a
// slice resource written as an annotation are refused, and the refusal names what to change.
func TestC37C39WebhookRefusals(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t, "webhook")
	ns := e2eNamespace(t, c)
	p := gpuPod(ns, "widen", gpuLimits{count: 1, memMiB: 1000})
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: envMemLimit0, Value: "81920m"}}
	msg := c.createErr(t, p)
	if want := `admission webhook "` + webhookHook + `" denied the request: spec.containers[main].env[CUDA_DEVICE_MEMORY_LIMIT_0]: a container may not set CUDA_DEVICE_MEMORY_LIMIT_0 itself`; !strings.Contains(msg, want) {
		t.Errorf("GPU pod widening its limit: %q, want %q", msg, want)
	}
	p = gpuPod(ns, "nvidia-env", gpuLimits{})
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	if msg := c.createErr(t, p); !strings.Contains(msg, "spec.containers[main].env[NVIDIA_VISIBLE_DEVICES]") {
		t.Errorf("non-GPU pod naming GPUs: %q", msg)
	}
	p = gpuPod(ns, "anno", gpuLimits{count: 1})
	p.Annotations = map[string]string{resMemory: "3000"}
	if msg := c.createErr(t, p); !strings.Contains(msg, `metadata.annotations[nvidia.com/gpumem]: "3000" is a GPU resource`) || !strings.Contains(msg, "resources.limits") {
		t.Errorf("gpumem as an annotation: %q", msg)
	}
	if msg := c.createErr(t, gpuPod(ns, "plain", gpuLimits{})); msg != "" {
		t.Errorf("plain pod refused: %s", msg)
	}
}

// scaleWebhook sets the webhook Deployment's replicas and returns the old count.
func (c *Cluster) scaleWebhook(t *testing.T, replicas int32) int32 {
	t.Helper()
	ctx := context.Background()
	deps, err := c.Client.AppsV1().Deployments(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=webhook"})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("webhook Deployment: %v (%d found)", err, len(deps.Items))
	}
	name := deps.Items[0].Name
	old := *deps.Items[0].Spec.Replicas
	if _, err := c.Client.AppsV1().Deployments(chartNamespace).UpdateScale(ctx, name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: chartNamespace}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scale %s to %d: %v", name, replicas, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=webhook"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range pods.Items {
			if allStarted(&pods.Items[i]) && pods.Items[i].DeletionTimestamp == nil {
				ready++
			}
		}
		if replicas == 0 {
			return len(pods.Items) == 0, nil
		}
		d, err := c.Client.AppsV1().Deployments(chartNamespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && ready >= int(replicas) && d.Status.AvailableReplicas >= replicas, nil
	})
	if err != nil {
		t.Fatalf("webhook not at %d replicas after 3m", replicas)
	}
	return old
}

// case C38: with the webhook scaled to 0 (its pods gone, nothing listening; failurePolicy Fail),
// pods that ask for no GPU are created in any namespace, and GPU pods (and pods setting
// protected env) are refused with the API server's message, which names gpu-pods.hami-go.io.
func TestC38WebhookDownOnlyGPUPodsRefused(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t, "webhook")
	ns := e2eNamespace(t, c)
	old := c.scaleWebhook(t, 0)
	t.Cleanup(func() { c.scaleWebhook(t, old) })

	for _, n := range []string{ns, "default"} {
		p := gpuPod(n, "plain-while-down", gpuLimits{})
		if msg := c.createErr(t, p); msg != "" {
			t.Errorf("plain pod in %s refused while the webhook is down: %s", n, msg)
		}
	}
	msg := c.createErr(t, gpuPod(ns, "gpu-while-down", gpuLimits{count: 1, memMiB: 1000}))
	if want := `failed calling webhook "` + webhookHook + `"`; !strings.Contains(msg, want) {
		t.Errorf("GPU pod while the webhook is down: %q, want %q", msg, want)
	}
	t.Logf("a GPU pod while the webhook is down: %s", msg)
	p := gpuPod(ns, "env-while-down", gpuLimits{})
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: envMemLimit0, Value: "81920m"}}
	if msg := c.createErr(t, p); !strings.Contains(msg, webhookHook) {
		t.Errorf("protected-env pod while the webhook is down: %q", msg)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "gpu-while-down", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused GPU pod exists: %v", err)
	}
}

// getenvPod runs the C getenv(3) reader (hack/getenv) on CUDA_DEVICE_MEMORY_LIMIT_0 in a GPU
// pod asking for 1000 MiB, directly (viaShell false) or through `sh -c` (true).
func getenvPod(ns, name, image string, viaShell bool) *corev1.Pod {
	p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: 1000})
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].Command = []string{"/bin/getenv", envMemLimit0}
	if viaShell {
		p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "/bin/getenv " + envMemLimit0}
	}
	return p
}

// case C37, what the webhook cannot see (docs/components.md "Protected environment"), measured
// with a C getenv(3) reader started directly and through `sh -c`, in GPU pods asking for 1000 MiB
// (the plugin's CUDA_DEVICE_MEMORY_LIMIT_0=1000m), on containerd 2.4.2 with hami-go's NRI
// plugin: an image ENV of 81920m comes before the plugin's entry and the process sees 1000m.
// envFrom values, which come after it, are TestC37EnvFromRefusedByNRI's.
func TestC37WhatTheContainerSees(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	cases := []struct {
		pod  *corev1.Pod
		want string
	}{
		{getenvPod(ns, "imageenv-direct", imageEnvImage, false), "1000m"},
		{getenvPod(ns, "imageenv-shell", imageEnvImage, true), "1000m"},
	}
	for _, tc := range cases {
		c.CreatePod(t, tc.pod)
	}
	for _, tc := range cases {
		c.WaitForPhase(t, ns, tc.pod.Name, corev1.PodSucceeded, 2*time.Minute)
		log := c.Logs(t, ns, tc.pod.Name, "main")
		t.Logf("%s: %s", tc.pod.Name, strings.TrimSpace(log))
		if want := "getenv: " + envMemLimit0 + "=" + tc.want + "\n"; !strings.Contains(log, want) {
			t.Errorf("%s sees %q, want %q", tc.pod.Name, log, want)
		}
	}
}

// imageEnvImage is the workload image with ENV CUDA_DEVICE_MEMORY_LIMIT_0=81920m
// (hack/cluster/mkimage ImageEnv).
const imageEnvImage = "docker.io/hami-go/workload-imageenv:0.1.0"

// guardRefusal is the start of the NRI plugin's refusal of a GPU container whose envFrom
// sets CUDA_DEVICE_MEMORY_LIMIT_0=81920m after the device plugin's 1000m (pkg/nri.RefusedError).
const guardRefusal = "hami-go: the container's env sets CUDA_DEVICE_MEMORY_LIMIT_0=81920m after the value CUDA_DEVICE_MEMORY_LIMIT_0=1000m that hami-go allocated"

// case C37, closed at container creation by hami-go's NRI plugin (pkg/nri, run by the device
// plugin on containerd 2.4.2's NRI socket): a GPU pod whose envFrom ConfigMap sets
// CUDA_DEVICE_MEMORY_LIMIT_0=81920m after the plugin's 1000m never runs: CRI CreateContainer
// fails with the NRI plugin's message, which the pod's status and events show (`kubectl describe
// pod`); a GPU pod without it still runs with 1000m; a pod without GPUs gets its
// NVIDIA_VISIBLE_DEVICES=all (envFrom) emptied, and keeps an image ENV's
// CUDA_DEVICE_MEMORY_LIMIT_0 (case C54: a container without GPUs is left alone but for an
// NVIDIA_VISIBLE_DEVICES naming GPUs; the limit limits nothing there).
// Without the NRI plugin the envFrom pods run and see 81920m (measured before it was wired, for
// getenv started directly and through `sh -c`).
func TestC37EnvFromRefusedByNRI(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	ctx := context.Background()
	createEnvFromConfigMaps(t, c, ns)
	withEnvFrom := func(p *corev1.Pod, cm string) *corev1.Pod {
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
		return p
	}
	plain := func(name, image, variable string, viaShell bool) *corev1.Pod {
		p := getenvPod(ns, name, image, viaShell)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		p.Spec.Containers[0].Command = []string{"/bin/getenv", variable}
		if viaShell {
			p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "/bin/getenv " + variable}
		}
		return p
	}
	refused := []*corev1.Pod{
		withEnvFrom(getenvPod(ns, "envfrom-direct", WorkloadImage, false), "widen"),
		withEnvFrom(getenvPod(ns, "envfrom-shell", WorkloadImage, true), "widen"),
	}
	runs := []struct {
		pod  *corev1.Pod
		want string // the getenv line
	}{
		{getenvPod(ns, "gpu-normal", WorkloadImage, false), envMemLimit0 + "=1000m"},
		{withEnvFrom(plain("plain-visible-direct", WorkloadImage, "NVIDIA_VISIBLE_DEVICES", false), "visible"), "NVIDIA_VISIBLE_DEVICES="},
		{withEnvFrom(plain("plain-visible-shell", WorkloadImage, "NVIDIA_VISIBLE_DEVICES", true), "visible"), "NVIDIA_VISIBLE_DEVICES="},
		{plain("plain-imageenv", imageEnvImage, envMemLimit0, false), envMemLimit0 + "=81920m"}, // mkimage.ImageEnv, untouched
	}
	for _, p := range refused {
		c.CreatePod(t, p)
	}
	for _, r := range runs {
		c.CreatePod(t, r.pod)
	}
	for _, r := range runs {
		c.WaitForPhase(t, ns, r.pod.Name, corev1.PodSucceeded, 2*time.Minute)
		log := c.Logs(t, ns, r.pod.Name, "main")
		t.Logf("%s: %s", r.pod.Name, strings.TrimSpace(log))
		if want := "getenv: " + r.want + "\n"; !strings.Contains(log, want) {
			t.Errorf("%s sees %q, want %q", r.pod.Name, log, want)
		}
	}
	for _, p := range refused {
		got := c.WaitForPod(t, ns, p.Name, 2*time.Minute, "refused by the NRI plugin", func(p *corev1.Pod) bool {
			for _, s := range p.Status.ContainerStatuses {
				if w := s.State.Waiting; w != nil && w.Reason == "CreateContainerError" && strings.Contains(w.Message, guardRefusal) {
					return true
				}
			}
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		if got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed {
			t.Errorf("%s ran (phase %s) and saw: %s", p.Name, got.Status.Phase, strings.TrimSpace(c.Logs(t, ns, p.Name, "main")))
			continue
		}
		s := got.Status.ContainerStatuses[0]
		t.Logf("%s: phase %s, container %s: %s: %s", p.Name, got.Status.Phase, s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		if got.Status.Phase != corev1.PodPending || s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil || s.RestartCount != 0 {
			t.Errorf("%s: phase %s, state %+v, last %+v, restarts %d; want a container that never ran", p.Name, got.Status.Phase, s.State, s.LastTerminationState, s.RestartCount)
		}
		var ev string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", p.Name).String(),
			})
			if err != nil {
				return false, nil
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == "Failed" && strings.Contains(e.Message, guardRefusal) {
					ev = e.Message
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%s: no Warning Failed event with the NRI plugin's refusal\n%s", p.Name, c.describe(ns, p.Name, got))
		} else {
			t.Logf("%s: event Warning Failed: %s", p.Name, ev)
		}
	}
}

// createEnvFromConfigMaps creates the ConfigMaps the C37 tests' envFrom names: "widen" sets
// CUDA_DEVICE_MEMORY_LIMIT_0=81920m, "visible" NVIDIA_VISIBLE_DEVICES=all.
func createEnvFromConfigMaps(t *testing.T, c *Cluster, ns string) {
	t.Helper()
	for name, data := range map[string]map[string]string{
		"widen":   {envMemLimit0: "81920m"},
		"visible": {"NVIDIA_VISIBLE_DEVICES": "all"},
	} {
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
