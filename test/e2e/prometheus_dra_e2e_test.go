//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// jobDRADriver is the job of the chart's DRA driver ServiceMonitor in mode dra (the Service's name).
const jobDRADriver = "hami-go-dra-driver"

// TestDRAPrometheusDashboard (issue 27, mode dra): the real Prometheus of
// TestPrometheusDashboardAndAlerts, configured from the chart rendered in mode dra (ServiceMonitors
// of the DRA driver and the webhook; no extender: stock kube-scheduler allocates the claims). Two
// slices requested through the Pod API (nvidia.com/gpu limits; the webhook turns them into claims
// from its ResourceClaimTemplate):
//   - dashboard: every expression of charts/hami-go/dashboards/hami-go.json, variables substituted
//     (node and the test's namespace, then "All"): the node agent's per-GPU panels give the
//     driver's bookings (memory, cores, sharers per GPU: the consumed capacity of the claims
//     allocated on the GPU), the GPU's memory as the ResourceSlice publishes it and its health,
//     the per-claim targets each claim's memory and compute limit; draDashboardEmpty says which
//     panels are empty in this mode and why;
//   - an XID injected through the driver's fake backend fires HamiGoGPUUnhealthy (job: the DRA
//     driver's) for that GPU, and the alert resolves once the GPU recovers (its taint gone).
func TestDRAPrometheusDashboard(t *testing.T) {
	c := draCluster(t)
	c.requireRunning(t, "webhook")
	inv := c.draInventory(t)

	p := c.startPrometheus(t, "dra", "prometheusRule.gpuUnhealthy.for=1s")
	begin := time.Now()
	targets := p.waitTargets(t, []string{jobDRADriver, jobWebhook}, 30*time.Second)
	t.Logf("2 targets up %v after Prometheus was ready: %s", time.Since(begin).Round(time.Millisecond), targetSummary(targets))

	// As in mode deviceplugin: the first slice creates the webhook's series, the second increases
	// them after a scrape, so the admissions rate panel has an increase to show.
	ns := draNamespace(t, c)
	c.CreatePod(t, gpuPod(ns, "first", gpuLimits{count: 1, memMiB: 3000, cores: 30}))
	c.WaitForRunning(t, ns, "first", 2*time.Minute)
	p.waitNonEmpty(t, fmt.Sprintf(`hami_go_slice_memory_limit_bytes{namespace=%q, claim!=""}`, ns), 30*time.Second)
	p.waitScraped(t, 30*time.Second, `hami_go_webhook_admissions_total{resource="pods"}`)
	c.CreatePod(t, gpuPod(ns, "second", gpuLimits{count: 1, memMiB: 5000, cores: 20}))
	c.WaitForRunning(t, ns, "second", 2*time.Minute)

	// The claims hold what the pods asked for: the values below come from the claims' consumed
	// capacity, so check them against the pods' limits once.
	w := c.draPromWant(t, inv, ns)
	got := map[string]bool{}
	for name, s := range w.slices {
		got[fmt.Sprintf("%d MiB %d%%", s.memMiB, s.cores)] = true
		t.Logf("claim %s/%s: GPU %s, %d MiB, %d%% cores", ns, name, s.uuid, s.memMiB, s.cores)
	}
	if len(w.slices) != 2 || !got["3000 MiB 30%"] || !got["5000 MiB 20%"] {
		t.Fatalf("claims of %s: %v, want two, of 3000 MiB 30%% and 5000 MiB 20%% (the pods' limits)", ns, w.slices)
	}

	t.Run("dashboard", func(t *testing.T) {
		c.checkDashboard(t, p, ns, func() *promWant { return c.draPromWant(t, inv, ns) }, draDashboard)
	})
	t.Run("XID fires HamiGoGPUUnhealthy", func(t *testing.T) {
		w := c.draPromWant(t, inv, "")
		var g device.GPU
		for i := len(inv.GPUs) - 1; i >= 0; i-- {
			if w.booked(inv.GPUs[i].UUID).sharers == 0 {
				g = inv.GPUs[i]
				break
			}
		}
		if g.UUID == "" {
			t.Fatalf("every GPU of %s holds a claim: no GPU to inject an XID on", c.NodeName)
		}
		c.xidAlert(t, p, g, jobDRADriver, func() { c.waitTaint(t, draDeviceName(g.Index), false, 2*time.Minute) })
	})
}

