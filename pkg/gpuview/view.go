package gpuview

import (
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// APIVersion and Kinds of the `-o json|yaml` documents. The schema is stable within an
// APIVersion: fields are only added, never renamed or removed (docs/components.md).
const (
	APIVersion      = "gpuview.hami-go.io/v1"
	KindView        = "GPUView"
	KindExplanation = "GPUPodExplanation"
)

// Mode says which source a node's figures come from.
type Mode string

const (
	// ModeDevicePlugin: the Node's inventory annotation, the Pods' allocation annotations and
	// the device plugin's Lease (the extender mode).
	ModeDevicePlugin Mode = "device-plugin"
	// ModeDRA: ResourceSlices of driver gpu.hami-go.io and ResourceClaims' allocations (dra.go).
	ModeDRA Mode = "dra"
)

// NodeStatus is a node's state for GPU placement, as the extender judges it.
type NodeStatus string

const (
	// StatusReady: inventory published and Lease renewed within StaleAfter.
	StatusReady NodeStatus = "Ready"
	// StatusStale: the Lease is older than StaleAfter; the extender places no pod there.
	StatusStale NodeStatus = "Stale"
	// StatusNoHeartbeat: inventory but no Lease hami-go-<node>.
	StatusNoHeartbeat NodeStatus = "NoHeartbeat"
	// StatusUnenforced: the node's enforcement (HAMi-core's library, the MPS daemon) is
	// missing; the extender places no pod there (Problem says what is missing).
	StatusUnenforced NodeStatus = "Unenforced"
	// StatusReleased: the device plugin released its Lease (it does not serve the kubelet now:
	// restarting, or started and not registered yet); the extender places no pod there.
	StatusReleased NodeStatus = "Released"
	// StatusNoInventory: no inventory annotation (no device plugin, or not yet).
	StatusNoInventory NodeStatus = "NoInventory"
	// StatusMalformed: the inventory annotation does not decode (Problem says why).
	StatusMalformed NodeStatus = "Malformed"
)

// Objects are the API objects a view is built from (load.go lists them). ResourceSlices and
// ResourceClaims feed the DRA source (dra.go); both may be empty.
type Objects struct {
	Nodes          []corev1.Node
	Pods           []corev1.Pod
	Leases         []coordinationv1.Lease
	ResourceSlices []resourcev1.ResourceSlice
	ResourceClaims []resourcev1.ResourceClaim
}

// View is what `kubectl hami-go nodes` shows (`-o json|yaml`: this struct).
type View struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Time is when the view was built (RFC 3339), the reference of staleness.
	Time time.Time `json:"time"`
	// Nodes by name; every Node of the cluster, and any node a pod is bound to.
	Nodes []Node `json:"nodes"`
}

// Node is one node's GPUs and what is booked on them.
type Node struct {
	Name string `json:"name"`
	Mode Mode   `json:"mode"`
	// Status and, when not Ready, Problem: the extender's own reason text for the node
	// ("inventory stale since …", "no inventory from device plugin", …).
	Status  NodeStatus `json:"status"`
	Problem string     `json:"problem,omitempty"`
	// LeaseRenewTime is the device plugin's last heartbeat (Lease spec.renewTime, else
	// spec.acquireTime); absent without a Lease.
	LeaseRenewTime *time.Time `json:"leaseRenewTime,omitempty"`
	// SplitCount is how many containers may share one GPU; MemoryScaling the memory
	// over-commit factor (inventory fields; 0 without an inventory).
	SplitCount    int     `json:"splitCount,omitempty"`
	MemoryScaling float64 `json:"memoryScaling,omitempty"`
	// Enforcement is the node's slice enforcement as its agent published it (mode, ready, the
	// library's version and sha256, the fail-open window); absent from agents that predate it.
	Enforcement *device.Enforcement `json:"enforcement,omitempty"`
	// ModeSwitch, during a mode switch (issue 28), is what the node's arriving agent waits for
	// before it serves the node's GPUs: its preflight condition's message (reason
	// preflight.FindingOldModeInUse). New GPU pods wait meanwhile.
	ModeSwitch string `json:"modeSwitch,omitempty"`
	// GPUs in inventory (NVML index) order.
	GPUs []GPU `json:"gpus"`
	// Errors are what could not be read on this node: a pod's malformed allocation annotation,
	// an allocation naming a GPU the inventory lacks. The extender ignores the same records.
	Errors []string `json:"errors,omitempty"`
}

