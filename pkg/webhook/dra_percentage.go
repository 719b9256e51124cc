package webhook

import (
	"fmt"
	"sort"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// DeviceShape is what a container's claim may depend on of one published GPU: its bookable
// memory (the `memory` capacity, MiB) and its split count (the `sharers` capacity).
type DeviceShape struct {
	// MemoryMiB is the device's memory capacity in MiB.
	MemoryMiB int64
	// Sharers is the device's sharers capacity (the driver's split count).
	Sharers int64
}

// Fleet lists the distinct device shapes the DRA driver publishes in the cluster (its
// ResourceSlices), sorted by memory, then sharers. It must be cheap: it is called on every
// admission that needs it.
type Fleet interface {
	Shapes() []DeviceShape
}

// variant is one way to satisfy a container's request on GPUs of one kind: the capacity to ask
// and the selectors that pin the kind.
type variant struct {
	memMiB    int64 // 0: the capacity's default (all of it)
	sharers   int64 // 0: the default (1)
	selectors []string
}

// variants returns the ways to serve cr (device.ContainerRequest) on the fleet:
//   - memory in MiB or 100 % (also the default when no memory is given), not exclusive: one
//     variant, no pinning (a percentage of 100 is the capacity's default, all of it);
//   - memory in percent below 100: one variant per distinct GPU memory size, asking that
//     percentage of it (device.PercentOfMiB, rounded up as in device-plugin mode, case C08),
//     pinned to GPUs of that size by a selector on the memory capacity;
//   - exclusive (cores 100): every sharer of the GPU (the `sharers` capacity), one variant per
//     distinct split count, pinned to GPUs of that split count (a GPU with a larger split count
//     would otherwise take the claim and still admit others).
//
// Variants come smallest memory first (firstAvailable tries them in order, so small GPUs are
// used before large ones), then by split count. An error names field and value: no GPU
// published yet (the request depends on sizes nobody has published), or more variants than
// firstAvailable takes (resourceapi.FirstAvailableDeviceRequestMaxSize, 8).
func variants(field string, cr device.ContainerRequest, fleet Fleet) ([]variant, error) {
	byPct := cr.MemoryMiB == 0 && cr.MemoryPercent > 0 && cr.MemoryPercent < 100
	excl := cr.Exclusive()
	if !byPct && !excl {
		return []variant{{memMiB: cr.MemoryMiB}}, nil
	}
	var shapes []DeviceShape
	if fleet != nil {
		shapes = fleet.Shapes()
	}
	if len(shapes) == 0 {
		return nil, fmt.Errorf("%s: no GPU of driver %s is published in the cluster (no ResourceSlices), so a %s cannot be turned into a ResourceClaim; retry when the DRA driver runs, or ask for GPU memory in MiB", field, draapi.DriverName, pctOrExclusive(byPct, excl))
	}
	seen := map[DeviceShape]bool{}
	var out []variant
	for _, s := range shapes {
		k := DeviceShape{}
		if byPct {
			k.MemoryMiB = s.MemoryMiB
		}
		if excl {
			k.Sharers = s.Sharers
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		v := variant{memMiB: cr.MemoryMiB}
		if byPct {
			v.memMiB = device.PercentOfMiB(s.MemoryMiB, cr.MemoryPercent)
			v.selectors = append(v.selectors, fmt.Sprintf("%s.compareTo(quantity(%s)) == 0", celCapacity(draapi.CapacityMemory), strconv.Quote(strconv.FormatInt(s.MemoryMiB, 10)+"Mi")))
		}
		if excl {
			v.sharers = s.Sharers
			v.selectors = append(v.selectors, fmt.Sprintf("%s.compareTo(quantity(%s)) == 0", celCapacity(draapi.CapacitySharers), strconv.Quote(strconv.FormatInt(s.Sharers, 10))))
		}
		out = append(out, v)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].memMiB != out[j].memMiB {
			return out[i].memMiB < out[j].memMiB
		}
		return out[i].sharers < out[j].sharers
	})
	if len(out) > resourceapi.FirstAvailableDeviceRequestMaxSize {
		return nil, fmt.Errorf("%s: the cluster has %d kinds of GPU (memory size%s), more than the %d alternatives a ResourceClaim's firstAvailable list takes, so a %s cannot be turned into one claim; ask for GPU memory in MiB, or narrow the GPUs with %s", field, len(out), map[bool]string{true: " and split count", false: ""}[excl && byPct], resourceapi.FirstAvailableDeviceRequestMaxSize, pctOrExclusive(byPct, excl), device.AnnoUseGPUType)
	}
	return out, nil
}

func pctOrExclusive(byPct, excl bool) string {
	switch {
	case byPct && excl:
		return "percentage of GPU memory on an exclusive GPU"
	case byPct:
		return "percentage of GPU memory"
	}
	return "exclusive GPU (cores 100)"
}

// capacity returns the capacity requests of one variant: memory (bytes, whole MiB) unless it
// is the default, cores when 1..100, sharers when exclusive.
func (v variant) capacity(cores int) *resourceapi.CapacityRequirements {
	req := map[resourceapi.QualifiedName]resource.Quantity{}
	if v.memMiB > 0 {
		req[draapi.CapacityMemory] = *resource.NewQuantity(v.memMiB<<20, resource.BinarySI)
	}
	if cores > 0 {
		req[draapi.CapacityCores] = *resource.NewQuantity(int64(cores), resource.DecimalSI)
	}
	if v.sharers > 0 {
		req[draapi.CapacitySharers] = *resource.NewQuantity(v.sharers, resource.DecimalSI)
	}
	if len(req) == 0 {
		return nil
	}
	return &resourceapi.CapacityRequirements{Requests: req}
}
