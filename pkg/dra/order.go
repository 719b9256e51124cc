package dra

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// DeviceOrder is the order of the devices in the published ResourceSlice (--device-order).
// kube-scheduler's device allocator (k8s.io/dynamic-resource-allocation/structured) takes the
// first devices of a node, in slice order, that satisfy a claim; it has no device scoring
// (docs/dra.md, "Placement in DRA mode"). The order is therefore the driver's only lever on
// which GPU of a node a claim lands on.
type DeviceOrder string

const (
	// OrderIndex publishes the GPUs in NVML index order, whatever their use: first-fit.
	OrderIndex DeviceOrder = "index"
	// OrderBinpack publishes the fullest GPU first (by the claims the driver prepared), so
	// first-fit takes the fullest GPU that fits: pkg/allocator's binpack GPU policy.
	OrderBinpack DeviceOrder = "binpack"
	// OrderSpread publishes the emptiest GPU first: pkg/allocator's spread GPU policy.
	OrderSpread DeviceOrder = "spread"
)

// ParseDeviceOrder checks a --device-order value; the error names flag and value.
func ParseDeviceOrder(flag, s string) (DeviceOrder, error) {
	switch o := DeviceOrder(s); o {
	case OrderIndex, OrderBinpack, OrderSpread:
		return o, nil
	}
	return "", fmt.Errorf("%s: %q is not index, binpack or spread", flag, s)
}

// GPUUse is what prepared claims hold of one GPU.
type GPUUse struct {
	// MemoryMiB is the consumed memory, MiB.
	MemoryMiB int64
	// Sharers is the consumed sharers capacity.
	Sharers int64
}

// UseOf sums the grants of prepared claims by GPU UUID, leaving out those with admin access
// (Grant.Consumes).
func UseOf(prepared []Prepared) map[string]GPUUse {
	out := map[string]GPUUse{}
	for _, p := range prepared {
		for _, g := range p.Grants {
			if !g.Consumes() {
				continue
			}
			u := out[g.UUID]
			u.MemoryMiB += g.MemoryMiB
			u.Sharers += g.Sharers
			out[g.UUID] = u
		}
	}
	return out
}

// Fullness is a GPU's use in thousandths of booked sharers (over the split count) plus
// thousandths of booked memory (over BookableMiB): 0..2000. It is pkg/allocator's GPU
// fullness (the extender's binpack/spread order), so both modes rank GPUs alike.
func Fullness(g GPUInfo, u GPUUse, c SliceConfig) int64 {
	var f int64
	if c.SplitCount > 0 {
		f = u.Sharers * 1000 / int64(c.SplitCount)
	}
	if m := BookableMiB(g.GPU, c); m > 0 {
		f += u.MemoryMiB * 1000 / m
	}
	return f
}

// Order returns the GPUs in the published order o: index order for OrderIndex; by Fullness,
// largest first (binpack) or smallest first (spread), ties in index order. It is pure and
// does not change gpus.
func Order(gpus []GPUInfo, use map[string]GPUUse, c SliceConfig, o DeviceOrder) []GPUInfo {
	out := slices.Clone(gpus)
	if o != OrderBinpack && o != OrderSpread {
		slices.SortStableFunc(out, func(a, b GPUInfo) int { return a.GPU.Index - b.GPU.Index })
		return out
	}
	full := make(map[string]int64, len(out))
	for _, g := range out {
		full[g.GPU.UUID] = Fullness(g, use[g.GPU.UUID], c)
	}
	slices.SortStableFunc(out, func(a, b GPUInfo) int {
		fa, fb := full[a.GPU.UUID], full[b.GPU.UUID]
		if fa != fb {
			if o == OrderSpread {
				return int(fa - fb)
			}
			return int(fb - fa)
		}
		return a.GPU.Index - b.GPU.Index
	})
	return out
}

// useChanged tells the republish loop that the prepared claims changed; it never blocks (one
// pending signal is enough: the loop reads the state when it publishes).
func (d *Driver) useChanged() {
	if d.cfg.DeviceOrder == OrderIndex {
		return
	}
	select {
	case d.reorder <- struct{}{}:
	default:
	}
}

// RepublishLoop republishes the ResourceSlice when prepared claims change the device order,
// until ctx ends. It waits d.cfg.RepublishDelay after the first change and publishes once for
// every change in that window (a debounce): at most one ResourceSlice update per delay, and
// none when the order is unchanged (the kubeletplugin helper compares too, so an equal slice
// costs no API call either). Run starts it; a program that drives the driver without the
// kubelet plugin helper (hack/bench/drapack: SetPublisher, PrepareResourceClaims) starts it
// itself.
func (d *Driver) RepublishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.reorder:
		}
		if d.cfg.RepublishDelay > 0 {
			select {
			case <-ctx.Done():
				return
			case <-d.opts.Clock.After(d.cfg.RepublishDelay):
			}
		}
		select { // changes during the delay are part of this publish
		case <-d.reorder:
		default:
		}
		d.publishIfReordered(ctx)
	}
}

// publishIfReordered publishes d.Resources() through the publisher when its device order
// differs from the last one published this way.
func (d *Driver) publishIfReordered(ctx context.Context) {
	res := d.Resources()
	var names []string
	for _, p := range res.Pools {
		for _, s := range p.Slices {
			for _, dev := range s.Devices {
				names = append(names, dev.Name)
			}
		}
	}
	d.hmu.Lock()
	pub := d.publisher
	same := slices.Equal(names, d.lastOrder)
	if !same && pub != nil {
		d.lastOrder = names
	}
	d.hmu.Unlock()
	if same || pub == nil {
		return
	}
	start := time.Now()
	if err := pub.PublishResources(ctx, res); err != nil {
		klog.ErrorS(err, "Republishing the ResourceSlice after a change of use failed", "node", d.cfg.NodeName)
		return
	}
	klog.V(4).InfoS("Republished the ResourceSlice in a new device order", "node", d.cfg.NodeName, "order", names, "took", time.Since(start))
}
