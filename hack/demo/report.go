package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuview"
)

// rayPod is what the report shows of one Ray pod.
type rayPod struct {
	pod        *corev1.Pod
	alloc      *device.Allocation // claimed, else planned (DRA: from its claims); nil when none
	claims     []string           // DRA mode: one line per claim allocation result
	rayStart   string             // the `ray start` line the container ran
	cudaSeen   string             // CUDA_VISIBLE_DEVICES as the container saw it
	registered string             // the stand-in's "registered …" line
}

const (
	envLinePrefix = "ray-standin: env "
	regLinePrefix = "ray-standin: registered "
)

// waitRay waits until the cluster's head and `workers` workers run and their Ray stand-ins
// registered, and returns them (head first, then workers by name).
func (d *demo) waitRay(ctx context.Context, cluster string, workers int) ([]rayPod, error) {
	var out []rayPod
	var state string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, d.stepTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := d.kube.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=" + cluster})
		if err != nil {
			if state == "" { // keep the last real state: at the deadline the client fails too
				state = err.Error()
			}
			return false, nil
		}
		out = out[:0]
		var pending []string
		heads, ws := 0, 0
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			switch p.Labels["ray.io/node-type"] {
			case "head":
				heads++
			case "worker":
				ws++
			}
			rp := rayPod{pod: p, rayStart: rayStartLine(p)}
			if p.Status.Phase != corev1.PodRunning {
				pending = append(pending, fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, podReason(p)))
				continue
			}
			logs, err := d.kube.CoreV1().Pods(d.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: p.Spec.Containers[0].Name}).DoRaw(ctx)
			if err != nil {
				pending = append(pending, p.Name+" logs: "+err.Error())
				continue
			}
			for _, l := range strings.Split(string(logs), "\n") {
				if v, ok := strings.CutPrefix(l, envLinePrefix); ok {
					rp.cudaSeen = fieldOf(v, "CUDA_VISIBLE_DEVICES")
				}
				if v, ok := strings.CutPrefix(l, regLinePrefix); ok {
					rp.registered = v
				}
			}
			if rp.registered == "" {
				pending = append(pending, p.Name+" running, Ray not registered yet")
				continue
			}
			out = append(out, rp)
		}
		state = fmt.Sprintf("%d head, %d workers; waiting for: %s", heads, ws, strings.Join(pending, "; "))
		return heads == 1 && ws == workers && len(pending) == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("RayCluster %s did not come up in %v: %s", cluster, d.stepTimeout, state)
	}
	sort.Slice(out, func(i, j int) bool {
		hi, hj := out[i].pod.Labels["ray.io/node-type"] == "head", out[j].pod.Labels["ray.io/node-type"] == "head"
		if hi != hj {
			return hi
		}
		return out[i].pod.Name < out[j].pod.Name
	})
	d.progress("RayCluster %s: head and %d workers running and registered", cluster, workers)
	return out, nil
}

