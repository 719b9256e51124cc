package device

// ResourceGPUMemory is hami-go's synthetic extended resource for GPU memory, in MiB (a plain
// integer quantity: "60000" = 60000 MiB, never a suffix). It is not a slice resource: pods
// never ask for it. hami-go's mutating webhook is its only writer on pods (it writes each GPU
// container's charge into requests and limits, overwriting whatever the pod had), and the node
// agents are its only writers on nodes (status capacity and allocatable: the memory the node's
// GPUs offer). So the API server's own machinery counts GPU memory: ResourceQuota
// (`requests.hami-go.io/gpu-memory`), NodeResourcesFit, the kubelet's admission, Cluster
// Autoscaler's node templates and `kubectl describe node` (docs/design.md, "GPU memory as a
// synthetic extended resource").
const ResourceGPUMemory = Prefix + "gpu-memory"

// QuotaResourceGPUMemory is the ResourceQuota key that caps ResourceGPUMemory in a namespace
// (Kubernetes quota knows extended resources only under the requests. prefix).
const QuotaResourceGPUMemory = "requests." + ResourceGPUMemory

// NodeGPUMemoryMiB is the figure a node publishes as capacity and allocatable of
// ResourceGPUMemory: the sum over the given per-GPU bookable figures (MiB, after the reserve and
// the memory scaling, exactly what the extender or the DRA allocator may place on each GPU).
// Unhealthy GPUs count too: their pods keep their bookings, and leaving them out could make
// NodeResourcesFit refuse a pod the extender would place on a healthy GPU of the node; the
// extender and DRA's device taints keep new pods off them.
func NodeGPUMemoryMiB(bookableMiB []int64) int64 {
	var sum int64
	for _, m := range bookableMiB {
		if m > 0 {
			sum += m
		}
	}
	return sum
}
