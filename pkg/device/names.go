package device

import "fmt"

// ResourceNames are the extended-resource names pods use in their limits. They are configurable
// so a cluster that keeps NVIDIA's own device plugin can give hami-go other names.
type ResourceNames struct {
	// Count is the number of physical GPUs a container uses; every node advertises
	// split count devices per GPU under this name. Default "nvidia.com/gpu".
	Count string `json:"count"`
	// Memory is MiB of GPU memory per GPU (quantity rule: see ParseMemoryMiB). Default "nvidia.com/gpumem".
	Memory string `json:"memory"`
	// MemoryPercent is percent (1..100) of each GPU's memory. Default "nvidia.com/gpumem-percentage".
	MemoryPercent string `json:"memoryPercent"`
	// Cores is percent (0..100) of each GPU's compute; 100 = exclusive. Default "nvidia.com/gpucores".
	Cores string `json:"cores"`
}

// DefaultResourceNames returns the HAMi-compatible resource names.
func DefaultResourceNames() ResourceNames {
	return ResourceNames{
		Count:         "nvidia.com/gpu",
		Memory:        "nvidia.com/gpumem",
		MemoryPercent: "nvidia.com/gpumem-percentage",
		Cores:         "nvidia.com/gpucores",
	}
}

// Validate reports an empty or duplicated name.
func (n ResourceNames) Validate() error {
	seen := map[string]string{}
	for _, f := range []struct{ field, v string }{{"count", n.Count}, {"memory", n.Memory}, {"memoryPercent", n.MemoryPercent}, {"cores", n.Cores}} {
		if f.v == "" {
			return fmt.Errorf("resource name %s is empty", f.field)
		}
		if other, dup := seen[f.v]; dup {
			return fmt.Errorf("resource names %s and %s are both %q", other, f.field, f.v)
		}
		seen[f.v] = f.field
	}
	return nil
}

// Pod annotations a user may set (HAMi-compatible names).
const (
	// AnnoUseGPUType lists model tokens a container's GPUs must match, comma-separated (case C06).
	AnnoUseGPUType = "nvidia.com/use-gputype"
	// AnnoNoUseGPUType lists model tokens a container's GPUs must not match, comma-separated.
	AnnoNoUseGPUType = "nvidia.com/nouse-gputype"
	// AnnoUseGPUUUID lists the GPU UUIDs a pod may use, comma-separated.
	AnnoUseGPUUUID = "nvidia.com/use-gpuuuid"
	// AnnoNoUseGPUUUID lists the GPU UUIDs a pod must not use, comma-separated.
	AnnoNoUseGPUUUID = "nvidia.com/nouse-gpuuuid"
	// AnnoGPUPolicy picks GPUs on a node: "binpack" (default) or "spread".
	AnnoGPUPolicy = "hami.io/gpu-scheduler-policy"
	// AnnoNodePolicy scores nodes: "binpack" (default) or "spread".
	AnnoNodePolicy = "hami.io/node-scheduler-policy"
	// AnnoNUMABind is "true" when all GPUs of a multi-GPU container must share one NUMA node.
	AnnoNUMABind = "nvidia.com/numa-bind"
)

// Internal annotations, labels and names under the project's own prefix.
const (
	// Prefix of every internal annotation, label and Lease name.
	Prefix = "hami-go.io/"
	// AnnoInventory is the Node annotation holding the node's Inventory (EncodeInventory).
	AnnoInventory = Prefix + "inventory"
	// AnnoPlanned is the Pod annotation holding the Allocation the extender planned (EncodeAllocation).
	AnnoPlanned = Prefix + "allocation-planned"
	// AnnoClaimed is the Pod annotation holding the Allocation the device plugin claimed at
	// Allocate (EncodeAllocation). On rebuild the claimed record wins over the planned one.
	AnnoClaimed = Prefix + "allocation-claimed"
	// AnnoRequeue is the Pod annotation the extender sets on a pending pod its Filter refused
	// just before GPUs were released (RFC 3339 time of the release): the update makes
	// kube-scheduler retry the pod (pkg/extender requeue.go).
	AnnoRequeue = Prefix + "requeue"
	// LabelOptOut on a pod, with value "true", keeps the webhook away from it.
	LabelOptOut = Prefix + "ignore"
	// SchedulerName is the default name of the kube-scheduler profile that uses the extender.
	SchedulerName = "hami-go-scheduler"
	// LeasePrefix prefixes the name of each node's liveness Lease: LeasePrefix + node name.
	LeasePrefix = "hami-go-"
)