// report prints one table row per pod and one per GPU in use, and checks every value.
func (d *demo) report(ctx context.Context, inv device.Inventory, pods []rayPod, want workerGPU) {
	index := map[string]int{}
	for _, g := range inv.GPUs {
		index[g.UUID] = g.Index
	}
	fmt.Fprintf(d.out, "%-44s %-7s %-11s %-9s %-13s %-6s %-22s %s\n", "POD", "TYPE", "NODE", "GPUS", "MEMORY(MiB)", "CORES", "CUDA_VISIBLE_DEVICES", "RAY REGISTERED")
	booked := map[string][]string{}
	bookedMiB := map[string]int64{}
	for _, rp := range pods {
		kind := rp.pod.Labels["ray.io/node-type"]
		gpus, mem, cores := "-", "-", "-"
		if rp.alloc != nil && len(rp.alloc.Containers) > 0 {
			c := rp.alloc.Containers[0]
			var idx, ms, cs []string
			for _, g := range c.Devices {
				idx = append(idx, fmt.Sprintf("GPU-%d", index[g.UUID]))
				ms = append(ms, fmt.Sprint(g.MemoryMiB))
				cs = append(cs, fmt.Sprint(g.CoresPercent))
				booked[g.UUID] = append(booked[g.UUID], rp.pod.Name)
				bookedMiB[g.UUID] += g.MemoryMiB
			}
			gpus, mem, cores = strings.Join(idx, ","), strings.Join(ms, ","), strings.Join(cs, ",")
		}
		cuda := rp.cudaSeen
		if len(cuda) > 22 {
			cuda = cuda[:19] + "..."
		}
		fmt.Fprintf(d.out, "%-44s %-7s %-11s %-9s %-13s %-6s %-22s %s\n", rp.pod.Name, kind, rp.pod.Spec.NodeName, gpus, mem, cores, orDash(cuda), rp.registered)
		fmt.Fprintf(d.out, "    ray start: %s\n", rp.rayStart)
		for _, l := range claimLines(rp, d.mode) {
			fmt.Fprintf(d.out, "    %s\n", l)
		}
		d.check(rp, kind, want)
	}
	fmt.Fprintf(d.out, "%-8s %-42s %-8s %-20s %s\n", "GPU", "UUID", "SHARERS", "BOOKED(MiB)/TOTAL", "PODS")
	for _, g := range inv.GPUs {
		if len(booked[g.UUID]) == 0 {
			continue
		}
		fmt.Fprintf(d.out, "GPU-%-4d %-42s %-8d %-20s %s\n", g.Index, g.UUID, len(booked[g.UUID]), fmt.Sprintf("%d/%d", bookedMiB[g.UUID], g.MemoryMiB), strings.Join(booked[g.UUID], ","))
		if bookedMiB[g.UUID] > inv.CapacityMiB(&g) {
			d.problem("GPU-%d over-committed: %d MiB booked of %d", g.Index, bookedMiB[g.UUID], g.MemoryMiB)
		}
		if len(booked[g.UUID]) > inv.SplitCount {
			d.problem("GPU-%d has %d sharers, split count %d", g.Index, len(booked[g.UUID]), inv.SplitCount)
		}
	}
}

// check asserts what each pod must show: the head gets --num-gpus=0 and registers no GPU; a
// worker gets --num-gpus=1, sees exactly one CUDA device, registers GPU=1 and, for slices, the
// slice's memory as the gpu_memory_mib resource.
func (d *demo) check(rp rayPod, kind string, want workerGPU) {
	name := rp.pod.Name
	wantGPU := 0
	if kind == "worker" {
		wantGPU = 1
	}
	if !strings.Contains(rp.rayStart, fmt.Sprintf("--num-gpus=%d", wantGPU)) {
		d.problem("%s: ray start line lacks --num-gpus=%d: %s", name, wantGPU, rp.rayStart)
	}
	if !strings.Contains(" "+rp.registered+" ", fmt.Sprintf(" GPU=%d ", wantGPU)) {
		d.problem("%s: Ray registered %q, want GPU=%d", name, rp.registered, wantGPU)
	}
	if wantGPU == 0 {
		if rp.alloc != nil {
			d.problem("%s: a head without GPU request got an allocation", name)
		}
		return
	}
	if rp.alloc == nil || len(rp.alloc.Containers) != 1 || len(rp.alloc.Containers[0].Devices) != 1 {
		d.problem("%s: want exactly one GPU allocated, got %+v", name, rp.alloc)
		return
	}
	g := rp.alloc.Containers[0].Devices[0]
	if n := len(strings.Split(rp.cudaSeen, ",")); rp.cudaSeen == "" || n != 1 {
		d.problem("%s: CUDA_VISIBLE_DEVICES=%q, want one entry", name, rp.cudaSeen)
	}
	if want.memMiB > 0 {
		if g.MemoryMiB != want.memMiB || g.CoresPercent != want.cores {
			d.problem("%s: slice %d MiB / %d%%, want %d MiB / %d%%", name, g.MemoryMiB, g.CoresPercent, want.memMiB, want.cores)
		}
		if !strings.Contains(" "+rp.registered+" ", fmt.Sprintf(" gpu_memory_mib=%d ", want.memMiB)) {
			d.problem("%s: Ray registered %q, want gpu_memory_mib=%d", name, rp.registered, want.memMiB)
		}
	}
}