// GPU is one physical GPU and its booking, figures as the extender charges them.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// Health is "Healthy", "Unhealthy" (after a fatal XID) or "MIG" (MIG mode: not sliced).
	Health string `json:"health"`
	// MemoryMiB is the GPU's memory; CapacityMiB what may be booked (× memory scaling), MiB.
	MemoryMiB   int64 `json:"memoryMiB"`
	CapacityMiB int64 `json:"capacityMiB"`
	// BookedMiB, BookedCoresPercent and Sharers are the sum over the pods on the GPU of each
	// pod's charge (allocator.ChargeOf: per GPU the largest sum over the pod's phases, so an
	// init container and the app container it precedes count once).
	BookedMiB          int64 `json:"bookedMiB"`
	BookedCoresPercent int   `json:"bookedCoresPercent"`
	Sharers            int   `json:"sharers"`
	// Exclusive is true while a container with 100 percent cores holds the GPU.
	Exclusive bool `json:"exclusive,omitempty"`
	// Slices are the containers holding a slice of this GPU.
	Slices []Slice `json:"slices,omitempty"`
}

// Slice is one container's share of one GPU.
type Slice struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Kind is init, sidecar or app; "claim" for a DRA allocation (Container is then the claim's
	// request name).
	Kind string `json:"kind"`
	// MemoryMiB and CoresPercent are the container's limits on this GPU (CoresPercent 0 = none).
	MemoryMiB    int64 `json:"memoryMiB"`
	CoresPercent int   `json:"coresPercent"`
	// Source is "claimed" (the device plugin handed it out), "planned" (the extender planned
	// it; not yet allocated by the kubelet) or "allocated" (a DRA claim's allocation result).
	Source string `json:"source"`
	// Claim is the ResourceClaim's name (DRA source only; Pod is the pod it is reserved for,
	// empty while none is).
	Claim string `json:"claim,omitempty"`
}

// Build returns the view of objs at time now: per node and GPU, what the extender would charge
// (device-plugin nodes), or what the DRA claims consumed (DRA nodes, dra.go).
// It never fails: what cannot be read is reported on its node (Node.Problem, Node.Errors).
func Build(objs Objects, cfg Config, now time.Time) View {
	c := newCluster(objs, cfg, now, nil)
	dra := draNodes(objs.ResourceSlices, objs.ResourceClaims)
	v := View{APIVersion: APIVersion, Kind: KindView, Time: now.UTC(), Nodes: make([]Node, 0, len(c.order))}
	for _, name := range c.order {
		row := c.nodes[name].row()
		if d := dra[name]; d != nil {
			delete(dra, name)
			if row.Status == StatusNoInventory && len(row.Errors) == 0 {
				row = *d // a DRA node: its Node object has no inventory annotation
			} else {
				row.Errors = append(row.Errors, "node also has ResourceSlices of "+draapi.DriverName+": one mode per node (docs/design.md)")
			}
		}
		v.Nodes = append(v.Nodes, row)
	}
	for _, d := range dra { // ResourceSlices of nodes without a Node object
		v.Nodes = append(v.Nodes, *d)
	}
	sort.SliceStable(v.Nodes, func(i, j int) bool { return v.Nodes[i].Name < v.Nodes[j].Name })
	switching := modeSwitches(objs.Nodes)
	for i := range v.Nodes {
		v.Nodes[i].ModeSwitch = switching[v.Nodes[i].Name]
	}
	return v
}
