package gpuview

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hami-go/hami-go/pkg/draapi"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// explainDRA fills e for a pod with gpu.hami-go.io claims (claims/raw from draUses): a pod
// whose claims are all allocated shows them; otherwise each node with devices of the class
// answers whether every unallocated request fits there now, and why not per device.
func explainDRA(e *Explanation, pod *corev1.Pod, objs Objects, claims []DRAClaim, raw []*resourcev1.ResourceClaim) {
	e.Mode, e.Claims = ModeDRA, claims
	pending := 0
	for i := range claims {
		if raw[i].Status.Allocation == nil {
			pending++
		}
	}
	switch {
	case e.Node != "":
		e.Note = "bound to node " + e.Node + "; its claims' devices are below"
		return
	case pending == 0 && len(claims) > 0:
		e.Note = "its claims are allocated; kube-scheduler binds it next"
		return
	case len(claims) == 0:
		e.Note = "its gpu.hami-go.io claims cannot be read (below)"
		return
	}
	order, devs := draInventory(objs)
	fits := 0
	for _, n := range order {
		f := NodeFit{Node: n}
		f.Reason = fitNode(devs[n], claims, raw, true)
		if f.Reason == "" {
			f.Fits = true
			fits++
		} else if fitNode(devs[n], claims, raw, false) != "" {
			f.Reason += " (even with the node's devices free)"
			f.Unresolvable = true
		}
		e.Nodes = append(e.Nodes, f)
	}
	sort.SliceStable(e.Nodes, func(i, j int) bool { return e.Nodes[i].Fits && !e.Nodes[j].Fits })
	switch {
	case len(order) == 0:
		e.Note = "no node publishes a ResourceSlice of driver " + draapi.DriverName
	case fits > 0:
		e.Note = "its claims fit on " + itoa(fits) + " node(s) now; kube-scheduler retries it on the next cluster event (its other filters may still refuse a node)"
	default:
		e.Note = "its claims fit on no node now (kube-scheduler: \"cannot allocate all claims\")"
	}
}

// fitNode is "" when every unallocated request of claims fits on devs (greedily, in order, a
// device picked for one request is charged before the next), else the first request's reason:
// `claim C request "R" (1 device, 90000 MiB, 25% cores): gpu-0 81920 MiB free of 81920 (too small); …`.
// withUsage false judges the node as if no claim were allocated.
func fitNode(devs []*draDev, claims []DRAClaim, raw []*resourcev1.ResourceClaim, withUsage bool) string {
	extra := map[*draDev]*charge{}
	for ci := range claims {
		if raw[ci].Status.Allocation != nil {
			continue
		}
		for _, r := range raw[ci].Spec.Devices.Requests {
			x := r.Exactly
			if x == nil || x.DeviceClassName != draapi.DriverName {
				continue
			}
			req := draRequest(r.Name, x)
			var ok []*draDev
			var why []string
			for _, d := range devs {
				if msg := deviceFit(d, x, extra[d], withUsage); msg != "" {
					why = append(why, d.d.Name+" "+msg)
					continue
				}
				ok = append(ok, d)
			}
			need := int(req.Count)
			if req.All {
				need = len(devs)
			}
			if len(ok) >= need && need > 0 {
				for _, d := range ok[:need] {
					if extra[d] == nil {
						extra[d] = &charge{used: map[resourcev1.QualifiedName]int64{}}
					}
					for k, v := range asks(d, x) {
						extra[d].used[k] += v
					}
					extra[d].n++
				}
				continue
			}
			head := "claim " + claims[ci].Claim + " " + describeDRARequest(&req)
			if len(ok) > 0 {
				names := make([]string, len(ok))
				for i, d := range ok {
					names[i] = d.d.Name
				}
				why = append([]string{fmt.Sprintf("%d of %d devices fit (%s)", len(ok), need, strings.Join(names, ", "))}, why...)
			}
			if len(devs) == 0 {
				why = append(why, "no device")
			}
			return head + ": " + strings.Join(why, "; ")
		}
	}
	return ""
}

// charge is what this pod's earlier requests took of a device while fitNode places them:
// capacity per name (bytes, percent, sharers) and the number of requests.
type charge struct {
	used map[resourcev1.QualifiedName]int64
	n    int64
}

// asks is what x consumes of d per capacity: the request's value, else the device's
// requestPolicy default, else the whole capacity (resource.k8s.io/v1 DeviceCapacity, KEP-5075).
func asks(d *draDev, x *resourcev1.ExactDeviceRequest) map[resourcev1.QualifiedName]int64 {
	out := map[resourcev1.QualifiedName]int64{}
	for k, c := range d.d.Capacity {
		switch {
		case x.Capacity != nil && hasKey(x.Capacity.Requests, k):
			q := x.Capacity.Requests[k]
			out[k] = q.Value()
		case c.RequestPolicy != nil && c.RequestPolicy.Default != nil:
			out[k] = c.RequestPolicy.Default.Value()
		default:
			out[k] = c.Value.Value()
		}
	}
	return out
}

