package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/ray"
)

// BenchmarkAdmissionLatency: one op is one admission review of a pod CREATE handled in-process
// by PodHandler (JSON decode, validation, patch), reporting p50/p99 in µs (issue 5's target:
// p99 <= 1 ms). Sub-benchmarks: gpu-pod (one container asking 1 GPU, 8000 MiB, 30% cores,
// default scheduler: gets schedulerName and nothing else) and ray-worker (a KubeRay worker pod
// asking 1 slice of 8000 MiB: its `ray start` line is rewritten too); since issue 25 every GPU
// pod also gets hami-go.io/gpu-memory written. gpu-memory-quota: a pod with a classic init
// container (2 GPUs x 9831 MiB), a native sidecar and an app container, one of which presets
// hami-go.io/gpu-memory (removed and rewritten), in a namespace with 20 ResourceQuotas, one of
// them on requests.hami-go.io/gpu-memory (QuotaCache on a fake API); percent-lookup: a 50 %
// pod in a namespace with 20 quotas, none on GPU memory (the quota lookup runs and admits).
func BenchmarkAdmissionLatency(b *testing.B) {
	limits := corev1.ResourceList{
		"nvidia.com/gpu":      resource.MustParse("1"),
		"nvidia.com/gpumem":   resource.MustParse("8000"),
		"nvidia.com/gpucores": resource.MustParse("30"),
	}
	gpuPod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "team-a"},
		Spec: corev1.PodSpec{SchedulerName: DefaultScheduler, Containers: []corev1.Container{{
			Name: "train", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits},
		}}},
	}
	line := "ray start  --address=raycluster-kuberay-head-svc.default.svc.cluster.local:6379  --block  --metrics-export-port=8080  --num-cpus=2 "
	rayPod := gpuPod.DeepCopy()
	rayPod.Name = "raycluster-kuberay-worker-x7k2p"
	rayPod.Labels = map[string]string{ray.LabelNodeType: "worker", "ray.io/cluster": "raycluster-kuberay"}
	c := &rayPod.Spec.Containers[0]
	c.Name, c.Image = "ray-worker", "rayproject/ray:2.46.0"
	c.Command, c.Args = []string{"/bin/bash", "-c", "--"}, []string{"ulimit -n 65536; " + line}
	c.Env = []corev1.EnvVar{{Name: ray.EnvGeneratedStartCmd, Value: line}}
	always := corev1.ContainerRestartPolicyAlways
	mib := func(n, m string) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n), "nvidia.com/gpumem": resource.MustParse(m)}
	}
	quotaPod := gpuPod.DeepCopy()
	quotaPod.Spec.InitContainers = []corev1.Container{
		{Name: "warmup", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: mib("2", "9831")}},
		{Name: "side", Image: "busybox", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: mib("1", "2000")}},
	}
	quotaPod.Spec.Containers[0].Resources.Limits = mib("1", "8000")
	quotaPod.Spec.Containers[0].Resources.Limits["hami-go.io/gpu-memory"] = resource.MustParse("1")
	quotaPod.Spec.Containers[0].Resources.Requests = quotaPod.Spec.Containers[0].Resources.Limits.DeepCopy()
	pctPod := gpuPod.DeepCopy()
	pctPod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpumem-percentage": resource.MustParse("50")}
	pctPod.Spec.Containers[0].Resources.Requests = nil
	quotas := func(b *testing.B, gpu bool) Quotas {
		var objs []runtime.Object
		for i := 0; i < 20; i++ {
			res := corev1.ResourceName("requests.cpu")
			if gpu && i == 7 {
				res = "requests.hami-go.io/gpu-memory"
			}
			objs = append(objs, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("q%02d", i)},
				Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{res: resource.MustParse("40000")}}})
		}
		c := NewQuotaCache(fake.NewClientset(objs...))
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		if err := c.Start(ctx, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		quotas func(*testing.B) Quotas
	}{{"gpu-pod", gpuPod, nil}, {"ray-worker", rayPod, nil},
		{"gpu-memory-quota", quotaPod, func(b *testing.B) Quotas { return quotas(b, true) }},
		{"percent-lookup", pctPod, func(b *testing.B) Quotas { return quotas(b, false) }}} {
		raw, err := json.Marshal(tc.pod)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			h := NewPodHandler(cfg, NewMetrics(nil))
			if tc.quotas != nil {
				h.SetQuotas(tc.quotas(b))
			}
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "bench", Operation: admissionv1.Create, Namespace: "team-a", Object: runtime.RawExtension{Raw: raw},
			}}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				resp := h.Handle(ctx, req)
				lat = append(lat, time.Since(start))
				if !resp.Allowed || len(resp.Patches) == 0 {
					b.Fatalf("%s: allowed=%v patches=%d: %v", tc.name, resp.Allowed, len(resp.Patches), resp.Result)
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
