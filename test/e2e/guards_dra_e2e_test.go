//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// case C37 in DRA mode, with the NRI plugin the DRA driver runs (containerd 2.4.2): a claim
// pod whose envFrom sets CUDA_DEVICE_MEMORY_LIMIT_0=81920m sees its claim's 1000m (the claim's
// CDI edit comes after the CRI env, and the NRI plugin pins it), directly and through `sh -c`; a
// pod without GPUs gets an envFrom NVIDIA_VISIBLE_DEVICES=all emptied; and one that sets
// CUDA_DEVICE_MEMORY_LIMIT_0 twice (image ENV and envFrom) runs with its own last value (case
// C54: a container without GPUs is left alone but for an NVIDIA_VISIBLE_DEVICES naming GPUs).
func TestC37DRAEnvByNRI(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	createEnvFromConfigMaps(t, c, ns)
	pod := func(p *corev1.Pod, image, cm, variable string, viaShell bool) *corev1.Pod {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].Image = image
		p.Spec.Containers[0].Command = []string{"/bin/getenv", variable}
		if viaShell {
			p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "/bin/getenv " + variable}
		}
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
		return p
	}
	for _, name := range []string{"claim-envfrom-direct", "claim-envfrom-shell"} {
		c.createClaim(t, ns, name, gpuClaim{memory: "1000Mi", index: -1})
	}
	runs := []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(claimPod(ns, "claim-envfrom-direct", "claim-envfrom-direct", false), WorkloadImage, "widen", envMemLimit0, false), envMemLimit0 + "=1000m"},
		{pod(claimPod(ns, "claim-envfrom-shell", "claim-envfrom-shell", false), WorkloadImage, "widen", envMemLimit0, true), envMemLimit0 + "=1000m"},
		{pod(gpuPod(ns, "plain-visible", gpuLimits{}), WorkloadImage, "visible", "NVIDIA_VISIBLE_DEVICES", false), "NVIDIA_VISIBLE_DEVICES="},
		{pod(gpuPod(ns, "plain-twice", gpuLimits{}), imageEnvImage, "widen", envMemLimit0, false), envMemLimit0 + "=81920m"},
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
}