func hasKey[V any](m map[resourcev1.QualifiedName]V, k resourcev1.QualifiedName) bool {
	_, ok := m[k]
	return ok
}

// deviceFit is "" when x fits on d now, else why: a taint not tolerated, a selector that does not
// match, the device held whole by another claim, or each capacity whose free part is too small
// (memory in MiB, cores in percent, sharers used of the split count), comma-separated.
func deviceFit(d *draDev, x *resourcev1.ExactDeviceRequest, extra *charge, withUsage bool) string {
	if extra == nil {
		extra = &charge{}
	}
	for _, t := range d.d.Taints {
		if (t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute) && !tolerated(x.Tolerations, &t) {
			if t.Key == draapi.TaintUnhealthy {
				return "tainted unhealthy (" + t.Value + ")"
			}
			return "tainted " + t.Key + "=" + t.Value + ":" + string(t.Effect)
		}
	}
	for _, s := range x.Selectors {
		if s.CEL == nil {
			continue
		}
		if sel, ok := parseSelector(s.CEL.Expression); ok && !sel.matches(d.d) {
			return "selector " + s.CEL.Expression + " does not match"
		}
	}
	for k := range asks(d, x) {
		if _, ok := d.d.Capacity[k]; !ok {
			return "publishes no capacity " + string(k)
		}
	}
	if x.Capacity != nil {
		for k := range x.Capacity.Requests {
			if _, ok := d.d.Capacity[k]; !ok {
				return "publishes no capacity " + string(k)
			}
		}
	}
	n := extra.n
	if withUsage {
		n += int64(len(d.owners))
	}
	if d.d.AllowMultipleAllocations == nil || !*d.d.AllowMultipleAllocations {
		if n > 0 {
			held := "this pod"
			if withUsage && len(d.owners) > 0 {
				held = "claim " + d.owners[0]
			}
			return "held whole by " + held + " (not shareable)"
		}
		return ""
	}
	a := asks(d, x)
	var short []string
	for _, k := range []resourcev1.QualifiedName{draapi.CapacityMemory, draapi.CapacityCores, draapi.CapacitySharers} {
		c, ok := d.d.Capacity[k]
		if !ok {
			continue
		}
		total, used := c.Value.Value(), extra.used[k]
		if withUsage {
			used += d.used[k]
		}
		if free := total - used; a[k] > free {
			switch k {
			case draapi.CapacityMemory:
				short = append(short, fmt.Sprintf("%d MiB free of %d (too small)", max(free, 0)/bytesPerMiB, total/bytesPerMiB))
			case draapi.CapacityCores:
				short = append(short, fmt.Sprintf("%d%% cores free", max(free, 0)))
			default:
				short = append(short, fmt.Sprintf("%d/%d sharers used", used, total))
			}
		}
	}
	return strings.Join(short, ", ")
}

// tolerated applies resource.k8s.io/v1 DeviceToleration matching: key (empty with Exists:
// any), operator Equal (default) or Exists, effect (empty: any).
func tolerated(ts []resourcev1.DeviceToleration, t *resourcev1.DeviceTaint) bool {
	for _, tol := range ts {
		if tol.Key != "" && tol.Key != t.Key {
			continue
		}
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		if tol.Operator == resourcev1.DeviceTolerationOpExists || tol.Value == t.Value {
			return true
		}
	}
	return false
}

// describeDRARequest is `request "gpu" (1 device, 90000 MiB, 25% cores)`; capacities not set
// read "memory default" etc. (the device's requestPolicy default, else whole).
func describeDRARequest(r *DRARequest) string {
	if r.Count == 0 && !r.All {
		return fmt.Sprintf("request %q (firstAvailable, not evaluated)", r.Name)
	}
	parts := []string{}
	switch {
	case r.All:
		parts = append(parts, "all devices")
	case r.Count == 1:
		parts = append(parts, "1 device")
	default:
		parts = append(parts, fmt.Sprintf("%d devices", r.Count))
	}
	if r.MemoryMiB != nil {
		parts = append(parts, fmt.Sprintf("%d MiB", *r.MemoryMiB))
	} else {
		parts = append(parts, "memory: device default")
	}
	if r.CoresPercent != nil {
		parts = append(parts, fmt.Sprintf("%d%% cores", *r.CoresPercent))
	}
	if r.Sharers != nil {
		parts = append(parts, fmt.Sprintf("%d sharers", *r.Sharers))
	}
	if len(r.NotEvaluated) > 0 {
		parts = append(parts, fmt.Sprintf("%d selector(s) not evaluated", len(r.NotEvaluated)))
	}
	return fmt.Sprintf("request %q (%s)", r.Name, strings.Join(parts, ", "))
}
