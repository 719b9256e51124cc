package dra

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// Grant is one GPU of a prepared claim: the allocation result it came from and what it gives.
type Grant struct {
	// Request is the allocation result's request name ("req" or "req/subrequest").
	Request string `json:"request"`
	// Pool and Device name the published device.
	Pool   string `json:"pool"`
	Device string `json:"device"`
	// ShareID is the allocation's share id ("" when none).
	ShareID types.UID `json:"shareID,omitempty"`
	// UUID is the GPU's UUID.
	UUID string `json:"uuid"`
	// Model is the GPU's NVML model name.
	Model string `json:"model"`
	// PCIBusID is the GPU's NVML PCI bus id, which orders a claim's GPUs in its env
	// (gpuenv.PCIOrder); "" in a checkpoint written before it was recorded.
	PCIBusID string `json:"pciBusID,omitempty"`
	// MemoryMiB is the consumed memory, MiB.
	MemoryMiB int64 `json:"memoryMiB"`
	// CoresPercent is the consumed compute, percent (0 = none).
	CoresPercent int `json:"coresPercent"`
	// Sharers is the consumed sharers capacity (1, or the split count for an exclusive claim).
	Sharers int64 `json:"sharers"`
	// AdminAccess is the allocation result's adminAccess (resource.k8s.io/v1
	// DeviceRequestAllocationResult.AdminAccess, KEP-5018): the claim reaches the GPU (monitoring,
	// diagnostics) without holding any of it. kube-scheduler does not count such a result as
	// allocated, neither the device nor its consumed capacity (k8s.io/kubernetes
	// pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go,
	// foreachAllocatedDevice), so nothing here counts its MemoryMiB, CoresPercent or Sharers
	// against the GPU either (Consumes). Absent in a checkpoint written before it was recorded.
	AdminAccess bool `json:"adminAccess,omitempty"`
}

// Consumes reports whether g counts against its GPU's capacities (memory, cores, sharers): every
// grant but one with AdminAccess.
func (g Grant) Consumes() bool { return !g.AdminAccess }

// gpuView is what resolving a claim needs to know of this node's GPUs: device name -> GPU.
type gpuView struct {
	pool   string
	byName map[string]GPUInfo
	slice  SliceConfig
}

