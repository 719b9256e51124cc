package gpuview

import (
	"fmt"
	"sort"

	"github.com/hami-go/hami-go/pkg/draapi"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DRA source (docs/design.md "DRA mode"): hami-go's DRA driver publishes each GPU as one device
// of a ResourceSlice with consumable capacities `memory` (bytes) and `cores` (percent); a
// ResourceClaim's allocation result names the device and the capacity it consumed
// (resource.k8s.io/v1 DeviceRequestAllocationResult.ConsumedCapacity, KEP-5075). The view reads
// those as it reads the device-plugin annotations: one GPU row per device, one slice per
// allocation result.
// The driver's names are pkg/draapi's; attributes that are absent fall back to the device
// name (uuid), the device's position in its slice (index) and "" (model).
const (
	bytesPerMiB     = 1 << 20
	sourceAllocated = "allocated"
)

// draDevice is one published device and where its row is.
type draDevice struct {
	d    *resourcev1.Device
	gpu  *GPU
	excl bool
}

// draRow is one published device of a node before its GPU row is placed: key is
// pool + "/" + device.
type draRow struct {
	key  string
	d    *resourcev1.Device
	gpu  GPU
	excl bool
}

// draNodes builds the node rows of the DRA source: every node with a ResourceSlice of draapi.DriverName,
// its devices as GPUs and the claims' allocation results as slices.
func draNodes(slices []resourcev1.ResourceSlice, claims []resourcev1.ResourceClaim) map[string]*Node {
	nodes := map[string]*Node{}
	rows := map[string][]draRow{}
	for i := range slices {
		s := &slices[i]
		if s.Spec.Driver != draapi.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		name := *s.Spec.NodeName
		n := nodes[name]
		if n == nil {
			n = &Node{Name: name, Mode: ModeDRA, Status: StatusReady}
			nodes[name] = n
		}
		for di := range s.Spec.Devices {
			d := &s.Spec.Devices[di]
			g := deviceGPU(n, d, len(rows[name]))
			excl := d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations
			rows[name] = append(rows[name], draRow{key: s.Spec.Pool.Name + "/" + d.Name, d: d, gpu: g, excl: excl})
		}
	}
	devs := placeDRARows(nodes, rows)
	for i := range claims {
		chargeDRAClaim(&claims[i], devs)
	}
	sortDRASlices(nodes)
	return nodes
}

// deviceGPU is the GPU row of device d of node n, at position index in its node's devices:
// its UUID, model and index attributes, memory capacity and health from its taints. The
// first sharers capacity seen sets n's SplitCount.
func deviceGPU(n *Node, d *resourcev1.Device, index int) GPU {
	g := GPU{Index: index, UUID: d.Name, Health: "Healthy"}
	if a, ok := d.Attributes[draapi.AttrUUID]; ok && a.StringValue != nil {
		g.UUID = *a.StringValue
	}
	if a, ok := d.Attributes[draapi.AttrModel]; ok && a.StringValue != nil {
		g.Model = *a.StringValue
	}
	if a, ok := d.Attributes[draapi.AttrIndex]; ok && a.IntValue != nil {
		g.Index = int(*a.IntValue)
	}
	if c, ok := d.Capacity[draapi.CapacityMemory]; ok {
		g.MemoryMiB = mibOf(c.Value)
		g.CapacityMiB = g.MemoryMiB
	}
	if c, ok := d.Capacity[draapi.CapacitySharers]; ok && n.SplitCount == 0 {
		n.SplitCount = int(c.Value.Value())
	}
	for _, t := range d.Taints {
		if t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute {
			g.Health = "Unhealthy"
		}
	}
	return g
}

// placeDRARows sets each node's GPUs from its rows in index order (an empty list where it has
// none) and returns, by pool + "/" + device, where each device's row is.
func placeDRARows(nodes map[string]*Node, rows map[string][]draRow) map[string]*draDevice {
	// Rows in index order; then point at them (the slice is not moved again).
	devs := map[string]*draDevice{}
	for name, rs := range rows {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].gpu.Index < rs[j].gpu.Index })
		n := nodes[name]
		n.GPUs = make([]GPU, len(rs))
		for i, r := range rs {
			n.GPUs[i] = r.gpu
			devs[r.key] = &draDevice{d: r.d, gpu: &n.GPUs[i], excl: r.excl}
		}
	}
	for _, n := range nodes {
		if n.GPUs == nil {
			n.GPUs = []GPU{}
		}
	}
	return devs
}

// chargeDRAClaim charges the allocation results of claim c for draapi.DriverName to the devices'
// rows in devs, as slices of the pod the claim is reserved for.
func chargeDRAClaim(c *resourcev1.ResourceClaim, devs map[string]*draDevice) {
	if c.Status.Allocation == nil {
		return
	}
	pod := ""
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" {
			pod = r.Name
			break
		}
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != draapi.DriverName {
			continue
		}
		d := devs[r.Pool+"/"+r.Device]
		if d == nil {
			continue // a device no slice publishes (any more): nothing to show it on
		}
		u := consumed(d.d, &r)
		mib, cores := mibOf(*resource.NewQuantity(u[draapi.CapacityMemory], resource.BinarySI)), int(u[draapi.CapacityCores])
		if _, stated := r.ConsumedCapacity[draapi.CapacityCores]; !stated && d.excl {
			cores = 100 // a device that cannot be shared is the claim's whole
		}
		d.gpu.BookedMiB += mib
		d.gpu.BookedCoresPercent += cores
		d.gpu.Sharers++
		d.gpu.Exclusive = d.gpu.Exclusive || d.excl || cores >= 100
		d.gpu.Slices = append(d.gpu.Slices, Slice{
			Namespace: c.Namespace, Pod: pod, Container: r.Request, Kind: "claim",
			MemoryMiB: mib, CoresPercent: cores, Source: sourceAllocated, Claim: c.Name,
		})
	}
}

// sortDRASlices orders the slices of every GPU row by namespace and claim name.
func sortDRASlices(nodes map[string]*Node) {
	for _, n := range nodes {
		for gi := range n.GPUs {
			sl := n.GPUs[gi].Slices
			sort.Slice(sl, func(i, j int) bool {
				return fmt.Sprint(sl[i].Namespace, "/", sl[i].Claim) < fmt.Sprint(sl[j].Namespace, "/", sl[j].Claim)
			})
		}
	}
}

// consumed is what allocation result r takes of device d, in the capacities' own units (memory
// in bytes, cores in percent, sharers): its ConsumedCapacity (resource.k8s.io/v1, KEP-5075), and
// where a key is absent the driver's defaults: the device's whole memory and one sharer. The nodes
// view and why charge devices with it.
func consumed(d *resourcev1.Device, r *resourcev1.DeviceRequestAllocationResult) map[resourcev1.QualifiedName]int64 {
	u := map[resourcev1.QualifiedName]int64{draapi.CapacitySharers: 1}
	if c, ok := d.Capacity[draapi.CapacityMemory]; ok {
		u[draapi.CapacityMemory] = c.Value.Value()
	}
	for k, q := range r.ConsumedCapacity {
		u[k] = q.Value()
	}
	return u
}

// mibOf is a byte quantity in MiB, rounded up (the quantity rule of pkg/device: never book less).
func mibOf(q resource.Quantity) int64 {
	b := q.Value()
	return (b + bytesPerMiB - 1) / bytesPerMiB
}
