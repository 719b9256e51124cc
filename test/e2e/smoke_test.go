//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// TestSmokePlainPodSeesItsEnv runs a pod without GPU requests, bound to the node by nodeName
// (no scheduler involved), whose container runs the workload image's envdump; its log, read
// through the API server from the kubelet in the node's network namespace, must list exactly
// the CUDA_/NVIDIA_/HAMI_GO_ variables the pod was given.
func TestSmokePlainPodSeesItsEnv(t *testing.T) {
	c := NewCluster(t)
	ns := c.Namespace(t)
	token := rand.String(12)
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "envdump", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      c.NodeName,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:            "envdump",
				Image:           WorkloadImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"envdump"},
				Env: []corev1.EnvVar{
					// Not the names the webhook protects (case C37 refuses CUDA_VISIBLE_DEVICES,
					// NVIDIA_VISIBLE_DEVICES and HAMI_GO_* in any pod spec).
					{Name: "CUDA_SMOKE_TOKEN", Value: token},
					{Name: "NVIDIA_SMOKE", Value: "void"},
					{Name: "UNRELATED", Value: "not-printed"},
				},
			}},
		},
	}
	c.CreatePod(t, pod)
	p := c.WaitForRunning(t, ns, pod.Name, 2*time.Minute)
	if p.Status.PodIP == "" || !strings.HasPrefix(p.Status.PodIP, "10.244.0.") {
		t.Errorf("pod IP %q, want one from the node's pod subnet 10.244.0.0/24", p.Status.PodIP)
	}
	if p.Status.HostIP != "10.200.0.2" {
		t.Errorf("host IP %q, want the node's 10.200.0.2", p.Status.HostIP)
	}
	log := c.WaitForLog(t, ns, pod.Name, "envdump", "envdump: done", time.Minute)
	want := "envdump: CUDA_SMOKE_TOKEN=" + token + "\n" +
		"envdump: CUDA_VISIBLE_DEVICES=<unset>\n" +
		"envdump: NVIDIA_SMOKE=void\n" +
		"envdump: done\n"
	if log != want {
		t.Fatalf("log:\n%s\nwant:\n%s", log, want)
	}
}