// resolve turns a claim's allocation results for this driver into grants, in the order of the
// results (the one order every positional limit follows). It refuses, naming the claim and the
// result: no allocation; a device in another pool or not on this node; missing consumed
// capacity; consumption that is not whole MiB, above the device's capacity or above what the
// claim's request allowed under the published request policy.
func (v *gpuView) resolve(claim *resourceapi.ResourceClaim) ([]Grant, error) {
	name := claim.Namespace + "/" + claim.Name
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", name)
	}
	var out []Grant
	for i, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != draapi.DriverName {
			continue
		}
		where := fmt.Sprintf("claim %s: allocation result %d (request %q, device %s/%s)", name, i, r.Request, r.Pool, r.Device)
		if r.Pool != v.pool {
			return nil, fmt.Errorf("%s: pool %q is not this node's pool %q", where, r.Pool, v.pool)
		}
		gi, ok := v.byName[r.Device]
		if !ok {
			return nil, fmt.Errorf("%s: device %q is not on node %s", where, r.Device, v.pool)
		}
		if len(r.ConsumedCapacity) == 0 {
			return nil, fmt.Errorf("%s: no consumed capacity (is the DRAConsumableCapacity feature gate on in kube-apiserver and kube-scheduler?)", where)
		}
		memCap := BookableMiB(gi.GPU, v.slice) * MiB
		caps := []struct {
			name    resourceapi.QualifiedName
			total   int64
			def     int64
			lo, stp int64
		}{
			{draapi.CapacityMemory, memCap, memCap, MiB, MiB},
			{draapi.CapacityCores, 100, 0, 0, 1},
			{draapi.CapacitySharers, int64(v.slice.SplitCount), 1, 1, 1},
		}
		got := map[resourceapi.QualifiedName]int64{}
		requested := requestCapacity(claim, r.Request)
		for _, c := range caps {
			q, ok := r.ConsumedCapacity[c.name]
			if !ok {
				return nil, fmt.Errorf("%s: consumed capacity %q is missing", where, c.name)
			}
			val := q.Value()
			if val < 0 || val > c.total {
				return nil, fmt.Errorf("%s: consumed %s %s is outside 0..%s, the device's capacity", where, c.name, q.String(), resource.NewQuantity(c.total, q.Format).String())
			}
			if c.name == draapi.CapacityMemory && val%MiB != 0 {
				return nil, fmt.Errorf("%s: consumed memory %s is not whole MiB", where, q.String())
			}
			allowed := c.def
			if rq, ok := requested[c.name]; ok {
				allowed = roundUp(rq.Value(), c.lo, c.stp)
			}
			if val > allowed {
				return nil, fmt.Errorf("%s: consumed %s %s is above the %s the request allowed", where, c.name, q.String(), resource.NewQuantity(allowed, q.Format).String())
			}
			got[c.name] = val
		}
		g := Grant{Request: r.Request, Pool: r.Pool, Device: r.Device, UUID: gi.GPU.UUID, Model: gi.GPU.Model, PCIBusID: gi.GPU.PCIBusID,
			MemoryMiB: got[draapi.CapacityMemory] / MiB, CoresPercent: int(got[draapi.CapacityCores]), Sharers: got[draapi.CapacitySharers]}
		if r.ShareID != nil {
			g.ShareID = *r.ShareID
		}
		if r.AdminAccess != nil {
			g.AdminAccess = *r.AdminAccess
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("claim %s has no device of driver %s", name, draapi.DriverName)
	}
	seen := map[string]bool{}
	for _, g := range out {
		if seen[g.UUID] {
			return nil, fmt.Errorf("claim %s: GPU %s (%s) is allocated twice in one claim", name, g.UUID, g.Device)
		}
		seen[g.UUID] = true
	}
	return out, nil
}

// roundUp applies a valid range's rounding (resource.k8s.io/v1 CapacityRequestPolicyRange): a
// request below min becomes min; otherwise it rounds up to min + n*step.
func roundUp(v, lo, step int64) int64 {
	if v <= lo {
		return lo
	}
	if step <= 0 {
		return v
	}
	return lo + (v-lo+step-1)/step*step
}

// requestCapacity returns the capacity requests of the claim's request (or subrequest) named
// "req" or "req/sub"; nil when it has none.
func requestCapacity(claim *resourceapi.ResourceClaim, name string) map[resourceapi.QualifiedName]resource.Quantity {
	main, sub, _ := strings.Cut(name, "/")
	for _, rq := range claim.Spec.Devices.Requests {
		if rq.Name != main {
			continue
		}
		if sub == "" {
			if rq.Exactly != nil && rq.Exactly.Capacity != nil {
				return rq.Exactly.Capacity.Requests
			}
			return nil
		}
		for _, s := range rq.FirstAvailable {
			if s.Name == sub && s.Capacity != nil {
				return s.Capacity.Requests
			}
		}
	}
	return nil
}

// envRequest is the shared builder's input for a claim's grants.
func envRequest(uid types.UID, grants []Grant) gpuenv.Request {
	r := gpuenv.Request{Grants: make([]gpuenv.Grant, len(grants)), CacheName: string(uid)}
	for i, g := range grants {
		r.Grants[i] = gpuenv.Grant{UUID: g.UUID, PCIBusID: g.PCIBusID, MemoryMiB: g.MemoryMiB, CoresPercent: g.CoresPercent}
	}
	if len(grants) > 0 {
		first := gpuenv.PCIOrder(r.Grants)[0].UUID
		for _, g := range grants {
			if g.UUID == first {
				r.Model = g.Model
				break
			}
		}
	}
	return r
}