// metrics prints a few lines of the device plugin's metrics endpoint (on the node's own address,
// inside the network namespace the local cluster made).
func (d *demo) metrics(ctx context.Context, inv device.Inventory) {
	fmt.Fprintf(d.out, "\n== Metrics (%s, http://<node>:%d/metrics) ==\n", d.agent.name, d.agent.metricsPort)
	n, err := d.kube.CoreV1().Nodes().Get(ctx, d.node, metav1.GetOptions{})
	if err != nil {
		d.problem("node %s: %v", d.node, err)
		return
	}
	addr := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			addr = a.Address
		}
	}
	if !strings.HasPrefix(addr, "10.200.0.") {
		d.problem("node %s has address %q, not one of the local cluster's network namespaces; not scraping it", d.node, addr)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, fmt.Sprintf("http://%s:%d/metrics", addr, d.agent.metricsPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.problem("metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	shown := 0
	for _, l := range strings.Split(string(body), "\n") {
		if (strings.HasPrefix(l, "hami_go_gpu_") || strings.HasPrefix(l, "hami_go_slice_memory_limit")) && strings.Contains(l, inv.GPUs[0].UUID) && shown < 12 {
			fmt.Fprintln(d.out, "  "+l)
			shown++
		}
	}
	if shown == 0 {
		d.problem("metrics: no hami_go_gpu_ series for %s", inv.GPUs[0].UUID)
	}
	d.gpuView(ctx, inv)
}

// gpuView prints what `kubectl hami-go` shows for the demo's node (pkg/gpuview, called directly)
// and checks it against the pods: the node is Ready and every GPU's booked MiB is the sum of the
// slices the demo's pods hold on it.
func (d *demo) gpuView(ctx context.Context, inv device.Inventory) {
	fmt.Fprintf(d.out, "\n== kubectl hami-go (the plugin's view of the node) ==\n")
	cfg := gpuview.DefaultConfig()
	objs, err := gpuview.List(ctx, d.kube, cfg)
	if err != nil {
		d.problem("kubectl hami-go: %v", err)
		return
	}
	v := gpuview.Build(objs, cfg, time.Now())
	var node *gpuview.Node
	for i := range v.Nodes {
		if v.Nodes[i].Name == d.node {
			node = &v.Nodes[i]
			v.Nodes = v.Nodes[i : i+1] // only the demo's node
			break
		}
	}
	if node == nil {
		d.problem("kubectl hami-go: node %s not in the view", d.node)
		return
	}
	if err := gpuview.WriteTable(d.out, &v); err != nil {
		d.problem("kubectl hami-go: %v", err)
	}
	if node.Status != gpuview.StatusReady || len(node.Errors) > 0 || len(node.GPUs) != len(inv.GPUs) {
		d.problem("kubectl hami-go: node %s is %s (%s), %d GPUs of %d, errors %v", d.node, node.Status, node.Problem, len(node.GPUs), len(inv.GPUs), node.Errors)
	}
	for _, g := range node.GPUs {
		var sum int64
		for _, s := range g.Slices {
			sum += s.MemoryMiB
		}
		if g.BookedMiB != sum {
			d.problem("kubectl hami-go: GPU-%d booked %d MiB, its slices hold %d", g.Index, g.BookedMiB, sum)
		}
	}
}

func allocationOf(p *corev1.Pod) *device.Allocation {
	for _, k := range []string{device.AnnoClaimed, device.AnnoPlanned} {
		if s, ok := p.Annotations[k]; ok {
			if a, err := device.DecodeAllocation(s); err == nil {
				return &a
			}
		}
	}
	return nil
}

func rayStartLine(p *corev1.Pod) string {
	c := p.Spec.Containers[0]
	for _, s := range append(append([]string{}, c.Command...), c.Args...) {
		if i := strings.Index(s, "ray start"); i >= 0 {
			return strings.TrimSpace(s[i:])
		}
	}
	return "(no ray start line)"
}

func podReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	return p.Status.Reason
}

// fieldOf returns the value of KEY in a "KEY=value KEY2=value2" line.
func fieldOf(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
