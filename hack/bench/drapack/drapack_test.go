package main

import (
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// The fewest GPUs: claims per GPU by memory, capped by the split count.
func TestIdealGPUs(t *testing.T) {
	for _, c := range []struct {
		pods          int
		mem, bookable int64
		split, want   int
	}{
		{4, 20000, 81920, 10, 1}, {5, 20000, 81920, 10, 2}, {8, 20000, 81920, 10, 2}, {16, 20000, 81920, 10, 4},
		{20, 1000, 81920, 10, 2}, {3, 90000, 81920, 10, 0},
	} {
		if got := IdealGPUs(c.pods, c.mem, c.bookable, c.split); got != c.want {
			t.Errorf("IdealGPUs(%d, %d, %d, %d) = %d, want %d", c.pods, c.mem, c.bookable, c.split, got, c.want)
		}
	}
}

// The pods are what the webhook leaves: one claim from the template, used by the container,
// the synthetic GPU-memory request, and the template asks the memory in bytes.
func TestBurstPodAndTemplate(t *testing.T) {
	p := burstPod("ns", "hami-go-packed", 3, 20000)
	q := p.Spec.Containers[0].Resources.Requests[device.ResourceGPUMemory]
	if p.Name != "w003" || p.Spec.SchedulerName != "hami-go-packed" || q.Value() != 20000 ||
		*p.Spec.ResourceClaims[0].ResourceClaimTemplateName != templateName || p.Spec.Containers[0].Resources.Claims[0].Name != claimName {
		t.Errorf("pod %+v", p)
	}
	tmpl := claimTemplate("ns", 20000)
	r := tmpl.Spec.Spec.Devices.Requests[0].Exactly
	m := r.Capacity.Requests[draapi.CapacityMemory]
	if r.DeviceClassName != draapi.DriverName || r.Count != 1 || r.AllocationMode != resourceapi.DeviceAllocationModeExactCount || m.Value() != 20000*dra.MiB {
		t.Errorf("template request %+v", r)
	}
}

// A variant's figures and the Markdown row.
func TestSummaryAndMarkdown(t *testing.T) {
	v := Variant{Order: dra.OrderIndex, Scheduler: "default-scheduler", Nodes: 4, Pods: 8, Bursts: []Burst{
		{GPUs: 2, Ideal: 2, Nodes: 1, Seconds: 0.4},
		{GPUs: 3, Ideal: 2, Nodes: 2, Seconds: 0.2},
		{GPUs: 4, Ideal: 2, Nodes: 3, Refused: 1, Seconds: 0.9},
	}}
	s := Summarize(v)
	if s.Bursts != 3 || s.Ideal != 2 || s.MeanGPUs != 3 || s.MinGPUs != 2 || s.MaxGPUs != 4 || s.AboveIdeal != 2 || s.MeanNodes != 2 || s.Refused != 1 || s.MedianSeconds != 0.4 {
		t.Errorf("Summarize = %+v", s)
	}
	md := Markdown(&Result{Config: Config{GPUMemMiB: 20000, Profile: "dgxh100", SplitCount: 10, PrepareLag: 500 * time.Millisecond, RepublishDelay: time.Second, Bursts: 3},
		Started: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), Variants: []Variant{v}})
	for _, want := range []string{"## DRA packing under concurrency", "| 4 | 8 | index | default-scheduler | 2 | 3.00 (2–4) | 2 of 3 | 2.00 | 1 | 0 | 0.40 s |", "2026-12-03"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