// draDashboard: what mode dra's dashboard shows. The node agent's rows come from the DRA driver
// (the device plugin's metric names, per-slice series per prepared claim with a claim label).
var draDashboard = dashboardExpect{
	checks: map[string]seriesCheck{
		"GPU memory: total, handed out, used#0": perGPU(func(w *promWant, u string) float64 { return float64(w.gpuMemoryMiB(u)) * mib }),
		"GPU memory: total, handed out, used#1": perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).memMiB) * mib }),
		"GPU memory: total, handed out, used#2": everyGPU(func(w *promWant, u string, v float64) bool {
			return v >= 0 && v <= float64(w.gpuMemoryMiB(u))*mib
		}, "between 0 and the GPU's memory"),
		"GPU memory handed out and used (% of total)#0": perGPU(func(w *promWant, u string) float64 {
			return 100 * float64(w.booked(u).memMiB) / float64(w.gpuMemoryMiB(u))
		}),
		"GPU memory handed out and used (% of total)#1": everyGPU(func(_ *promWant, _ string, v float64) bool { return v >= 0 && v <= 100 }, "between 0 and 100"),
		"GPU compute handed out (%)#0":                  perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).cores) }),
		"Containers per GPU#0":                          perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).sharers) }),
		"GPU health#0":                                  perGPU(func(*promWant, string) float64 { return 1 }),
		"Slice memory: limit and used#2":                perSlice(func(s sliceWant) float64 { return float64(s.memMiB) * mib }),
		"Slice memory: limit and used#3":                perSliceRange(0, math.Inf(1)),
		"Slice compute limit (%)#1":                     perSlice(func(s sliceWant) float64 { return float64(s.cores) }),
		"Webhook admissions per second#0":               positiveFor("resource", "pods"),
	},
	empty: draDashboardEmpty,
}

// draDashboardEmpty are the dashboard's expressions that have no series in mode dra, and why.
var draDashboardEmpty = func() map[string]string {
	const extender = "the scheduler extender's and the HamiGo plugin's series: in mode dra stock kube-scheduler allocates the claims and neither runs"
	const plugin = "the device plugin's container series (no claim label): mode dra runs the DRA driver, whose slices are claims (the claim targets)"
	const calls = "the device plugin's gRPC calls: in mode dra the kubelet calls the DRA driver (NodePrepareResources), which has no such histogram"
	m := map[string]string{
		"Slice memory: limit and used#0":             plugin,
		"Slice memory: limit and used#1":             plugin,
		"Slice memory used (% of its limit)#0":       "per-container usage over limit (no claim label): the DRA driver's slices are claims, whose usage the limit-and-used panel shows (#3)",
		"Slice compute limit (%)#0":                  plugin,
		"Device plugin call latency p99 (s)#0":       calls,
		"Device plugin calls per second by status#0": calls,
	}
	for _, k := range []string{"GPU memory booked (MiB)#0", "GPU compute booked (%)#0", "Slices per GPU#0", "Booked GPU memory by node (MiB)#0",
		"Slice memory (MiB)#0", "Slice compute (%)#0", "Extender calls per second#0", "Extender latency p99 (s)#0",
		"HamiGo scheduling attempts per second#0", "HamiGo plugin latency p50 and p99 (s)#0", "HamiGo plugin latency p50 and p99 (s)#1"} {
		m[k] = extender
	}
	return m
}()

