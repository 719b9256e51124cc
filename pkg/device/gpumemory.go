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

// ResourceGPUCores is hami-go's synthetic extended resource for GPU compute, in percent of one
// GPU's streaming multiprocessors (a plain integer quantity: "150" = one and a half GPUs'
// worth). Like ResourceGPUMemory it is written on pods by hami-go's webhook only (each GPU
// container's GPUs × cores percent per GPU, 100 per GPU for an exclusive container) and on
// nodes by the node agents only (100 per GPU), so a ResourceQuota on QuotaResourceGPUCores caps
// a namespace's compute as HAMi's `limits.nvidia.com/gpucores` quota does (HAMi
// pkg/device/quota.go counts cores per device × count).
const ResourceGPUCores = Prefix + "gpu-cores"

// QuotaResourceGPUCores is the ResourceQuota key that caps ResourceGPUCores in a namespace.
const QuotaResourceGPUCores = "requests." + ResourceGPUCores
