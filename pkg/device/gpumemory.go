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

// RequestedMemoryMiB is the GPU memory, MiB, that container c books in total, known before
// placement: Count GPUs × MemoryMiB per GPU. It is the figure the allocator's ChargeOf sums for
// c's devices in any allocation of c (each of c's GPUs gets MemoryMiB, case C40), so the webhook
// writes it as c's ResourceGPUMemory and Kubernetes' effective-request rule (case C03) adds it up
// per pod exactly as PodRequest.Phases does. ok is false when c asks a percentage of each GPU's
// memory (or no memory, which means 100%): its MiB depend on the card it lands on and are not
// known at admission.
func RequestedMemoryMiB(c ContainerRequest) (mib int64, ok bool) {
	if c.Count <= 0 {
		return 0, true
	}
	if c.MemoryMiB <= 0 {
		return 0, false
	}
	return int64(c.Count) * c.MemoryMiB, true
}

// RequestedCoresPercent is the GPU compute, percent of one GPU, that container c holds in total:
// Count GPUs × CoresPercent per GPU (an exclusive container: 100 per GPU). ok is false when c
// sets no cores limit (0: it may use every SM of each of its GPUs, which no figure states).
func RequestedCoresPercent(c ContainerRequest) (pct int64, ok bool) {
	if c.Count <= 0 {
		return 0, true
	}
	if c.CoresPercent <= 0 {
		return 0, false
	}
	return int64(c.Count) * int64(min(c.CoresPercent, 100)), true
}

// EffectiveMemoryMiB is the pod-level figure Kubernetes derives from the per-container
// RequestedMemoryMiB by its effective-request rule (k8s.io/component-helpers resource.PodRequests:
// the largest of each init phase and the final phase, PodRequest.Phases, case C03); what
// ResourceQuota and NodeResourcesFit count. Containers whose figure is unknown (a percentage)
// count 0. It never exceeds the sum over GPUs of the allocator's ChargeOf for any allocation of r
// (ChargeOf takes, per GPU, the largest phase; the sum of per-GPU maxima is at least the largest
// phase sum), and equals it when no classic init container holds a GPU, or when those land on
// GPUs of the final phase.
func EffectiveMemoryMiB(r PodRequest) int64 {
	var best int64
	for _, ph := range r.Phases() {
		var sum int64
		for _, i := range ph {
			if m, ok := RequestedMemoryMiB(r.Containers[i]); ok {
				sum += m
			}
		}
		best = max(best, sum)
	}
	return best
}
