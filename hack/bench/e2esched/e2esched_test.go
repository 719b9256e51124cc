package main

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hami-go/hami-go/pkg/device"
)

func TestRates(t *testing.T) {
	var b []time.Duration
	for i := 0; i < 101; i++ {
		b = append(b, 2*time.Second+time.Duration(i)*100*time.Millisecond) // 10 pods/s from t=2s
	}
	b[0], b[100] = b[100], b[0] // order must not matter
	sec, overall, steady := rates(b)
	if sec != 10 || overall != 10 || steady < 9.999 || steady > 10.001 {
		t.Errorf("rates = %v s, %v, %v pods/s; want 10 s, 10, 10", sec, overall, steady)
	}
	if s, o, st := rates(b[:1]); s != 0 || o != 0 || st != 0 {
		t.Errorf("one binding: %v %v %v, want zeros", s, o, st)
	}
}

func TestSimNode(t *testing.T) {
	n, err := simNode(7)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "bench-node-0007" || n.Labels[benchLabel] != "true" || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != benchTaint {
		t.Errorf("node %s labels %v taints %v", n.Name, n.Labels, n.Spec.Taints)
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 80 {
		t.Errorf("allocatable nvidia.com/gpu %v, want 80", q.String())
	}
	inv, err := device.DecodeInventory(n.Annotations[device.AnnoInventory])
	if err != nil || inv.Node != n.Name || len(inv.GPUs) != 8 || inv.GPUs[3].MemoryMiB != 81920 || inv.SplitCount != 10 {
		t.Errorf("inventory %+v, err %v", inv, err)
	}
	// What the device plugin publishes on a real node: the GFD labels, HAMi-core enforcement,
	// hami-go.io/gpu-memory.
	for k, v := range map[string]string{device.LabelGPUCount: "8", device.LabelGPUMemory: "81920", device.LabelGPUReplicas: "10",
		device.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", device.LabelGPUSharingStrategy: "time-slicing"} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if inv.Enforcement == nil || inv.Enforcement.Mode != device.EnforcementHAMiCore || inv.Unenforced() != "" {
		t.Errorf("inventory enforcement %+v", inv.Enforcement)
	}
	if q := n.Status.Allocatable[device.ResourceGPUMemory]; q.Value() != 8*81920 {
		t.Errorf("allocatable %s %v", device.ResourceGPUMemory, q.String())
	}
	ls := simLeases(n, time.Unix(100, 0))
	if len(ls) != 2 || ls[0].Name != n.Name || ls[1].Name != device.LeasePrefix+n.Name || ls[1].Spec.RenewTime.Unix() != 100 {
		t.Errorf("leases %v", ls)
	}
}

func TestBenchPodVariants(t *testing.T) {
	cfg := Config{Namespace: "ns", GPUMemMiB: 4000}
	e, b := benchPod(cfg, "extender", "1", 3), benchPod(cfg, "baseline", "1", 3)
	if e.Spec.SchedulerName != ExtenderScheduler || b.Spec.SchedulerName != BaselineScheduler {
		t.Errorf("schedulers %q %q", e.Spec.SchedulerName, b.Spec.SchedulerName)
	}
	if q := e.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"]; q.Value() != 4000 {
		t.Errorf("extender gpumem %v", q.String())
	}
	if _, ok := b.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"]; ok || b.Labels[device.LabelOptOut] != "true" {
		t.Errorf("baseline limits %v labels %v", b.Spec.Containers[0].Resources.Limits, b.Labels)
	}
	if !strings.HasPrefix(e.Name, "extender-1-") || e.Spec.NodeSelector[benchLabel] != "true" {
		t.Errorf("pod %s selector %v", e.Name, e.Spec.NodeSelector)
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	ok := Config{Nodes: 1000, Pods: 2000, Runs: 5, GPUMemMiB: 4000, QPS: 1000, Burst: 1000, Namespace: "x", LeaseRenew: 15 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for flag, mod := range map[string]func(*Config){
		"--nodes":       func(c *Config) { c.Nodes = 0 },
		"--pods":        func(c *Config) { c.Pods = 1000*80 + 1 },
		"--gpumem":      func(c *Config) { c.GPUMemMiB = 90000 },
		"--lease-renew": func(c *Config) { c.LeaseRenew = time.Minute },
		"--runs":        func(c *Config) { c.Runs = 0 },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err %v", flag, err)
		}
	}
}

func TestPodRewrite(t *testing.T) {
	cfg := Config{Namespace: "ns", GPUMemMiB: 4000}
	sent := benchPod(cfg, "extender", "1", 0)
	same := sent.DeepCopy()
	// The API server's defaulting copies limits into requests: no rewrite.
	same.Spec.Containers[0].Resources.Requests = same.Spec.Containers[0].Resources.Limits.DeepCopy()
	if d := podRewrite(sent, same); d != "" {
		t.Errorf("defaulted requests reported: %s", d)
	}
	// What hami-go's webhook does in device-plugin mode.
	mutated := same.DeepCopy()
	mutated.Spec.Containers[0].Resources.Limits[device.ResourceGPUMemory] = resource.MustParse("4000")
	mutated.Spec.Containers[0].Resources.Requests[device.ResourceGPUMemory] = resource.MustParse("4000")
	if d := podRewrite(sent, mutated); !strings.Contains(d, "limits["+device.ResourceGPUMemory+"] 4k, sent none") {
		t.Errorf("gpu-memory added: %q", d)
	}
	// ... and in DRA mode.
	dra := same.DeepCopy()
	delete(dra.Spec.Containers[0].Resources.Limits, "nvidia.com/gpumem")
	dra.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
	if d := podRewrite(sent, dra); !strings.Contains(d, "1 resourceClaims, sent 0") || !strings.Contains(d, "limits[nvidia.com/gpumem] none, sent 4k") {
		t.Errorf("claims: %q", d)
	}
}