// draDeviceName is the ResourceSlice device name of the GPU with index i (pkg/dra.DeviceName).
func draDeviceName(i int) string { return fmt.Sprintf("gpu-%d", i) }

// draInventory is the node's GPUs as the driver publishes them in its ResourceSlice: uuid, index,
// product name (the metrics' model label) and memory capacity (what claims may book, the
// memory the metrics call the GPU's total), scaling 1 (the capacity is already scaled).
func (c *Cluster) draInventory(t testing.TB) device.Inventory {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceSlices: %v", err)
	}
	inv := device.Inventory{MemoryScaling: 1}
	for _, s := range l.Items {
		if s.Spec.Driver != draClass || s.Spec.NodeName == nil || *s.Spec.NodeName != c.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			str := func(n resourcev1.QualifiedName) string {
				if a, ok := d.Attributes[n]; ok && a.StringValue != nil {
					return *a.StringValue
				}
				return ""
			}
			g := device.GPU{UUID: str("uuid"), Model: str("productName")}
			if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
				g.Index = int(*a.IntValue)
			}
			if m, ok := d.Capacity["memory"]; ok {
				g.MemoryMiB = m.Value.Value() >> 20
			}
			if g.UUID == "" || g.MemoryMiB == 0 || d.Name != draDeviceName(g.Index) {
				t.Fatalf("ResourceSlice %s device %s: uuid %q, index %d, memory %d MiB: want all published", s.Name, d.Name, g.UUID, g.Index, g.MemoryMiB)
			}
			inv.GPUs = append(inv.GPUs, g)
		}
	}
	if len(inv.GPUs) == 0 {
		t.Fatalf("no ResourceSlice of driver %s for node %s", draClass, c.NodeName)
	}
	return inv
}

// draPromWant is promWant for mode dra: per GPU, what the ResourceClaims allocated on the node's
// GPUs and reserved for a pod (all namespaces) consume (memory, cores; one sharer per claim and
// GPU, as the driver counts prepared claims), and the test namespace's claims by name.
func (c *Cluster) draPromWant(t testing.TB, inv device.Inventory, ns string) *promWant {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceClaims("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceClaims: %v", err)
	}
	byName := map[string]string{}
	for _, g := range inv.GPUs {
		byName[draDeviceName(g.Index)] = g.UUID
	}
	w := &promWant{node: c.NodeName, ns: ns, inv: inv, gpu: map[string]*gpuBooked{}, slices: map[string]sliceWant{}, claims: true}
	for _, rc := range l.Items {
		if rc.Status.Allocation == nil || len(rc.Status.ReservedFor) == 0 || rc.DeletionTimestamp != nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			uuid, ok := byName[r.Device]
			if r.Driver != draClass || r.Pool != c.NodeName || !ok {
				continue
			}
			mem, cores := r.ConsumedCapacity["memory"], r.ConsumedCapacity["cores"]
			b := w.gpu[uuid]
			if b == nil {
				b = &gpuBooked{}
				w.gpu[uuid] = b
			}
			s := sliceWant{uuid: uuid, memMiB: mem.Value() >> 20, cores: int(cores.Value())}
			b.memMiB += s.memMiB
			b.cores += s.cores
			b.sharers++
			if rc.Namespace == ns {
				w.slices[rc.Name] = s
			}
		}
	}
	return w
}

// requireRunning fails the test when one of the chart's components has no running pod (any mode).
func (c *Cluster) requireRunning(t testing.TB, components ...string) {
	t.Helper()
	for _, comp := range components {
		l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: labelComponent + "=" + comp})
		if err != nil {
			t.Fatalf("list %s pods: %v", comp, err)
		}
		ready := false
		for i := range l.Items {
			ready = ready || allStarted(&l.Items[i])
		}
		if !ready {
			t.Fatalf("no running %s pod in %s (logs: %s/logs/helm.log)", comp, chartNamespace, c.State)
		}
	}
}
