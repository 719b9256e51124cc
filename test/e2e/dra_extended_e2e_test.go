//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// labelIgnore opts a pod out of hami-go's webhook (the chart's objectSelector).
const labelIgnore = "hami-go.io/ignore"

// ignoredPod is gpuPod labelled so that the webhook never sees it.
func ignoredPod(ns, name string, g gpuLimits) *corev1.Pod {
	p := gpuPod(ns, name, g)
	p.Labels[labelIgnore] = "true"
	return p
}

// TestDRAExtendedResourceWholeGPU (docs/dra.md, "Pods that only ask nvidia.com/gpu"): the
// DeviceClass gpu.hami-go.io carries extendedResourceName nvidia.com/gpu (KEP-5004), so a pod
// that only asks `nvidia.com/gpu: 1` and that the webhook never saw (hami-go.io/ignore=true) runs
// on kube-scheduler with a claim kube-scheduler made: one device, the request policy's defaults
// (all the GPU's memory, one sharer, no cores), and the container gets that whole GPU's env.
// Pods that also ask a slice (nvidia.com/gpumem, nvidia.com/gpucores) untouched by the webhook
// must never get a whole GPU instead: the chart's policy refuses them at creation (case C49), and
// no claim is made for them.
func TestDRAExtendedResourceWholeGPU(t *testing.T) {
	c := draCluster(t)
	dc, err := c.Client.ResourceV1().DeviceClasses().Get(context.Background(), draClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := dc.Spec.ExtendedResourceName; n == nil || *n != resCount {
		t.Fatalf("DeviceClass %s extendedResourceName = %v, want %s (chart draDriver.extendedResource)", draClass, n, resCount)
	}
	ns := draNamespace(t, c)
	c.CreatePod(t, ignoredPod(ns, "whole", gpuLimits{count: 1}))
	for _, p := range []*corev1.Pod{ignoredPod(ns, "slice-mem", gpuLimits{count: 1, memMiB: 4000}), ignoredPod(ns, "slice-cores", gpuLimits{count: 1, cores: 30})} {
		_, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "are GPU slices that only hami-go's scheduler places") {
			t.Errorf("%s (opted out, asks a slice): created (err %v); want the chart's policy refusal (case C49)", p.Name, err)
		}
	}

	p := c.WaitForRunning(t, ns, "whole", 2*time.Minute)
	if p.Spec.SchedulerName != corev1.DefaultSchedulerName || len(p.Spec.ResourceClaims) != 0 {
		t.Errorf("whole: schedulerName %q, resourceClaims %v: the webhook touched the pod", p.Spec.SchedulerName, p.Spec.ResourceClaims)
	}
	st := p.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		t.Fatalf("whole: no extendedResourceClaimStatus: %+v", p.Status)
	}
	rc, err := c.Client.ResourceV1().ResourceClaims(ns).Get(context.Background(), st.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Status.Allocation == nil || len(rc.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: allocation %+v, want one device", rc.Name, rc.Status.Allocation)
	}
	r := rc.Status.Allocation.Devices.Results[0]
	memCap := deviceMemory(t, c, r.Device)
	mem, sharers := r.ConsumedCapacity["memory"], r.ConsumedCapacity["sharers"]
	if r.Driver != draClass || mem.Cmp(memCap) != 0 || sharers.Value() != 1 {
		t.Errorf("claim %s: %s/%s consumed memory %s sharers %s, want all of %s and 1", rc.Name, r.Driver, r.Device, mem.String(), sharers.String(), memCap.String())
	}
	gpu := c.draGPUs(t)[r.Device]
	env := c.containerEnv(t, ns, "whole", "main")
	t.Logf("whole (nvidia.com/gpu: 1 through extendedResourceName, claim %s on %s) env:\n%s", rc.Name, r.Device, envLines(env, "CUDA_", "HAMI_GO_"))
	wantMem := strconv.FormatInt(memCap.Value()>>20, 10) + "m"
	if env[envMemLimit0] != wantMem {
		t.Errorf("whole: %s = %q, want %q", envMemLimit0, env[envMemLimit0], wantMem)
	}
	checkGPUEnv(t, "whole", env, gpu.uuid, false)
	for _, k := range []string{"CUDA_DEVICE_SM_LIMIT", envSMLimitPrefix + "0"} {
		if v, ok := env[k]; ok {
			t.Errorf("whole: %s = %q for a pod that asked no cores", k, v)
		}
	}

	l, err := c.Client.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range l.Items {
		for _, o := range rc.OwnerReferences {
			if o.Name != "whole" {
				t.Errorf("claim %s made for pod %s, which asked a slice", rc.Name, o.Name)
			}
		}
	}
	if len(l.Items) != 1 {
		t.Errorf("%d claims in %s, want the whole pod's only", len(l.Items), ns)
	}
}

// deviceMemory is the memory capacity the driver publishes for the device.
func deviceMemory(t testing.TB, c *Cluster, name string) resource.Quantity {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if s.Spec.Driver != draClass || s.Spec.NodeName == nil || *s.Spec.NodeName != c.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == name {
				return d.Capacity[resourcev1.QualifiedName("memory")].Value
			}
		}
	}
	t.Fatalf("no device %s in the node's ResourceSlice", name)
	return resource.Quantity{}
}
